"""hf_infer and vllm sample the same distribution on SmolLM2 for the same settings.

Greedy decoding makes "the same distribution" checkable token for token: with a
repetition penalty, with stop strings, and with a generation_config.json that asks for a
penalty of its own (which hf_infer must ignore, as vllm does). Short answers (<= 24
tokens) keep the module at ~30 s, most of it vLLM's start.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow

from flywheel.config.schema import StrategyArgs, WorkerConfig  # noqa: E402
from flywheel.pipelines.data.prompt_data import encode_prompt  # noqa: E402
from flywheel.workers.strategies.base import SamplingParams  # noqa: E402
from flywheel.workers.strategies.hf_infer import HFInferStrategy  # noqa: E402
from flywheel.workers.strategies.vllm_infer import VLLMInferStrategy  # noqa: E402

QUESTIONS = ["What is 12+34?", "Name three colors.", "Count from 1 to 10."]


@pytest.fixture(scope="module")
def prompts(smollm2_tokenizer):
    return [encode_prompt(smollm2_tokenizer, q, "chat") for q in QUESTIONS]


@pytest.fixture(scope="module")
def engines(smollm2_path):
    set_num_threads = torch.set_num_threads  # vLLM's CPU worker replaces it process-wide
    vllm = VLLMInferStrategy(smollm2_path, WorkerConfig(strategy_args=StrategyArgs("vllm")),
                             seed=0, context_length=256)
    hf = HFInferStrategy(smollm2_path, WorkerConfig(), seed=0)
    yield hf, vllm
    torch.set_num_threads = set_num_threads


def greedy(**kwargs) -> SamplingParams:
    return SamplingParams(max_new_tokens=24, do_sample=False, **kwargs)


def test_vllm_context_is_the_runs_not_the_models(engines):
    _, vllm = engines
    assert vllm.llm.llm_engine.model_config.max_model_len == 256  # SmolLM2's own: 8192


# 1.3 (~1 min on 2 cores) runs with `make test-long`; 1.0 keeps the parity in the suite
@pytest.mark.parametrize("penalty", [1.0, pytest.param(1.3, marks=pytest.mark.long)])
def test_greedy_answers_agree_with_a_repetition_penalty(engines, prompts, penalty):
    hf, vllm = engines
    a = hf.generate(prompts, greedy(repetition_penalty=penalty))
    b = vllm.generate(prompts, greedy(repetition_penalty=penalty))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.finish_reason for g in a] == [g.finish_reason for g in b]


@pytest.mark.long
def test_the_penalty_changes_the_answer(engines, prompts):
    hf, _ = engines
    plain = hf.generate(prompts, greedy())
    penalised = hf.generate(prompts, greedy(repetition_penalty=1.5))
    assert [g.token_ids for g in plain] != [g.token_ids for g in penalised]


def test_stop_strings_end_both_at_the_same_token(engines, prompts, smollm2_tokenizer):
    hf, vllm = engines
    stop = greedy(stop_strings=["\n"])  # "Name three colors." -> "1. Red\n2. Blue..."
    a, b = hf.generate(prompts, stop), vllm.generate(prompts, stop)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    listed = smollm2_tokenizer.decode(a[1].token_ids)
    assert a[1].finish_reason == b[1].finish_reason == "stop" and listed.endswith("\n"), listed
    assert "\n" not in smollm2_tokenizer.decode(a[1].token_ids[:-1])
    assert len(a[1].log_probs) == len(a[1].token_ids)


def test_stop_token_ids_reach_both(engines, prompts):
    hf, vllm = engines
    first = hf.generate(prompts[:1], greedy())[0].token_ids
    stop = greedy(stop_token_ids=[first[2]])
    for engine in (hf, vllm):
        out = engine.generate(prompts[:1], stop)[0]
        assert out.token_ids == first[:3] and out.finish_reason == "stop"


def test_hf_infer_ignores_the_models_generation_config(engines, prompts, smollm2_path,
                                                       tmp_path):
    _, vllm = engines
    folder = tmp_path / "model"
    folder.mkdir()
    for item in Path(smollm2_path).iterdir():
        os.symlink(item, folder / item.name)
    (folder / "generation_config.json").unlink()
    (folder / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": 2, "repetition_penalty": 1.5, "do_sample": True,
         "temperature": 0.2}))
    hf = HFInferStrategy(str(folder), WorkerConfig(), seed=0)
    a = hf.generate(prompts, greedy())
    b = vllm.generate(prompts, greedy())
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
