"""One-line checks of a reward's scoring limits (workers/rewards/reward_limits.py says what
each does): `max_consecutive_timeouts`, `max_failed_steps` and `memory_mb`."""

from __future__ import annotations

from flywheel.config.schema import RewardConfig
from flywheel.platform.config.errors import ConfigError

DEFAULT_MEMORY_MB = 4096  # a rule reward's scoring process, unless memory_mb says otherwise
SANDBOX_HEADROOM_MB = 1024  # code_sandbox's scorer: its sandbox's memory_mb plus this
MIN_MEMORY_MB = 256  # Python, flywheel and a rule reward's imports


def check_reward_limits(name: str, cfg: RewardConfig) -> None:
    """ConfigError for a limit that cannot work (config checks, before any worker)."""
    key = f"rewards.{name}"
    for field in ("max_consecutive_timeouts", "max_failed_steps"):
        value = getattr(cfg, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError("", f"{key}.{field}", f"must be a whole number >= 0 (0: off), "
                                                    f"got {value!r}")
    memory = cfg.memory_mb
    if memory is None:
        return
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 0:
        raise ConfigError("", f"{key}.memory_mb", f"must be a whole number of MiB >= 0 "
                                                  f"(0: no limit), got {memory!r}")
    if 0 < memory < MIN_MEMORY_MB:
        raise ConfigError("", f"{key}.memory_mb", f"is {memory} MiB; a scoring process "
                                                  f"(Python and flywheel) needs at least "
                                                  f"{MIN_MEMORY_MB}")
    sandbox = cfg.code_sandbox.memory_mb
    if cfg.reward_type == "code_sandbox" and memory and memory < sandbox + SANDBOX_HEADROOM_MB:
        raise ConfigError("", f"{key}.memory_mb",
                          f"is {memory} MiB, below code_sandbox.memory_mb {sandbox} + "
                          f"{SANDBOX_HEADROOM_MB}: the sandboxed program cannot get more "
                          f"than its scoring process has; raise it or leave it unset")
