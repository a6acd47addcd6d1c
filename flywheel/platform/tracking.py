"""Where a run's numbers go: metrics.jsonl, the tracker backends, and a progress line.

`metrics.jsonl` is the source of truth (one JSON object per logged step, flushed as
written, so a killed run keeps every finished step; plots and `platform runs` read it).
Every step is also handed to the backends `tracking.backends` names (mlflow by default;
tensorboard, wandb offline; see `platform/trackers/`), with the same metric names and
only finite numbers. The console gets one line per `logging_steps` with step, the metrics
the caller names (`progress_keys`), the average rate since the run (or its resume) started
("avg", where metrics' time/step is each step's own) and ETA. Sample texts (prompt,
response, reward) go to `sample_texts.jsonl` in the run directory and to every backend,
every `tracking.sample_text_steps` steps and at the first and last step.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from flywheel.platform.trackers import SampleText, TrackerBackend, TrackerRun, open_backend

SAMPLE_TEXTS_FILE = "sample_texts.jsonl"


class TrackedConfig(Protocol):
    """What the tracker reads of a run's config (flywheel/config/schema/ declares them)."""

    tracking: Any  # the `tracking:` block: backends, mlflow, mlflow_uri, experiment_name, ...
    track_with: str | None  # ROLL's tracker switch
    tracker_kwargs: dict[str, Any]  # ROLL's tracker options
    exp_name: str
    max_steps: int
    logging_steps: int


def default_mlflow_uri(output_dir: Path, output_dir_was_default: bool) -> str:
    root = output_dir.parent.parent if output_dir_was_default else output_dir
    return f"sqlite:///{(root / 'mlruns.db').resolve()}"


def backend_names(cfg: TrackedConfig) -> list[str]:
    """tracking.backends, else ROLL's track_with, else mlflow; `tracking.mlflow: false`
    removes mlflow; jsonl (metrics.jsonl) is always written and needs no backend."""
    names = cfg.tracking.backends
    if names is None:
        names = [cfg.track_with] if cfg.track_with else ["mlflow"]
    return [n for n in dict.fromkeys(names)
            if n not in ("jsonl", "stdout") and (n != "mlflow" or cfg.tracking.mlflow)]


@dataclass
class Tracker:
    output_dir: Path
    total_steps: int
    logging_steps: int = 1
    sample_text_steps: int = 0
    sample_text_count: int = 0
    # metrics shown on the progress line when present, in this order (the caller's names:
    # pipelines/run/metric_views.py PROGRESS_KEYS)
    progress_keys: tuple[str, ...] = ()
    backends: dict[str, TrackerBackend] = field(default_factory=dict)
    _file: object | None = field(default=None, repr=False)
    _texts: object | None = field(default=None, repr=False)
    _start: float = field(default_factory=time.monotonic, repr=False)
    _first_step: int | None = field(default=None, repr=False)

    @classmethod
    def open(cls, output_dir: Path, cfg: TrackedConfig, run_name: str, params: dict,
             mlflow_uri: str, resumed_at: int | None = None,
             progress_keys: tuple[str, ...] = (), total_steps: int | None = None) -> Tracker:
        """`total_steps`: the run's step count where it is not `max_steps` (SFT's
        num_train_epochs), so the progress line says "step k/<steps>" of the run it is."""
        output_dir.mkdir(parents=True, exist_ok=True)
        tracking = cfg.tracking
        tracker = cls(output_dir=output_dir,
                      total_steps=cfg.max_steps if total_steps is None else total_steps,
                      logging_steps=max(1, cfg.logging_steps),
                      sample_text_steps=tracking.sample_text_steps,
                      sample_text_count=tracking.sample_text_count,
                      progress_keys=progress_keys)
        tracker._file = open(output_dir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        run = TrackerRun(output_dir=output_dir,
                         experiment=tracking.experiment_name or cfg.exp_name,
                         run_name=run_name, params=params, options=dict(cfg.tracker_kwargs),
                         mlflow_uri=tracking.mlflow_uri or mlflow_uri, resumed_at=resumed_at)
        try:
            for name in backend_names(cfg):
                tracker.backends[name] = open_backend(name, run)
        except BaseException:
            tracker.close("FAILED")
            raise
        return tracker

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        finite = {k.replace("@", "_at_"): float(v) for k, v in record.items()
                  if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)}
        for backend in self.backends.values():
            backend.log_metrics(step, finite)
        if step % self.logging_steps == 0 or step == self.total_steps:
            print(self.progress_line(step, metrics), flush=True, file=sys.stdout)

    def wants_texts(self, step: int) -> bool:
        """Every sample_text_steps steps, and at the first and the last step, so a short
        trial shows what the model wrote (0 turns them off)."""
        return step > 0 and self.sample_text_steps > 0 and (
            step % self.sample_text_steps == 0 or step in (1, self.total_steps))

    def log_texts(self, step: int, samples: list[SampleText]) -> None:
        """The first `sample_text_count` samples, to sample_texts.jsonl and every backend."""
        samples = samples[: self.sample_text_count]
        if not samples:
            return
        if self._texts is None:
            self._texts = open(self.output_dir / SAMPLE_TEXTS_FILE, "a",  # noqa: SIM115
                               encoding="utf-8")
        for sample in samples:
            self._texts.write(json.dumps({"step": step, **asdict(sample)}) + "\n")
        self._texts.flush()
        for backend in self.backends.values():
            backend.log_texts(step, samples)

    def progress_line(self, step: int, metrics: dict[str, float]) -> str:
        if step == 0:  # the evaluation before training
            return " | ".join(["baseline"] + [f"{k} {metrics[k]:.3f}" for k in self.progress_keys
                                              if k in metrics])
        if self._first_step is None:
            self._first_step, self._start = step - 1, time.monotonic() - metrics.get(
                "time/step", 0.0)
        done = step - self._first_step
        elapsed = time.monotonic() - self._start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (self.total_steps - step) / rate if rate > 0 else float("nan")
        parts = [f"step {step}/{self.total_steps}"]
        parts += [f"{k} {metrics[k]:.3f}" for k in self.progress_keys if k in metrics]
        # a real model takes seconds per step: "0.01 step/s" would say nothing. "avg": the
        # mean since this process's first step (metrics' time/step is each step's own)
        speed = f"avg {rate:.2f} step/s" if rate >= 1 else (
            f"avg {1 / rate:.1f} s/step" if rate > 0 else "avg - s/step")
        parts += [speed, f"ETA {_duration(eta)}"]
        return " | ".join(parts)

    def close(self, status: str = "FINISHED") -> None:
        """status: FINISHED, FAILED or KILLED. Every backend is closed, even if one fails."""
        for handle in (self._file, self._texts):
            if handle is not None:
                handle.close()
        self._file = self._texts = None
        backends, self.backends = self.backends, {}
        failures = []
        for backend in backends.values():
            try:
                backend.close(status)
            except Exception as error:  # noqa: BLE001 (close the others, then raise)
                failures.append(error)
        if failures:
            raise failures[0]


def _plain(v):
    return float(v) if hasattr(v, "item") else v


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"
