"""An RLVR run scored by a local llm_judge: the judge model loads on the reward role's own
device_mapping slot (from the top-level reward_pretrain), scores every sample through the
scoring processes, and its parse failures are logged as a documented metric. Mechanics on
the built-in tiny models, not judging quality (bench/bench_llm_judge.py has a real one)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.roles.roles import device_roles
from flywheel.pipelines.run.launch import run

ROOT = Path(__file__).parents[2]


def judge_config(tmp_path: Path) -> dict:
    return {
        "exp_name": "judge", "output_dir": str(tmp_path / "run"),
        "pretrain": "builtin://tiny-qwen2",  # random init: mechanics, not learning
        "reward_pretrain": "builtin://tiny-qwen2-arith",  # the judge: it answers digits
        "max_steps": 1, "logging_steps": 100, "prompt_length": 16,
        "rollout_batch_size": 2, "num_return_sequences_in_group": 2,
        "tracking": {"backends": ["jsonl"], "sample_text_steps": 0},
        "actor_train": {"device_mapping": [0],
                        "training_args": {"per_device_train_batch_size": 4},
                        "data_args": {"file_name": ["builtin://arithmetic/train"],
                                      "max_samples": 8}},
        "actor_infer": {"device_mapping": [0], "generating_args": {"max_new_tokens": 2}},
        "rewards": {"judge": {
            "reward_type": "llm_judge", "device_mapping": [1], "num_threads": 1,
            "strategy_args": {"strategy_name": "hf_infer"},
            # "12+34=" plus the response, then "=": the arithmetic model writes digits
            "llm_judge": {"prompt_template": "{prompt}{response}=", "score_parser": "number",
                          "score_min": 0, "score_max": 100, "max_new_tokens": 3}}},
    }


def test_a_local_judge_owns_its_device_slot(tmp_path):
    cfg = load_config_dict(judge_config(tmp_path))
    roles = {r.role: r.device_mapping for r in device_roles(cfg)}
    assert roles["rewards.judge"] == (1,)
    endpoint = judge_config(tmp_path)
    endpoint["rewards"]["judge"] = {"reward_type": "llm_judge", "llm_judge": {
        "backend": "endpoint", "base_url": "http://127.0.0.1:9/v1", "model": "m"}}
    assert "rewards.judge" not in {r.role for r in device_roles(load_config_dict(endpoint))}


@pytest.mark.slow
@pytest.mark.long  # 1-3 minutes on 2 shared cores: Ray, three models, a judge per sample
def test_rlvr_run_scored_by_a_local_judge(tmp_path, ray_session):
    run_dir = run(load_config_dict(judge_config(tmp_path)))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    [step] = [r for r in rows if r["step"] == 1]
    assert 0.0 <= step["reward/mean"] <= 1.0
    assert step["reward/timed_out"] == 0 and step["reward/crashed"] == 0
    # 4 samples judged; each either parsed (counted in parse_rate) or a counted failure
    assert step["reward/judge_parse_failures"] == pytest.approx(4 * (1 - step[
        "reward/parse_rate"]))
    spec = importlib.util.spec_from_file_location("docs_site_generate",
                                                  ROOT / "docs_site" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    registry = module.metric_registry()
    assert module.explained("reward/judge_parse_failures", registry) is not None
    assert not [k for r in rows for k in r
                if k != "step" and module.explained(k, registry) is None]
