"""What the backend tests share: the batch every backend is compared on, hf_train as the
reference, the loss, and training clusters started as `pipelines/roles/roles.py` starts them.

The reference numbers are hf_train's: each backend test checks its log-probs, loss curve
and weights against hf_train on the same batch, so every backend agrees with every other.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flywheel.algorithms import PolicyLossParams
from flywheel.config.schema import ModelArgs, StrategyArgs, TrainingArgs, WorkerConfig
from flywheel.pipelines.roles.roles import join_process_group
from flywheel.platform.cluster import Cluster
from flywheel.platform.resources import RoleDevices
from flywheel.workers.actor_loss import ActorLoss
from flywheel.workers.batch import TokenBatch, pack_sequences
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.model_head import POLICY, ModelHead
from flywheel.workers.strategies.sequence_packing import PackingPlan
from flywheel.workers.train_worker import TrainWorker
from flywheel.workers.weight_buckets import gather_weights

PROMPTS = [[1, 20 + i % 10, 21, 15, 22, 23 + i % 7, 33] for i in range(16)]
LR = 1e-3
PARITY_ATOL = 1e-4  # fp32 log-probs of the same weights, any two backends


def untimed(metrics: dict[str, float]) -> dict[str, float]:
    """A train step's metrics without its phase times (time/...), which differ run to run."""
    return {k: v for k, v in metrics.items() if not k.startswith("time/")}


def training_args(per_device: int, accum: int) -> TrainingArgs:
    return TrainingArgs(learning_rate=LR, per_device_train_batch_size=per_device,
                        gradient_accumulation_steps=accum, max_grad_norm=1.0)


def hf_trainer(model_path: str, per_device: int = 8, accum: int = 4,
               model_args: ModelArgs | None = None, head: ModelHead = POLICY) -> HFTrainStrategy:
    """One rank holding the whole 32-row batch as one mini-batch of `accum` micro-batches."""
    cfg = WorkerConfig(training_args=training_args(per_device, accum),
                       model_args=model_args or ModelArgs())
    return HFTrainStrategy(model_path, cfg, seed=0, total_steps=10, head=head)


def actor_loss(entropy_coef: float = 0.0) -> ActorLoss:
    # token-mean: the global token count matters, so ranks using local counts would differ
    return ActorLoss("ppo", PolicyLossParams(), "token-mean", entropy_loss_coef=entropy_coef)


def make_rl_batch(model_path: str) -> TokenBatch:
    """32 rows (16 prompts x 2 samples, uneven lengths) with hf_infer's sampling
    log-probs ("infer_log_probs"), hf_train's ("old_log_probs") and random advantages."""
    infer = HFInferStrategy(model_path, WorkerConfig(infer_batch_size=16), seed=0)
    gens = infer.generate(PROMPTS, SamplingParams(max_new_tokens=6, n=2, seed=3))
    batch = pack_sequences([PROMPTS[g.prompt_index] for g in gens],
                           [g.token_ids for g in gens], pad_id=0,
                           infer_log_probs=[g.log_probs for g in gens])
    batch.old_log_probs = hf_trainer(model_path).forward_logprobs(batch)
    generator = torch.Generator().manual_seed(0)
    advantages = torch.randn(len(batch), 1, generator=generator)  # [B, 1]
    batch.advantages = advantages * batch.response_mask  # [B, L]
    return batch


DR_GRPO_BUDGET = 6  # make_rl_batch's max_new_tokens: Dr. GRPO's constant (norm_length)


def save_tiny_qwen3_moe(path, vocab_model: str, **overrides) -> str:
    """A tiny random Qwen3-MoE (2 layers of 4 experts, top 2) with `vocab_model`'s
    vocabulary, built from transformers' config class (no hub) and saved at `path`."""
    from transformers import AutoConfig, Qwen3MoeConfig, Qwen3MoeForCausalLM

    settings = dict(vocab_size=AutoConfig.from_pretrained(vocab_model).vocab_size,
                    hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
                    num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                    head_dim=8, num_experts=4, num_experts_per_tok=2,
                    router_aux_loss_coef=0.02, max_position_embeddings=256)
    torch.manual_seed(0)
    Qwen3MoeForCausalLM(Qwen3MoeConfig(**settings | overrides)).save_pretrained(path)
    return str(path)


def dr_grpo_loss() -> ActorLoss:
    return ActorLoss("ppo", PolicyLossParams(), "seq-mean-token-sum-norm",
                     norm_length=DR_GRPO_BUDGET)


