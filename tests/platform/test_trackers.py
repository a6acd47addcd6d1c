"""Each tracker backend, read back from what it wrote: same metric names, same numbers.

No Ray and no model: a Tracker is opened from a config, fed three steps and a few sample
texts, closed, and then each backend's own files are read with that backend's reader
(mlflow's client, tensorboard's EventAccumulator, wandb's record format).
"""

from __future__ import annotations

import glob
import json
import struct
import time
from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.trackers import SampleText
from flywheel.platform.tracking import Tracker, backend_names

EXAMPLE = "examples/rlvr_sync.yaml"
STEPS = {
    0: {"val/accuracy": 0.25},
    1: {"reward/mean": 0.5, "time/step": 1.5, "pass@1": 0.5},
    2: {"reward/mean": 0.75, "time/step": 1.25, "val/accuracy": 0.5,
        "loss/policy": float("nan")},  # not finite: metrics.jsonl only
}
EXPECTED = {  # what every backend holds: finite values, '@' spelled _at_ (mlflow's rule)
    "val/accuracy": {0: 0.25, 2: 0.5},
    "reward/mean": {1: 0.5, 2: 0.75},
    "time/step": {1: 1.5, 2: 1.25},
    "pass_at_1": {1: 0.5},
}
TEXTS = [SampleText("12+34=", "046", 1.0), SampleText("1+2=", "04|", 0.0)]


def write_run(tmp_path, backends: str, *extra: str):
    out = tmp_path / "run"
    cfg = load_config(EXAMPLE, [f"tracking.backends={backends}", f"output_dir={out}",
                                "max_steps=2", "tracking.sample_text_steps=2", *extra])
    out.mkdir()
    (out / "config.yaml").write_text("exp_name: test\n")
    tracker = Tracker.open(out, cfg, "run", params={"seed": 1, "actor_train": {"lr": 1e-5}},
                           mlflow_uri=f"sqlite:///{tmp_path}/mlruns.db")
    for step, metrics in STEPS.items():
        tracker.log(step, metrics)
        if tracker.wants_texts(step):
            tracker.log_texts(step, TEXTS)
    tracker.close("FINISHED")
    return out, tracker


def test_backend_names_roll_track_with_and_mlflow_switch():
    def names(*overrides):
        return backend_names(load_config(EXAMPLE, list(overrides)))

    assert names() == ["mlflow"]
    assert names("track_with=tensorboard") == ["tensorboard"]
    assert names("track_with=stdout") == []  # ROLL's console tracker: metrics.jsonl only
    assert names("tracking.backends=[mlflow,jsonl]") == ["mlflow"]
    assert names("tracking.mlflow=false") == []
    # beside tracking.backends, track_with and the mlflow switch would do nothing: refused
    for extra in ("track_with=wandb", "tracking.mlflow=false"):
        with pytest.raises(ConfigError, match="acts only without tracking.backends"):
            names(extra, "tracking.backends=[mlflow,jsonl]")
    assert names("tracking.backends=[tensorboard,wandb,tensorboard]") == ["tensorboard",
                                                                          "wandb"]


def test_jsonl_metrics_and_sample_texts(tmp_path):
    out, _ = write_run(tmp_path, "[jsonl]")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    assert records[1]["pass@1"] == 0.5  # the run's own record keeps the original name
    texts = [json.loads(line) for line in (out / "sample_texts.jsonl").read_text().splitlines()]
    assert texts == [{"step": step, **row} for step in (1, 2) for row in (
        {"prompt": "12+34=", "response": "046", "reward": 1.0},
        {"prompt": "1+2=", "response": "04|", "reward": 0.0})]  # the first and last step


def test_sample_texts_at_the_first_and_the_last_step_and_every_n(tmp_path):
    """A 3-step trial shows what the model wrote (issue 44 item 7)."""
    tracker = Tracker(output_dir=tmp_path, total_steps=25, sample_text_steps=10)
    assert [s for s in range(26) if tracker.wants_texts(s)] == [1, 10, 20, 25]
    assert not Tracker(tmp_path, 25, sample_text_steps=0).wants_texts(1)  # 0: never


