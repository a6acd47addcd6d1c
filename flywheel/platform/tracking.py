"""Where a run's numbers go: metrics.jsonl, mlflow, and a progress line on the console.

`metrics.jsonl` is the source of truth (one JSON object per logged step, flushed as
written, so a killed run keeps every finished step); mlflow gets the same numbers in one
batched call per step; the console gets one line per `logging_steps` with step, reward,
rate and ETA. The mlflow store defaults to a sqlite file beside the runs
(`runs/mlruns.db` for the default `runs/<exp_name>/<timestamp>` layout) so
`mlflow ui --backend-store-uri sqlite:///runs/mlruns.db` shows every run; its artifacts
(the run's config.yaml) go to `runs/mlartifacts/`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from flywheel.platform.config.schema import TrackingConfig

# Shown on the progress line when present, in this order.
PROGRESS_KEYS = ("reward/mean", "val/accuracy", "staleness/mean", "env/success",
                 "val/env/success")


def default_mlflow_uri(output_dir: Path, output_dir_was_default: bool) -> str:
    root = output_dir.parent.parent if output_dir_was_default else output_dir
    return f"sqlite:///{(root / 'mlruns.db').resolve()}"


def sqlite_artifact_uri(sqlite_uri: str) -> str:
    """`mlartifacts/` beside a sqlite store's database file."""
    db = Path(sqlite_uri.removeprefix("sqlite:///"))
    return (db.parent / "mlartifacts").resolve().as_uri()


@dataclass
class Tracker:
    output_dir: Path
    total_steps: int
    logging_steps: int = 1
    mlflow_run: object | None = None
    _file: object | None = field(default=None, repr=False)
    _start: float = field(default_factory=time.monotonic, repr=False)
    _first_step: int | None = field(default=None, repr=False)

    @classmethod
    def open(cls, output_dir: Path, cfg: TrackingConfig, exp_name: str, run_name: str,
             total_steps: int, logging_steps: int, params: dict, mlflow_uri: str) -> Tracker:
        output_dir.mkdir(parents=True, exist_ok=True)
        tracker = cls(output_dir=output_dir, total_steps=total_steps,
                      logging_steps=max(1, logging_steps))
        tracker._file = open(output_dir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        if cfg.mlflow:
            import mlflow

            os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
            uri = cfg.mlflow_uri or mlflow_uri
            mlflow.set_tracking_uri(uri)
            name = cfg.experiment_name or exp_name
            if uri.startswith("sqlite:///") and mlflow.get_experiment_by_name(name) is None:
                # A sqlite store has no artifact root of its own: without one, mlflow
                # writes artifacts to ./mlruns in whatever directory the run started from.
                mlflow.create_experiment(name, artifact_location=sqlite_artifact_uri(uri))
            mlflow.set_experiment(name)
            tracker.mlflow_run = mlflow.start_run(run_name=run_name)
            mlflow.log_params(_flatten(params))
            mlflow.log_artifact(str(output_dir / "config.yaml"))
        return tracker

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self.mlflow_run is not None:
            import mlflow

            finite = {k.replace("@", "_at_"): float(v) for k, v in record.items()
                      if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)}
            mlflow.log_metrics(finite, step=step)
        if step % self.logging_steps == 0 or step == self.total_steps:
            print(self.progress_line(step, metrics), flush=True, file=sys.stdout)

    def progress_line(self, step: int, metrics: dict[str, float]) -> str:
        if step == 0:  # the evaluation before training
            return " | ".join(["baseline"] + [f"{k} {metrics[k]:.3f}" for k in PROGRESS_KEYS
                                              if k in metrics])
        if self._first_step is None:
            self._first_step, self._start = step - 1, time.monotonic() - metrics.get(
                "time/step", 0.0)
        done = step - self._first_step
        elapsed = time.monotonic() - self._start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (self.total_steps - step) / rate if rate > 0 else float("nan")
        parts = [f"step {step}/{self.total_steps}"]
        parts += [f"{k} {metrics[k]:.3f}" for k in PROGRESS_KEYS if k in metrics]
        parts += [f"{rate:.2f} step/s", f"ETA {_duration(eta)}"]
        return " | ".join(parts)

    def close(self, status: str = "FINISHED") -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.mlflow_run is not None:
            import mlflow

            mlflow.end_run(status=status)
            self.mlflow_run = None


def _plain(v):
    return float(v) if hasattr(v, "item") else v


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"


def _flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = str(v)[:500]  # mlflow caps param values
    return out
