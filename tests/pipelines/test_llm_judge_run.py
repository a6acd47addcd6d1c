"""An RLVR run scored by a local llm_judge: the judge model loads on the reward role's own
device_mapping slot (from the top-level reward_pretrain), scores every sample through the
scoring processes, and its parse failures are logged as a documented metric. Mechanics on
the built-in tiny models, not judging quality (bench/bench_llm_judge.py has a real one)."""

from __future__ import annotations

import importlib.util
import json
import re
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
            # the response, then "12+34=": the arithmetic model answers in digits, the sum
            # or a number near it, depending on the response (over 100: a parse failure)
            "llm_judge": {"prompt_template": "{response}{prompt}", "score_parser": "number",
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


def verdict_by_hand(model, tokenizer, prompt: str, response: str) -> float | None:
    """What the judge of `judge_config` must give, computed here without flywheel: the
    filled-in template "{response}{prompt}" after bos (the tokenizer has no chat template),
    3 greedy tokens, the last number of the answer if it lies in [0, 100], over 100."""
    import torch

    ids = [tokenizer.bos_token_id] + tokenizer(f"{response}{prompt}",
                                               add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=3, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id)
    answer = tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)
    numbers = re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?", answer)
    if not numbers or not 0 <= float(numbers[-1]) <= 100:
        return None
    return float(numbers[-1]) / 100


@pytest.mark.slow
@pytest.mark.long  # 1-3 minutes on 2 shared cores: Ray, three models, a judge per sample
def test_rlvr_run_scored_by_a_local_judge(tmp_path, ray_session):
    """Every sample's reward is the judge's verdict on that sample, recomputed here from
    the logged prompt and response with the judge model alone; the step's reward metrics
    are those verdicts' mean and failure count."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from flywheel.platform.models.builtin import resolve_pretrain

    data = judge_config(tmp_path)
    data["tracking"]["sample_text_steps"] = 1  # the texts of all 4 samples (4 by default)
    run_dir = run(load_config_dict(data))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    [step] = [r for r in rows if r["step"] == 1]
    samples = [json.loads(line)
               for line in (run_dir / "sample_texts.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [1] * 4
    path = resolve_pretrain(data["reward_pretrain"])
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    verdicts = [verdict_by_hand(model, tokenizer, s["prompt"], s["response"])
                for s in samples]
    assert [s["reward"] for s in samples] == [v or 0.0 for v in verdicts], verdicts
    # measured: two verdicts over 100 (parse failures) and two near 0.94, which differ by
    # response; neither a run of zeros nor of failures
    assert any(verdicts) and None in verdicts, verdicts
    assert step["reward/mean"] == pytest.approx(sum(v or 0.0 for v in verdicts) / 4)
    failures = sum(v is None for v in verdicts)
    assert step["reward/judge_parse_failures"] == failures
    assert step["reward/parse_rate"] == pytest.approx(1 - failures / 4)
    assert step["reward/timed_out"] == 0 and step["reward/crashed"] == 0
    spec = importlib.util.spec_from_file_location("docs_site_generate",
                                                  ROOT / "docs_site" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    registry = module.metric_registry()
    assert module.explained("reward/judge_parse_failures", registry) is not None
    assert not [k for r in rows for k in r
                if k != "step" and module.explained(k, registry) is None]
