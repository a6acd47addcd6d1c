"""What every tracker backend receives and must offer (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from flywheel.platform.config.errors import ConfigError

# ROLL's tracker_kwargs keys flywheel reads. api_key is accepted and ignored: wandb runs
# offline here, and a key in a config file is better kept out of every log.
TRACKER_KWARGS = ("project", "name", "notes", "tags", "log_dir", "api_key")


@dataclass(frozen=True)
class SampleText:
    """One trained sample as text, for reading what the policy writes."""

    prompt: str
    response: str
    reward: float


@dataclass(frozen=True)
class TrackerRun:
    """Everything a backend needs to start: where, under which names, with which config."""

    output_dir: Path
    experiment: str  # mlflow experiment, wandb project
    run_name: str
    params: dict  # the resolved config, nested
    options: dict = field(default_factory=dict)  # ROLL's tracker_kwargs
    mlflow_uri: str = ""  # the store to use when tracking.mlflow_uri is unset
    # A resumed run's checkpoint step: what a backend holds of later steps was lost with
    # the process that logged it (mlflow drops it; see mlflow_tracker.py). None: a new run.
    resumed_at: int | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.options) - set(TRACKER_KWARGS))
        if unknown:
            raise ConfigError("", f"tracker_kwargs.{unknown[0]}",
                              f"unknown key; flywheel reads {', '.join(TRACKER_KWARGS)}")

    def log_dir(self, default: str) -> Path:
        """tracker_kwargs.log_dir, else <output_dir>/<default>."""
        return Path(self.options.get("log_dir") or self.output_dir / default)


class TrackerBackend(Protocol):
    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        """Finite numbers only, the same names metrics.jsonl holds."""

    def log_texts(self, step: int, samples: list[SampleText]) -> None: ...

    def close(self, status: str) -> None:
        """status: FINISHED, FAILED or KILLED (mlflow's names)."""
