"""`pipeline_type: evaluate` (flywheel/pipelines/evaluate/), the kind added through the
catalog as docs_site/docs/extending/pipeline-kinds.md says: `platform run` scores the
shipped tiny warm start on a dataset and trains nothing; what an evaluation has nothing to
do with is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from flywheel import cli
from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.errors import ConfigError

EXAMPLE = "examples/evaluate_tiny.yaml"


@pytest.mark.long  # a Ray run (~20 s idle): the suite keeps the in-process checks below
def test_platform_run_scores_a_checkpoint_without_training(tmp_path, ray_session, capsys):
    data = yaml.safe_load(Path(EXAMPLE).read_text())
    data["output_dir"] = str(tmp_path / "run")
    data["val_batch_size"] = 16  # 16 sums are enough to see scores
    path = tmp_path / "evaluate.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["run", "--config", str(path)]) == 0
    (record,) = [json.loads(line) for line in
                 (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert record["step"] == 0
    assert 0.0 < record["eval/accuracy"] <= 1.0  # the warm start adds some sums right
    assert record["eval/accuracy"] * 16 == pytest.approx(round(record["eval/accuracy"] * 16))
    assert record["eval/response_length"] > 0
    assert not any(k.startswith(("pg/", "loss/", "train/")) for k in record)  # no training
    assert not list((tmp_path / "run").glob("checkpoint-*"))
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "finished"


@pytest.mark.parametrize("key, value, message", [
    ("max_steps", 10, "max_steps: acts only with pipeline_type rlvr, agentic, agent, sft, dpo, "
                      "online_dpo, reward_model or distill"),
    ("adv_estimator", "reinforce", "evaluate does not read it: remove it"),
    ("num_return_sequences_in_group", 4, "evaluate does not read it: remove it"),
])
def test_what_an_evaluation_does_not_read_is_refused(key, value, message):
    data = {**yaml.safe_load(Path(EXAMPLE).read_text()), key: value}
    with pytest.raises(ConfigError, match=message):
        load_config_dict(data)
