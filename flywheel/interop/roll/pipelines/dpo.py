"""ROLL's DPO pipeline (examples/start_dpo_pipeline.py, roll/pipeline/dpo/dpo_config.py).

Its roles are actor_train and reference (the shared worker blocks); its own keys are the
preference loss's and the data's columns. flywheel does not run it yet (`runs_as` None):
each of these keys is reported as needing it. The preference-learning work (issue 46)
fills in `runs_as` and a `fit` that maps these keys.
"""

from flywheel.interop.roll.pipelines.pipeline import RollPipeline

KEYS = {"ipo": False, "beta": 0.1, "label_smoothing": 0.0, "chosen_key": "chosen",
        "rejected_key": "rejected"}

PIPELINE = RollPipeline(name="dpo", title="DPO", launcher="examples/start_dpo_pipeline.py",
                        roles=(), keys=KEYS)
