"""A resumed run logs to its own mlflow run (the id is kept in the run directory), and its
history loses the steps after the checkpoint (lost with a kill, then logged again)."""

from __future__ import annotations

import mlflow

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


def history(run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in
                  mlflow.MlflowClient().get_metric_history(run_id, key))


def killed_at_4_resumed_from_2(tmp_path, uri: str) -> tuple[str, str]:
    """Steps 1..4 logged, the process killed, a resume from checkpoint 2 logs 3..5."""
    run = TrackerRun(output_dir=tmp_path, experiment="resume", run_name="r", params={"a": 1},
                     mlflow_uri=uri)
    first = MlflowTracker.open(run)
    for step in range(1, 5):
        first.log_metrics(step, {"x": float(step), **({"late": 1.0} if step > 2 else {})})
    first.close("KILLED")
    second = MlflowTracker.open(TrackerRun(**{**run.__dict__, "resumed_at": 2}))
    for step in range(3, 6):
        second.log_metrics(step, {"x": 10.0 * step})
    second.close("FINISHED")
    return first.run_id, second.run_id


def test_resume_drops_the_steps_after_the_checkpoint_from_the_same_run(tmp_path):
    first, second = killed_at_4_resumed_from_2(tmp_path, f"sqlite:///{tmp_path}/mlruns.db")
    assert second == first
    assert history(first, "x") == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0), (5, 50.0)]
    assert history(first, "late") == []  # logged only by the lost steps
    run = mlflow.MlflowClient().get_run(first)
    assert run.data.metrics == {"x": 50.0}  # the latest values, recomputed


def test_resume_on_a_store_it_cannot_edit_starts_a_run_with_the_kept_history(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a store that is not sqlite
    first, second = killed_at_4_resumed_from_2(tmp_path, (tmp_path / "mlruns").as_uri())
    assert second != first and (tmp_path / RUN_ID_FILE).read_text() == second
    assert history(second, "x") == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0), (5, 50.0)]
    assert history(second, "late") == []
    assert mlflow.MlflowClient().get_run(second).data.tags["flywheel.resumed_from"] == first
