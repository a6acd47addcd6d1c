"""mlflow: the default backend, a local sqlite store shared by every run under runs/.

The store defaults to `runs/mlruns.db` (for the default runs/<exp_name>/<timestamp>
layout), so `platform ui` shows every run; its artifacts (config.yaml, sample texts) go
to `mlartifacts/` beside the database file. Sample texts become an mlflow table per
logging step (`sample_texts/step_<N>.json`, shown in the run's Artifacts tab).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import mlflow

from flywheel.platform.trackers.base import SampleText, TrackerRun


def sqlite_artifact_uri(sqlite_uri: str) -> str:
    """`mlartifacts/` beside a sqlite store's database file."""
    db = Path(sqlite_uri.removeprefix("sqlite:///"))
    return (db.parent / "mlartifacts").resolve().as_uri()


RUN_ID_FILE = "mlflow_run_id"


@dataclass
class MlflowTracker:
    run_id: str

    @classmethod
    def open(cls, run: TrackerRun) -> MlflowTracker:
        os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
        # mlflow's INFO lines ("Creating initial MLflow database tables...") are backend
        # chatter on flywheel's console; its warnings still show.
        logging.getLogger("mlflow").setLevel(logging.WARNING)
        mlflow.set_tracking_uri(run.mlflow_uri)
        if (run.mlflow_uri.startswith("sqlite:///")
                and mlflow.get_experiment_by_name(run.experiment) is None):
            # A sqlite store has no artifact root of its own: without one, mlflow writes
            # artifacts to ./mlruns in whatever directory the run started from.
            mlflow.create_experiment(run.experiment,
                                     artifact_location=sqlite_artifact_uri(run.mlflow_uri))
        mlflow.set_experiment(run.experiment)
        # A resumed run continues its own mlflow run (the id is kept in the run directory).
        saved = run.output_dir / RUN_ID_FILE
        previous = saved.read_text().strip() if saved.exists() else None
        if previous and _run_exists(previous):
            return cls(run_id=mlflow.start_run(run_id=previous).info.run_id)
        active = mlflow.start_run(run_name=run.run_name)
        saved.write_text(active.info.run_id)
        mlflow.log_params(_flatten(run.params))
        config = run.output_dir / "config.yaml"
        if config.exists():
            mlflow.log_artifact(str(config))
        return cls(run_id=active.info.run_id)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        mlflow.log_metrics(metrics, step=step, run_id=self.run_id)

    def log_texts(self, step: int, samples: list[SampleText]) -> None:
        table = {"step": [step] * len(samples), "prompt": [s.prompt for s in samples],
                 "response": [s.response for s in samples],
                 "reward": [s.reward for s in samples]}
        mlflow.log_table(table, artifact_file=f"sample_texts/step_{step:06d}.json",
                         run_id=self.run_id)

    def close(self, status: str) -> None:
        mlflow.end_run(status=status)


def _run_exists(run_id: str) -> bool:
    try:
        mlflow.MlflowClient().get_run(run_id)
    except mlflow.exceptions.MlflowException:
        return False
    return True


def _flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = str(v)[:500]  # mlflow caps param values
    return out
