"""ROLL's RLVR pipeline (examples/start_rlvr_pipeline.py, roll/pipeline/rlvr/rlvr_config.py):
flywheel's rlvr. Its keys are the shared tables (interop/roll/keys.py TOP and the blocks)."""

from flywheel.interop.roll.pipelines.pipeline import RollPipeline

PIPELINE = RollPipeline(name="rlvr", title="RLVR", launcher="examples/start_rlvr_pipeline.py",
                        roles=(), runs_as="rlvr")