def test_the_progress_line_says_its_rate_is_an_average(tmp_path):
    line = Tracker(output_dir=tmp_path, total_steps=4).progress_line(1, {"time/step": 2.0})
    assert "avg 2.0 s/step" in line


def test_mlflow_read_back(tmp_path):
    import mlflow

    write_run(tmp_path, "[mlflow]", "exp_name=trackers")
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlruns.db")
    run = client.search_runs([client.get_experiment_by_name("trackers").experiment_id])[0]
    assert run.info.status == "FINISHED"
    assert run.data.params["actor_train.lr"] == "1e-05"
    got = {name: {m.step: m.value for m in client.get_metric_history(run.info.run_id, name)}
           for name in EXPECTED}
    assert got == EXPECTED
    assert "loss/policy" not in run.data.metrics
    table = client.download_artifacts(run.info.run_id, "sample_texts/step_000002.json",
                                      str(tmp_path))
    data = json.loads(Path(table).read_text())
    assert data["columns"] == ["step", "prompt", "response", "reward"]
    assert data["data"][0] == [2, "12+34=", "046", 1.0]


def test_tensorboard_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, _ = write_run(tmp_path, "[tensorboard]")
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0,
                                                                       "tensors": 0})
    events.Reload()
    got = {tag: {e.step: pytest.approx(e.value) for e in events.Scalars(tag)}
           for tag in events.Tags()["scalars"]}
    assert got == EXPECTED
    text = events.Tensors("sample_texts/text_summary")[-1]  # step 1 (the first) too
    assert text.step == 2
    cell = text.tensor_proto.string_val[0].decode()
    assert "| 12+34= | 046 | 1 |" in cell and "| 1+2= | 04\\| | 0 |" in cell


def test_wandb_offline_read_back(tmp_path):
    out, _ = write_run(tmp_path, "[wandb]", "tracker_kwargs.project=flywheel-test",
                       "tracker_kwargs.tags=ci")
    [run_file] = glob.glob(str(out / "wandb" / "offline-run-*" / "run-*.wandb"))
    records = read_complete_wandb_records(run_file)
    history = [{(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                for i in r.history.item} for r in records if r.HasField("history")]
    got: dict = {}
    for row in history:
        for name, value in row.items():
            if name in EXPECTED:
                got.setdefault(name, {})[row["_step"]] = value
    kinds = [r.WhichOneof("record_type") for r in records]
    core_log = Path(run_file).parent / "logs" / "debug-internal.log"
    assert got == EXPECTED, (kinds, core_log.read_text()[-3000:] if core_log.exists() else "")
    texts = [row for row in history if "sample_texts/_type" in row]
    assert texts and texts[-1]["_step"] == 2 and texts[-1]["sample_texts/nrows"] == 2
    [run] = [r.run for r in records if r.HasField("run")]
    assert run.project == "flywheel-test" and list(run.tags) == ["ci"]


def read_complete_wandb_records(path: str, wait_s: float = 10.0) -> list:
    """The records once the run's exit record is on disk. CI once read a file holding no
    history at all (a run that passes everywhere else); should wandb's service still be
    writing after finish() returns, this waits for it instead of reading half a file.
    A run whose records never complete still fails, with what the file held."""
    deadline = time.monotonic() + wait_s
    while True:
        records = read_wandb_records(path)
        if any(r.HasField("exit") for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def read_wandb_records(path: str) -> list:
    """The protobuf records of a .wandb file: a 7-byte header, then LevelDB-log blocks
    of 32 KiB whose chunks (7-byte header: crc, length, type) join into records."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    block, pos, buf, payloads = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        if kind == 0 and length == 0:  # zero fill at the end of a block
            pos += left - 7
            continue
        buf += data[pos:pos + length]
        pos += length
        if kind in (1, 4):  # FULL or LAST chunk: a record is complete
            payloads.append(buf)
            buf = b""
    return [wandb_internal_pb2.Record.FromString(p) for p in payloads]


def test_unknown_tracker_kwargs_key_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="tracker_kwargs.projet: unknown key"):
        write_run(tmp_path, "[jsonl]", "tracker_kwargs.projet=x")
