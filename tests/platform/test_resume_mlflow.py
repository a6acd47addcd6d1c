"""A resumed run logs to its own mlflow run (the id is kept in the run directory)."""

from __future__ import annotations

from flywheel.platform.trackers.base import TrackerRun
from flywheel.platform.trackers.mlflow_tracker import RUN_ID_FILE, MlflowTracker


def test_resumed_run_continues_its_mlflow_run(tmp_path):
    run = TrackerRun(output_dir=tmp_path, experiment="resume", run_name="r", params={"a": 1},
                     mlflow_uri=f"sqlite:///{tmp_path}/mlruns.db")
    first = MlflowTracker.open(run)
    first.log_metrics(1, {"x": 1.0})
    first.close("KILLED")
    second = MlflowTracker.open(run)
    second.log_metrics(2, {"x": 2.0})
    second.close("FINISHED")
    assert second.run_id == first.run_id == (tmp_path / RUN_ID_FILE).read_text()
