"""The metrics page explains every metric a run logs.

Two nets: a scan of the code for metric names written as literals (dict keys and
`metrics["..."] = ...`), which reaches backends and settings no short run exercises, and a
short real run of each pipeline with most optional metrics switched on, whose
metrics.jsonl keys (names built at run time: `time/<phase>`, `env/<tag>/...`) must all be
explained by the page's registry (docs_site/metrics.yaml). The critic's names (`vf/`,
`critic/`) are left to the scan: a critic run would double this test's time.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from flywheel.pipelines.launch import run
from flywheel.platform.config import load_config_dict

ROOT = Path(__file__).parents[2]
METRIC = re.compile(r"^[a-z_]+(/[A-Za-z0-9_]+)+$")


def literal_metric_names() -> dict[str, str]:
    """name -> where, for metric-shaped string literals used as dict keys or assigned by
    subscript in flywheel/."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "flywheel").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            keys = []
            if isinstance(node, ast.Dict):
                keys = node.keys
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                keys = [node.slice]
            for key in keys:
                if (isinstance(key, ast.Constant) and isinstance(key.value, str)
                        and METRIC.match(key.value)):
                    found.setdefault(key.value, f"{path.relative_to(ROOT)}:{key.lineno}")
    return found


def test_every_metric_name_in_the_code_is_explained(site_generate):
    registry = site_generate.metric_registry()
    names = literal_metric_names()
    assert "reward/mean" in names and "pg/clipfrac" in names  # the scan sees them
    missing = [f"{n} ({where})" for n, where in sorted(names.items())
               if site_generate.explained(n, registry) is None]
    assert not missing, "metrics logged but not explained in docs_site/metrics.yaml:\n  " \
        + "\n  ".join(missing)


def test_registry_entries_are_complete(site_generate):
    seen = set()
    for ns in site_generate.metric_registry():
        for m in ns["metrics"]:
            assert m["name"].startswith(ns["namespace"] + "/"), m["name"]
            assert m["name"] not in seen, m["name"]
            seen.add(m["name"])
            assert m.get("unit") and m.get("meaning"), m["name"]
    page = site_generate.metrics_markdown()
    assert "| `reward/mean` | score |" in page


def _logged_keys(run_dir: Path) -> set[str]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {k for line in lines for k in json.loads(line) if k != "step"}


def _assert_explained(site_generate, keys: set[str]) -> None:
    registry = site_generate.metric_registry()
    missing = sorted(k for k in keys if site_generate.explained(k, registry) is None)
    assert not missing, f"logged but not on the metrics page: {missing}"


def _tiny_roles(strategy_train: str = "hf_train") -> dict:
    return {"strategy_args": {"strategy_name": strategy_train}, "device_mapping": [0]}


@pytest.mark.slow
def test_an_rlvr_run_logs_only_explained_metrics(tmp_path, ray_session, tiny_model_path,
                                                  site_generate):
    cfg = load_config_dict({
        "exp_name": "docs_metrics", "output_dir": str(tmp_path / "rlvr"),
        "pretrain": "builtin://tiny-qwen2",  # random init: mechanics, not learning
        "max_steps": 2, "eval_steps": 2, "val_batch_size": 4, "logging_steps": 100,
        "rollout_batch_size": 4, "num_return_sequences_in_group": 2,
        "async_generation_ratio": 1,                      # staleness/*, rollout/queue_depth
        "partial_rollout": True,                          # rollout/partial_frac
        "partial_rollout_segment_tokens": 2,
        "use_kl_loss": True, "kl_loss_coef": 0.01,        # kl/loss
        "init_kl_coef": 0.05, "target_kl": 0.1,           # kl/coef, time/logprobs
        "entropy_loss_coef": 0.01,                        # entropy/*
        "infer_is_correction": "token-truncate",          # offpolicy/* applied
        "tracking": {"mlflow": False},
        "actor_train": {**_tiny_roles(), "pg_variant": "ppo",
                        "training_args": {"per_device_train_batch_size": 8},
                        "data_args": {"file_name": ["builtin://arithmetic/train"]}},
        "actor_infer": {"device_mapping": [1], "generating_args": {"max_new_tokens": 4}},
        "reference": _tiny_roles(),
        "validation": {"data_args": {"file_name": ["builtin://arithmetic/val"]}},
    })
    keys = _logged_keys(run(cfg))
    for expected in ("reward/mean", "kl/coef", "kl/loss",
                     "entropy/mean", "offpolicy/k3_kl", "staleness/token_mean",
                     "time/validate", "val/accuracy"):
        assert expected in keys, expected
    _assert_explained(site_generate, keys)


@pytest.mark.slow
def test_an_agentic_run_logs_only_explained_metrics(tmp_path, ray_session, site_generate):
    cfg = load_config_dict({
        "pipeline_type": "agentic", "exp_name": "docs_metrics_agentic",
        "output_dir": str(tmp_path / "agentic"),
        "pretrain": "builtin://tiny-qwen2-h4",  # random init with a vocabulary for grids
        "max_steps": 1, "eval_steps": 1, "val_batch_size": 2, "logging_steps": 100,
        "rollout_batch_size": 4,
        "tracking": {"mlflow": False},
        "actor_train": {**_tiny_roles(), "training_args": {"per_device_train_batch_size": 4}},
        "actor_infer": {"device_mapping": [0]},
        "train_env_manager": {"num_env_groups": 2, "group_size": 2,
                              "tags": ["FrozenLake", "GuessNumber"]},
        "val_env_manager": {"num_env_groups": 2, "group_size": 1,
                            "tags": ["FrozenLake", "GuessNumber"]},
        "custom_envs": {
            "FrozenLake": {"env_type": "frozen_lake", "max_steps": 2, "max_tokens_per_step": 4,
                           "env_config": {"size": 3, "is_slippery": False}},
            "GuessNumber": {"env_type": "guess_number", "max_steps": 2,
                            "max_tokens_per_step": 4},
        },
    })
    keys = _logged_keys(run(cfg))
    for expected in ("env/success", "env/FrozenLake/success", "val/env/success",
                     "rollout/dropped_env_error"):
        assert expected in keys, expected
    _assert_explained(site_generate, keys)
