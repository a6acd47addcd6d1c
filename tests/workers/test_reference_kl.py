"""The reference's log-probs are of its own temperature-scaled distribution, untruncated,
whatever top-k / top-p the actor samples with (model_head.ModelHead.for_reference): a token
the actor sampled outside the reference's top-p set gets a finite log-prob, so the KL is
finite. Loops over the backends a reference runs on (hf_train, deepspeed_train ZeRO 1, and
a LoRA actor's base: forward_base_logprobs), against transformers' logits directly."""

from __future__ import annotations

import pytest
import torch
from backend_cases import PROMPTS, max_diff_on
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

from flywheel.algorithms import kl_estimate
from flywheel.config.schema import (
    GeneratingArgs,
    ModelArgs,
    StrategyArgs,
    TrainingArgs,
    WorkerConfig,
)
from flywheel.workers.batch import pack_sequences
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.model_head import actor_and_reference_heads

T, TOP_P = 0.8, 0.9
ATOL = 2e-5  # fp32, same weights: a chunked head vs one full forward
GEN = GeneratingArgs(temperature=T, top_p=TOP_P)


def logits_of(model_path: str, batch) -> torch.Tensor:
    """[B, L-1, V] logits transformers computes for `batch` (position t predicts t + 1)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=batch.input_ids,
                     attention_mask=batch.attention_mask).logits[:, :-1].float()


def picked(log_probs: torch.Tensor, batch) -> torch.Tensor:
    """[B, L] log-probs of the batch's next tokens, aligned with input_ids (column 0 is 0)."""
    out = log_probs.gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(out, (1, 0))


def sampled_batch(model_path: str):
    """The actor's samples with top-p 0.9, and their recorded (truncated) log-probs."""
    infer = HFInferStrategy(model_path, WorkerConfig(infer_batch_size=16), seed=0)
    gens = infer.generate(PROMPTS, SamplingParams(max_new_tokens=6, n=2, temperature=T,
                                                  top_p=TOP_P, seed=3))
    return pack_sequences([PROMPTS[g.prompt_index] for g in gens],
                          [g.token_ids for g in gens], pad_id=0,
                          infer_log_probs=[g.log_probs for g in gens])


def test_reference_kl_is_finite_and_exact_under_top_p(arith_model_path, tiny_model_path,
                                                      one_rank_group):
    pytest.importorskip("deepspeed")
    from flywheel.workers.strategies.deepspeed_train import DeepSpeedTrainStrategy

    actor_head, reference_head = actor_and_reference_heads(GEN)
    # the actor: the arithmetic model; the reference: another model (the random tiny one),
    # whose top-p set leaves out some tokens the actor samples
    batch = sampled_batch(arith_model_path)
    mask = batch.response_mask.bool()
    ref_logits = logits_of(tiny_model_path, batch)
    want = picked(torch.log_softmax(ref_logits / T, -1), batch)  # untruncated, at T
    kept = TopPLogitsWarper(TOP_P)(None, TemperatureLogitsWarper(T)(None, ref_logits.reshape(
        -1, ref_logits.shape[-1]))).reshape(ref_logits.shape)
    outside = torch.isinf(picked(kept, batch)) & mask
    assert outside.sum() >= 1  # the case the fix is for occurs here (3 tokens, seeded)

    args = TrainingArgs(per_device_train_batch_size=8)
    got = {"hf_train": HFTrainStrategy(tiny_model_path, WorkerConfig(training_args=args),
                                       seed=0, total_steps=1, head=reference_head
                                       ).forward_logprobs(batch)}
    cfg = WorkerConfig(training_args=args, strategy_args=StrategyArgs(
        strategy_name="deepspeed_train", strategy_config={"zero_stage": 1}))
    got["deepspeed_train zero 1"] = DeepSpeedTrainStrategy(
        tiny_model_path, cfg, seed=0, total_steps=1, head=reference_head).forward_logprobs(batch)
    diffs = {name: max_diff_on(mask, lp, want) for name, lp in got.items()}

    # a LoRA actor (sampling head, truncated) whose base is the reference
    lora = HFTrainStrategy(arith_model_path, WorkerConfig(
        training_args=args, model_args=ModelArgs(lora_target="all-linear", lora_rank=4)),
        seed=0, total_steps=1, head=actor_head)
    base_want = picked(torch.log_softmax(logits_of(arith_model_path, batch) / T, -1), batch)
    diffs["hf_train LoRA base"] = max_diff_on(mask, lora.forward_base_logprobs(batch),
                                              base_want)
    # the actor's own log-probs stay those of the sampled (truncated) distribution
    diffs["LoRA actor vs recorded"] = max_diff_on(mask, lora.forward_logprobs(batch),
                                                  batch.infer_log_probs)

    actor_lp = batch.infer_log_probs
    for name, ref_lp in got.items():
        for estimator in ("k1", "k2", "k3"):
            kl = kl_estimate(actor_lp, ref_lp, estimator)[mask]
            independent = kl_estimate(actor_lp, want, estimator)[mask]
            assert torch.isfinite(kl).all() and kl.abs().max() < 50, (name, estimator)
            assert torch.allclose(kl, independent, atol=1e-4, rtol=1e-5), (name, estimator)
    k3 = kl_estimate(actor_lp, got["hf_train"], "k3")
    print(f"{int(outside.sum())} of {int(mask.sum())} sampled tokens outside the reference's "
          f"top-p set; per-token k3 there: mean {k3[outside].mean():.3f}, max "
          f"{k3[outside].max():.3f}; all tokens: mean {k3[mask].mean():.3f}; max |log-prob - "
          "independent|: " + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
    assert all(d < ATOL for d in diffs.values()), diffs
