"""The metrics page explains every metric a run logs.

Two nets: a scan of the code for metric names written as literals (dict keys and
`metrics["..."] = ...`), which reaches backends and settings no short run exercises, and a
one-step real run of each pipeline (RLVR, agentic, SFT), whose metrics.jsonl keys (names
built at run time: `time/<phase>`, `env/<tag>/...`, the update loop's `<prefix>/...`)
must all be explained by the page's registry (docs_site/metrics.yaml). Optional settings
(validation, partial rollout, KL, a critic) are left to the scan: their names are
literals, and each would add a role or a phase to these runs.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.run.launch import run

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


# The runs below are as small as a run gets (one step, a handful of samples, no
# validation, no partial rollout): the literal names those settings log are the scan's
# business above. What only a run shows is the names built at run time: `time/<phase>`
# (timing.py), `env/<tag>/<info>` and the shared update loop's `<prefix>/grad_norm`.


# An RLVR run's names: tests/pipelines/test_multi_domain_run.py, whose run (per-tag
# rewards, validation, entropy and off-policy terms) logs a superset of a plain run's.


@pytest.mark.slow
def test_an_agentic_run_logs_only_explained_metrics(tmp_path, ray_session, site_generate):
    """Also the real agentic run of a GEM env (gem-llm's game:GuessTheNumber-v0 through
    envs/gem_adapter.py) on per-turn rows with GiGPO credit, and of batch_adjust_mode
    fitting 6 episodes' rows to optimizer steps of 4 (issue 26)."""
    cfg = load_config_dict({
        "pipeline_type": "agentic", "exp_name": "docs_metrics_agentic",
        "output_dir": str(tmp_path / "agentic"),
        "pretrain": "builtin://tiny-qwen2-h4",  # random init with a vocabulary for grids
        "max_steps": 1, "logging_steps": 100, "rollout_batch_size": 6,
        "tracking": {"backends": ["jsonl"], "sample_text_steps": 0},
        "actor_train": {**_tiny_roles(), "training_args": {"per_device_train_batch_size": 4}},
        "actor_infer": {"device_mapping": [0]},
        "step_level_samples": True, "adv_estimator": "gigpo", "norm_std_type": "none",
        "batch_adjust_mode": "copy",
        "train_env_manager": {"num_env_groups": 3, "group_size": 2,
                              "tags": ["FrozenLake", "GuessNumber", "Gem"]},
        "val_env_manager": {"num_env_groups": 3, "group_size": 1,
                            "tags": ["FrozenLake", "GuessNumber", "Gem"]},
        "custom_envs": {
            "FrozenLake": {"env_type": "frozen_lake", "max_steps": 1, "max_tokens_per_step": 2,
                           "env_config": {"size": 3, "is_slippery": False}},
            "GuessNumber": {"env_type": "guess_number", "max_steps": 1,
                            "max_tokens_per_step": 2},
            "Gem": {"env_type": "game:GuessTheNumber-v0", "max_steps": 2,
                    "max_tokens_per_step": 2, "env_config": {"max_turns": 2}},
        },
    })
    out = run(cfg)
    keys = _logged_keys(out)
    for expected in ("env/success", "env/FrozenLake/success", "env/GuessNumber/success",
                     "env/Gem/success", "env/Gem/action_is_valid", "rollout/dropped_env_error",
                     "rollout/batch_rows_added"):
        assert expected in keys, expected
    record = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    turns = round(record["env/episode_length"] * 6)
    assert (turns + record["rollout/batch_rows_added"]) % 4 == 0  # whole optimizer steps
    assert record["actor/optimizer_steps"] == (turns + record["rollout/batch_rows_added"]) / 4
    _assert_explained(site_generate, keys)


def test_an_sft_run_logs_only_explained_metrics(tmp_path, site_generate):
    """In process, no Ray: two optimizer steps and one validation of four records."""
    cfg = load_config_dict({
        "pipeline_type": "sft", "output_dir": str(tmp_path / "sft"),
        "pretrain": "builtin://tiny-qwen2", "max_steps": 2, "eval_steps": 2,
        "val_batch_size": 4, "prompt_length": 16, "response_length": 4, "logging_steps": 100,
        "tracking": {"backends": ["jsonl"]},
        "actor_train": {"training_args": {"per_device_train_batch_size": 4},
                        "data_args": {"file_name": ["builtin://arithmetic/train"],
                                      "max_samples": 16}},
        "validation": {"data_args": {"file_name": ["builtin://arithmetic/val"]}},
    })
    keys = _logged_keys(run(cfg))
    for expected in ("sft/loss", "actor/grad_norm", "val/loss", "val/accuracy"):
        assert expected in keys, expected
    _assert_explained(site_generate, keys)
