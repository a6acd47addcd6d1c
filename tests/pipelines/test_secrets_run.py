"""Issue 54 item 1 end to end: a real run whose config reads a secret from the environment
(`tracker_kwargs.api_key: ${oc.env:...}`) and names a data path through another variable
leaves neither value in any file of its run directory, its mlflow store (params included)
or its console output; config.yaml records the references."""

from __future__ import annotations

import contextlib
import io

import mlflow
import pytest
import yaml

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run

from .sync_example import EXAMPLE, SMALL

pytestmark = [pytest.mark.slow, pytest.mark.long]
SECRET = "sk-FAKE-4f1c9e2b7a0d"


def test_no_secret_value_in_any_file_or_mlflow_param(tmp_path, monkeypatch, ray_session,
                                                     arith_model_path):
    monkeypatch.setenv("FAKE_WANDB_API_KEY", SECRET)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "defaults": [str(EXAMPLE)],
        "tracker_kwargs": {"api_key": "${oc.env:FAKE_WANDB_API_KEY}"},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path}/mlruns.db"}}))
    out = tmp_path / "run"
    overrides = [o for o in SMALL if o != "tracking.mlflow=false"] + [
        "max_steps=1", "eval_steps=0", "validation=null", "save_steps=1",
        f"output_dir={out}"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        run(load_config(path, overrides), config_path=str(path))
    leaks = [p for p in tmp_path.rglob("*") if p.is_file() and p != path
             and SECRET.encode() in p.read_bytes()]
    assert leaks == []
    assert SECRET not in printed.getvalue()
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["tracker_kwargs"]["api_key"] == "${oc.env:FAKE_WANDB_API_KEY}"
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    [experiment] = [e for e in client.search_experiments() if e.name != "Default"]
    [mlrun] = client.search_runs([experiment.experiment_id])
    assert mlrun.data.params["tracker_kwargs.api_key"] == "${oc.env:FAKE_WANDB_API_KEY}"
    assert not any(SECRET in v for v in mlrun.data.params.values())
