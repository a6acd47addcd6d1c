"""Tracker backends: where a run's numbers and sample texts go besides metrics.jsonl.

`platform.tracking.Tracker` writes metrics.jsonl (the run's own record, read by plots and
`platform runs`) and fans every step out to the backends `tracking.backends` names. A
backend is a class with three methods (`TrackerBackend` in base.py), opened from a
`TrackerRun`; each imports its library only when chosen, so a machine without wandb
still runs mlflow. To add a backend: one file in this folder, one line in BACKENDS (and
its name in `schema.TrackerName`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from flywheel.platform.config.catalogs import import_object
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.trackers.base import SampleText, TrackerBackend, TrackerRun

__all__ = ["BACKENDS", "SampleText", "TrackerBackend", "TrackerRun", "open_backend"]


@dataclass(frozen=True)
class BackendSpec:
    module: str
    cls: str
    requires: str  # module that must be importable
    install_hint: str


BACKENDS: dict[str, BackendSpec] = {
    "mlflow": BackendSpec("flywheel.platform.trackers.mlflow_tracker", "MlflowTracker",
                          "mlflow", "pip install 'mlflow>=3.17'"),
    "tensorboard": BackendSpec("flywheel.platform.trackers.tensorboard_tracker",
                               "TensorboardTracker", "tensorboard",
                               "pip install 'flywheel[trackers]' (or tensorboard>=2.18)"),
    "wandb": BackendSpec("flywheel.platform.trackers.wandb_tracker", "WandbTracker", "wandb",
                         "pip install 'flywheel[trackers]' (or wandb>=0.19)"),
}


def open_backend(name: str, run: TrackerRun) -> TrackerBackend:
    """The backend `name`, started for `run`; a missing library is a one-line config error."""
    spec = BACKENDS[name]
    if importlib.util.find_spec(spec.requires) is None:
        raise ConfigError("", "tracking.backends",
                          f"'{name}' needs the {spec.requires} package: {spec.install_hint}")
    backend_cls = import_object(f"{spec.module}:{spec.cls}")  # the one checked loader
    return backend_cls.open(run)
