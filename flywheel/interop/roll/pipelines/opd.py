"""ROLL's on-policy distillation (examples/start_onpolicy_distill_pipeline.py): RLVR or
agentic (`pure_opd_pipeline_type`) with a teacher, its roles renamed student_train /
student_infer (roll/pipeline/rlvr/rlvr_config.py `_handle_opd_mapping`). The rest of the
file is that pipeline's. flywheel does not run it yet (`runs_as` None): these keys are
reported as needing it. The distillation work (issue 45) fills in `runs_as` and a `fit`.
"""

from flywheel.interop.roll.pipelines.pipeline import RollPipeline

KEYS = {"is_pure_opd": False, "use_opd": False, "pure_opd_pipeline_type": "rlvr"}

PIPELINE = RollPipeline(name="opd", title="on-policy distillation",
                        launcher="examples/start_onpolicy_distill_pipeline.py",
                        roles=("student_train", "student_infer", "teacher"), keys=KEYS)
