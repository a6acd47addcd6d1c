"""The metric names a run's views show: plots.png's panels, the console's progress line, and
the reward and validation figures `platform runs` prints.

platform/ draws, prints and summarises what it is handed (plots.py, tracking.py,
run_status.py) and knows no metric name; these are the pipelines' (RLVR, agentic and SFT
names side by side: each is shown where a run logged it). A new pipeline's headline metric
is one name here.
"""

from __future__ import annotations

from flywheel.platform.plots import Panel

PANELS = (
    Panel("reward (train batch)", "mean score", ("reward/mean", "env/success")),
    Panel("validation", "accuracy / success", ("val/accuracy", "val/env/success"),
          points=True),
    Panel("staleness", "train step - policy version", ("staleness/mean", "staleness/max"),
          span=(0.0, 1.0),
          secondary=("rollout/dropped_stale",), secondary_label="samples dropped (x)",
          secondary_counts=True),
    Panel("throughput", "samples / s", ("throughput/samples_per_s",)),
    Panel("idle fraction of the step", "fraction", ("idle/actor_infer", "idle/actor_train"),
          ylim=(-0.02, 1.02)),
    Panel("seconds per phase", "s", ("time/step", "time/generate", "time/train",
                                     "time/wait_for_batch", "time/weight_sync",
                                     "time/logprobs", "time/score"),
          secondary=("time/validate",), secondary_label="validation s (x)"),
)

# Shown on the progress line when present, in this order.
PROGRESS_KEYS = ("reward/mean", "sft/loss", "val/loss", "val/accuracy", "staleness/mean",
                 "env/success", "val/env/success")
# The figure a summary shows for "reward" and "validation", first present wins
# (RLVR, then agentic).
REWARD_KEYS = ("reward/mean", "env/success")
VALIDATION_KEYS = ("val/accuracy", "val/env/success")
