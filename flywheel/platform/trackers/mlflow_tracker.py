"""mlflow: the default backend, a local sqlite store shared by every run under runs/.

The store defaults to `runs/mlruns.db` (for the default runs/<exp_name>/<timestamp>
layout), so `platform ui` shows every run; its artifacts (config.yaml, sample texts) go
to `mlartifacts/` beside the database file. Sample texts become an mlflow table per
logging step (`sample_texts/step_<N>.json`, shown in the run's Artifacts tab).

A resumed run continues its own mlflow run, whose history may hold steps lost with the
process that logged them (trained after the checkpoint, then trained again). mlflow has no
call that deletes metric values, so on a sqlite store (the default) those rows are deleted
from its `metrics` table and `latest_metrics` recomputed, in one transaction before the
run continues; on any other store (a tracking server) the run goes on in a new mlflow run
holding the history up to the checkpoint (tagged `flywheel.resumed_from` with the old id).
Either way the history a resumed run shows has one value per step, the one that stayed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
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
            if run.resumed_at is None:
                return cls(run_id=mlflow.start_run(run_id=previous).info.run_id)
            if run.mlflow_uri.startswith("sqlite:///"):
                drop_steps_after(run.mlflow_uri.removeprefix("sqlite:///"), previous,
                                 run.resumed_at)
                return cls(run_id=mlflow.start_run(run_id=previous).info.run_id)
        active = mlflow.start_run(run_name=run.run_name)
        saved.write_text(active.info.run_id)
        mlflow.log_params(_flatten(run.params))
        if previous and _run_exists(previous) and run.resumed_at is not None:
            copy_history(previous, active.info.run_id, run.resumed_at)
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


def drop_steps_after(db_path: str, run_id: str, step: int) -> int:
    """Delete run `run_id`'s metric values of steps after `step` from a sqlite mlflow store
    and recompute its latest values (mlflow's choice: highest step, then time, then value);
    one transaction. Returns the values deleted."""
    with contextlib.closing(sqlite3.connect(db_path, timeout=60)) as db, db:
        dropped = db.execute("DELETE FROM metrics WHERE run_uuid = ? AND step > ?",
                             (run_id, step)).rowcount
        db.execute("DELETE FROM latest_metrics WHERE run_uuid = ? AND key NOT IN "
                   "(SELECT key FROM metrics WHERE run_uuid = ?)", (run_id, run_id))
        db.execute("UPDATE latest_metrics SET (value, timestamp, step, is_nan) = "
                   "(SELECT m.value, m.timestamp, m.step, m.is_nan FROM metrics m "
                   " WHERE m.run_uuid = latest_metrics.run_uuid AND m.key = latest_metrics.key "
                   " ORDER BY m.step DESC, m.timestamp DESC, m.value DESC LIMIT 1) "
                   "WHERE run_uuid = ? AND step > ?", (run_id, step))
    return dropped


def copy_history(source: str, target: str, step: int) -> None:
    """Run `source`'s metric values of steps up to `step` into run `target`, and a tag
    naming the source (a store flywheel cannot edit: the resumed run starts a new one)."""
    client = mlflow.MlflowClient()
    kept = [m for key in client.get_run(source).data.metrics
            for m in client.get_metric_history(source, key) if m.step <= step]
    for start in range(0, len(kept), 1000):  # mlflow's limit per batch
        client.log_batch(target, metrics=kept[start:start + 1000])
    client.set_tag(target, "flywheel.resumed_from", source)


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