def uneven(batch: TokenBatch) -> TokenBatch:
    """The first half of the rows cut to 2 response tokens, so the micro-batches the train
    backends trim (TokenBatch.trimmed) differ in width: a loss normalised by the width
    instead of one constant changes with how the rows are split."""
    cut = batch.response_mask.cumsum(-1) > 2  # [B, L]
    cut[len(batch) // 2:] = False

    def keep(t: torch.Tensor) -> torch.Tensor:
        return torch.where(cut, torch.zeros_like(t), t)

    return dataclasses.replace(batch, input_ids=keep(batch.input_ids),
                               attention_mask=keep(batch.attention_mask),
                               response_mask=keep(batch.response_mask),
                               advantages=keep(batch.advantages))


def dr_grpo_grad_norm(model_path: str, batch: TokenBatch) -> float:
    """The gradient norm of a Dr. GRPO step on `uneven(batch)` taken as ONE micro-batch
    by hf_train: what every backend's split of the same rows must reproduce."""
    whole = hf_trainer(model_path, per_device=len(batch), accum=1)
    return whole.train_step(uneven(batch), dr_grpo_loss())["actor/grad_norm"]


def check_dr_grpo_step(model_path: str, batch: TokenBatch, hf: HFTrainStrategy,
                       cluster: Cluster) -> None:
    """One Dr. GRPO step on `uneven(batch)` by hf_train (4 micro-batches) and by `cluster`
    (its own split and trimming): both give the one-micro-batch gradient norm. Both take
    the step, so they stay in step for the parity checks that follow."""
    want = dr_grpo_grad_norm(model_path, batch)
    short = uneven(batch)
    ref = hf.train_step(short, dr_grpo_loss())
    got = rank_mean(cluster.scatter("train_step", short.shard(cluster.world_size),
                                    loss_fn=dr_grpo_loss(), ppo_epochs=1))
    print(f"Dr. GRPO grad norm: one micro-batch {want:.6f}, hf_train split "
          f"{ref['actor/grad_norm']:.6f}, cluster {got['actor/grad_norm']:.6f}")
    assert ref["actor/grad_norm"] == pytest.approx(want, rel=1e-5)
    assert got["actor/grad_norm"] == pytest.approx(want, rel=1e-5)


def rank_mean(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """Metrics averaged over ranks, as the RLVR pipeline reports a train step."""
    return {k: sum(r[k] for r in per_rank) / len(per_rank) for k in per_rank[0]}


def max_diff_on(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| where `mask` is set (padding columns hold no defined value)."""
    return float((a - b)[mask.bool()].abs().max())


def start_train_cluster(strategy: str, model_path: str, world_size: int,
                        strategy_config: dict, per_device: int, accum: int,
                        worker_cls: type = TrainWorker,
                        env_vars: dict[str, str] | None = None, head: ModelHead = POLICY,
                        dtype: str = "fp32", model_args: ModelArgs | None = None,
                        token_budget: int = 0, packing: PackingPlan | None = None) -> Cluster:
    """`token_budget` > 0: micro-batches cut by that budget (training_args.dynamic_batching);
    `packing` not None: rows packed so (training_args.sequence_packing)."""
    args = training_args(per_device, accum)
    args.dynamic_batching, args.max_tokens_per_micro_batch = token_budget > 0, token_budget
    args.sequence_packing = packing is not None
    if packing is not None:
        args.max_packed_sequence_length = packing.width
        args.shared_prefix_packing = packing.share_prefix
    cfg = WorkerConfig(strategy_args=StrategyArgs(strategy, dict(strategy_config)),
                       training_args=args,
                       model_args=model_args or ModelArgs(dtype=dtype))
    cluster = Cluster.create(
        "actor_train", worker_cls, RoleDevices("actor_train", tuple(range(world_size))),
        None, init_kwargs=dict(model_path=model_path, cfg=cfg, seed=0, total_steps=10,
                               trainable=True, num_threads=1, head=head),
        env_vars=env_vars)
    try:
        join_process_group(cluster, cfg)
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


def cluster_weights(cluster: Cluster) -> dict[str, torch.Tensor]:
    refs = cluster.call_all("weights_ref")
    assert all(r == [] for r in refs[1:]), "only rank 0 puts the weights"
    return gather_weights(refs[0])


def weight_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Largest difference over the HF names both hold (lm_head only when untied)."""
    missing = {k for k in b if k != "lm_head.weight"} - set(a)
    assert not missing, missing
    return max(float((a[k] - b[k]).abs().max()) for k in set(a) & set(b))


def stepped_grads(strategy: HFTrainStrategy) -> list[dict[str, torch.Tensor]]:
    """The gradients each optimizer step of `strategy` steps on (filled as it trains)."""
    grads, optimizer_step = [], strategy.optimizer_step

    def record(max_grad_norm):
        grads.append({n: p.grad.clone() for n, p in strategy.model.named_parameters()})
        return optimizer_step(max_grad_norm)

    strategy.optimizer_step = record
    return grads


def assert_same_step(a: dict, b: dict, grads_a: dict[str, torch.Tensor],
                     grads_b: dict[str, torch.Tensor]) -> None:
    """Two train steps' metrics and gradients agree within fp32 rounding (a layout that
    changes no number: packing, shared prefixes)."""
    assert a["actor/grad_norm"] == pytest.approx(b["actor/grad_norm"], rel=1e-5)
    for key in ("pg/loss", "entropy/mean", "pg/approx_kl"):
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    for name, grad in grads_a.items():
        assert torch.allclose(grads_b[name], grad, atol=1e-7, rtol=1e-4), name
