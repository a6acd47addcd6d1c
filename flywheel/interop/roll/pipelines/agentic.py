"""ROLL's agentic pipeline (examples/start_agentic_pipeline.py,
roll/pipeline/agentic/agentic_config.py): flywheel's agentic. Its keys are the shared tables
(interop/roll/keys.py TOP, ENV_MANAGER_EXTRA and the blocks)."""

from flywheel.interop.roll.pipelines.pipeline import RollPipeline

PIPELINE = RollPipeline(name="agentic", title="agentic",
                        launcher="examples/start_agentic_pipeline.py", roles=(),
                        runs_as="agentic")
