"""The limits a reward's scoring runs under beside `sample_timeout_s` (issues 44 and 53),
their checks are config/reward_limit_checks.py's.

- `memory_mb`: the address-space limit (RLIMIT_AS, MiB) of each scoring process and of
  every process it starts (process_tree.py). Unset: DEFAULT_MEMORY_MB for a rule reward
  (code_sandbox: at least its sandbox's `memory_mb` plus SANDBOX_HEADROOM_MB, since a
  sandboxed program cannot be given more than its scorer has), none for a reward that
  loads a model (its weights' size is the model's); 0: no limit.
- `max_consecutive_timeouts`: a reward worker whose samples time out this many times in
  a row (no sample answered between) declares the reward broken: time_limit.RewardHangs,
  which stops the run. Without it a function that always hangs costs `sample_timeout_s` per
  sample, in silence: at the defaults, 256 samples are two hours a step.
- `max_failed_steps`: a reward that scores none of its samples (each failed, went
  unscored, timed out or crashed) in this many steps in a row stops the run
  (pipelines/rlvr/reward_health.py).
0 turns the last two off.
"""

from __future__ import annotations

from flywheel.config.checks.reward_limits import DEFAULT_MEMORY_MB, SANDBOX_HEADROOM_MB
from flywheel.config.derived import loads_model
from flywheel.config.schema import RewardConfig
from flywheel.workers.rewards.registry import reward_spec


def memory_limit_mb(cfg: RewardConfig) -> int:
    """The scoring processes' address-space limit in MiB as the module docstring says;
    0: none. A reward registered only in another process counts as a rule reward here
    (the driver resolves the limit before it starts the workers: pipelines/roles)."""
    if cfg.memory_mb is not None:
        return cfg.memory_mb
    try:
        kind = reward_spec(cfg.reward_type).kind
    except ValueError:
        kind = "rule"
    if kind == "model" or loads_model(cfg):
        return 0
    if cfg.reward_type == "code_sandbox":
        return max(DEFAULT_MEMORY_MB, cfg.code_sandbox.memory_mb + SANDBOX_HEADROOM_MB)
    return DEFAULT_MEMORY_MB
