"""Log-probs are those of the distribution actually sampled (temperature, top-k, top-p):
the same definition in the trainer, hf_infer and vllm, and it matches sampled frequencies."""

from __future__ import annotations

import pytest
import torch
from backend_cases import PROMPTS, max_diff_on
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from flywheel.algorithms.sampled_distribution import SampledDistribution
from flywheel.config.schema import TrainingArgs, WorkerConfig
from flywheel.workers.batch import pack_sequences
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.model_head import policy_head

T, TOP_K, TOP_P = 0.6, 5, 0.9
FP32_ATOL = 2e-5  # same weights, KV-cache decode vs one full forward


def trainer(model_path: str, top_p: float = 1.0) -> HFTrainStrategy:
    return HFTrainStrategy(model_path, WorkerConfig(training_args=TrainingArgs()), seed=0,
                           total_steps=1, head=policy_head(T, TOP_K, top_p, True))


def recorded_vs_trainer(gens, model_path: str, top_p: float) -> float:
    batch = pack_sequences([PROMPTS[g.prompt_index] for g in gens], [g.token_ids for g in gens],
                           pad_id=0, infer_log_probs=[g.log_probs for g in gens])
    assert torch.isfinite(batch.infer_log_probs).all()
    return max_diff_on(batch.response_mask, batch.infer_log_probs,
                       trainer(model_path, top_p).forward_logprobs(batch))


@pytest.mark.parametrize("seed", [0, 1])
def test_distribution_is_transformers_warpers(seed):
    logits = torch.randn(4, 7, 50, generator=torch.Generator().manual_seed(seed)) * 3
    want = logits.reshape(-1, 50)
    for warper in (TemperatureLogitsWarper(T), TopKLogitsWarper(TOP_K), TopPLogitsWarper(TOP_P)):
        want = warper(None, want)
    got = SampledDistribution(T, TOP_K, TOP_P).logits(logits).reshape(-1, 50)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    assert torch.allclose(got[~torch.isinf(got)], want[~torch.isinf(want)])


@pytest.mark.parametrize("top_p", [1.0, TOP_P])
def test_hf_infer_records_the_trainers_logprobs(tiny_model_path, top_p):
    infer = HFInferStrategy(tiny_model_path, WorkerConfig(infer_batch_size=16), seed=0)
    gens = infer.generate(PROMPTS, SamplingParams(max_new_tokens=6, n=2, temperature=T,
                                                  top_k=TOP_K, top_p=top_p, seed=3))
    assert recorded_vs_trainer(gens, tiny_model_path, top_p) < FP32_ATOL


def test_sampled_frequencies_follow_exp_logprob(tiny_model_path):
    """Pearson chi-square of 4000 first tokens against exp(trainer log-prob), seeded."""
    infer = HFInferStrategy(tiny_model_path, WorkerConfig(infer_batch_size=1), seed=0)
    prompt = PROMPTS[0]
    draws = 4000
    gens = infer.generate([prompt], SamplingParams(max_new_tokens=1, n=draws, temperature=T,
                                                   top_k=TOP_K, top_p=TOP_P, seed=11))
    counts = torch.bincount(torch.tensor([g.token_ids[0] for g in gens]))
    model = trainer(tiny_model_path, TOP_P)
    tokens = torch.arange(len(counts))
    batch = pack_sequences([prompt] * len(tokens), [[int(t)] for t in tokens], pad_id=0)
    expected = model.forward_logprobs(batch)[:, len(prompt)].exp() * draws  # [V']
    kept = expected > 0.5
    assert counts[~kept].sum() == 0  # nothing is drawn outside the kept set
    chi2 = float(((counts[kept] - expected[kept]) ** 2 / expected[kept]).sum())
    dof = int(kept.sum()) - 1
    # the 0.999 quantile of chi-square with dof <= 4 is below 18.5
    assert dof >= 1 and chi2 < 18.5, (chi2, dof, counts[kept].tolist(),
                                      expected[kept].tolist())


@pytest.mark.slow
def test_vllm_records_the_trainers_logprobs(tiny_model_path):
    pytest.importorskip("vllm")
    from flywheel.workers.strategies.vllm_infer import VLLMInferStrategy

    set_num_threads = torch.set_num_threads  # vLLM's CPU worker replaces it process-wide
    try:
        engine = VLLMInferStrategy(tiny_model_path, WorkerConfig(), seed=0)
        gens = engine.generate(PROMPTS, SamplingParams(max_new_tokens=6, n=2, temperature=T,
                                                       top_k=TOP_K, top_p=TOP_P, seed=5))
    finally:
        torch.set_num_threads = set_num_threads
    assert recorded_vs_trainer(gens, tiny_model_path, TOP_P) < FP32_ATOL
