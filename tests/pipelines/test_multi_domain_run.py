"""Two domains end to end: arithmetic split into tags `a` and `b` (two JSONL files), each
scored by its own math_rule reward, mixed 3:1 by domain_interleave_probs, through real Ray
actors on the random-init tiny model (mechanics, not learning)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.prompt_data import resolve_data_file
from flywheel.pipelines.run.launch import run

ROOT = Path(__file__).parents[2]


def write_tagged(src: str, out: Path, count: int) -> tuple[Path, Path]:
    """The first `count` records of `src`, alternately tagged a and b, one file per tag."""
    rows = [json.loads(line) for line in resolve_data_file(src).read_text().splitlines()]
    files = (out / f"{out.name}_a.jsonl", out / f"{out.name}_b.jsonl")
    for path, tag, part in zip(files, "ab", (rows[:count:2], rows[1:count:2])):
        path.write_text("".join(json.dumps({**r, "tag": tag}) + "\n" for r in part))
    return files


def metric_registry_explains():
    spec = importlib.util.spec_from_file_location("docs_site_generate",
                                                  ROOT / "docs_site" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    registry = module.metric_registry()
    return lambda name: module.explained(name, registry) is not None


@pytest.mark.slow  # about 17 s on 2 cores (validation generates 2 tokens too)
def test_two_tagged_domains_are_mixed_and_reported_per_tag(tmp_path, ray_session,
                                                           tiny_model_path, capsys):
    """Also the docs' check that an RLVR run logs only metrics docs_site/metrics.yaml
    explains, with the settings that add names at run time (entropy, off-policy terms)."""
    (tmp_path / "train").mkdir()
    (tmp_path / "val").mkdir()
    train_a, train_b = write_tagged("builtin://arithmetic/train", tmp_path / "train", 40)
    val_a, val_b = write_tagged("builtin://arithmetic/val", tmp_path / "val", 8)
    cfg = load_config_dict({
        "exp_name": "domains", "output_dir": str(tmp_path / "run"),
        "pretrain": "builtin://tiny-qwen2",  # random init: the mix and metrics, not learning
        "max_steps": 1, "eval_steps": 1, "logging_steps": 100, "prompt_length": 16,
        "response_length": 2,  # training and validation responses alike
        "rollout_batch_size": 4, "num_return_sequences_in_group": 2,
        "entropy_loss_coef": 0.01,                        # entropy/*
        "infer_is_correction": "token-truncate",          # offpolicy/* applied
        "tracking": {"backends": ["jsonl"], "sample_text_steps": 0},
        "actor_train": {"device_mapping": [0],
                        "training_args": {"per_device_train_batch_size": 8},
                        "data_args": {"file_name": [str(train_a), str(train_b)],
                                      "domain_interleave_probs": {"a": 0.75, "b": 0.25}}},
        "actor_infer": {"device_mapping": [0]},
        "rewards": {"math_a": {"tag_included": ["a"]},   # one reward per domain
                    "math_b": {"tag_included": ["b"]}},
        "validation": {"data_args": {"file_name": [str(val_a), str(val_b)]}},
    })
    run_dir = run(cfg)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] > 0]
    assert len(steps) == 1
    for r in steps:  # 0.75 and 0.25 of 4 prompts: 3 of a and 1 of b every batch
        assert (r["reward/a/prompts"], r["reward/b/prompts"]) == (3, 1)
        assert 0 <= r["reward/a/mean"] <= 1 and 0 <= r["reward/b/mean"] <= 1
    validated = [r for r in rows if "val/accuracy" in r]
    assert [r["step"] for r in validated] == [0, 1]
    for r in validated:  # 4 validation records per tag, equally many: the mean of the two
        assert r["val/accuracy"] == (r["val/a/accuracy"] + r["val/b/accuracy"]) / 2
    explains = metric_registry_explains()
    assert not [k for r in rows for k in r if k != "step" and not explains(k)]
    for expected in ("reward/mean", "reward/timed_out", "entropy/mean", "offpolicy/k3_kl",
                     "actor/grad_norm", "time/train", "time/step", "time/weight_load"):
        assert expected in steps[0], expected
    # one node: the syncs went through shared memory (workers/weight_shm.py)
    assert "weight sync: shared memory" in capsys.readouterr().out
