"""ROLL's offline distillation pipeline (examples/start_distill_pipeline.py and
start_distill_vl_pipeline.py, roll/pipeline/distill/distill_config.py).

A student trained on a teacher's logits over fixed data: roles `student` and `teacher`,
their models `student_pretrain` / `teacher_pretrain`, and the divergence's keys. flywheel
does not run it yet (`runs_as` None): each key is reported as needing it. The distillation
work (issue 45) fills in `runs_as` and a `fit` that maps them.
"""

from flywheel.interop.roll.pipelines.pipeline import RollPipeline

KEYS = {"student_pretrain": None, "teacher_pretrain": None, "question_key": "question",
        "answer_key": "answer", "logits_topk": 64, "distill_loss_weight": 0.5,
        "kd_temperature": 1, "teacher_temperature": 1, "kd_objective": "forward_kl",
        "adaptive_kl_alpha": 0.5, "skew_lambda": 0.1, "distill_on_prompt": False,
        "logits_transfer_backend": "ipc+nccl"}

PIPELINE = RollPipeline(name="distill", title="offline distillation",
                        launcher="examples/start_distill_pipeline.py",
                        roles=("student", "teacher"), keys=KEYS)
