"""The MoE load-balancing loss (algorithms/moe_balance.py, workers/strategies/router_loss.py).

What each test holds: the loss is Megatron's formula, worked by hand, padding left out;
on hf_train with a tiny random Qwen3-MoE, the reported loss is the one computed from
transformers' own router logits, it reaches the router's gradient (and nothing changes
without it), "model" takes the checkpoint's coefficient, and a dense model is refused.
"""

from __future__ import annotations

import pytest
import torch
from backend_cases import dr_grpo_loss, save_tiny_qwen3_moe

from flywheel.algorithms.moe_balance import switch_load_balancing_loss
from flywheel.config.schema import ModelArgs, TrainingArgs, WorkerConfig
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.router_loss import METRIC

ROWS = 8


def test_switch_loss_is_megatrons_formula_by_hand():
    # 2 real tokens (the third is padding), 2 experts, top-1. probs: softmax([ln 3, 0]) =
    # [.75, .25]; softmax([0, ln 3]) = [.25, .75]; each expert picked once: c = [1, 1].
    logits = torch.tensor([[3.0, 1.0], [1.0, 3.0], [9.0, 0.0]]).log()
    mask = torch.tensor([1, 1, 0])
    # E / (k T^2) x sum_e c_e sum_t p_te = 2 / 4 x (1 x 1 + 1 x 1) = 1, times coeff
    loss = switch_load_balancing_loss([logits, logits], mask, top_k=1, coeff=0.1)
    assert loss.item() == pytest.approx(2 * 0.1)  # two layers add up
    # both tokens on expert 0: c = [2, 0], sum_t p_t0 = .75 + .75 -> 2/4 x 2 x 1.5 = 1.5
    crowded = torch.tensor([[3.0, 1.0], [3.0, 1.0], [0.0, 9.0]]).log()
    assert switch_load_balancing_loss([crowded], mask, 1, 1.0).item() == pytest.approx(1.5)


@pytest.fixture(scope="module")
def moe_path(tmp_path_factory, tiny_model_path):
    return save_tiny_qwen3_moe(tmp_path_factory.mktemp("tiny_moe"), tiny_model_path)


def trainer(path: str, coef) -> HFTrainStrategy:
    cfg = WorkerConfig(model_args=ModelArgs(moe_aux_loss_coef=coef),
                       training_args=TrainingArgs(per_device_train_batch_size=ROWS // 2,
                                                  gradient_accumulation_steps=2))
    return HFTrainStrategy(path, cfg, seed=0, total_steps=10)


def router_grads(strategy: HFTrainStrategy) -> list[torch.Tensor]:
    return [p.grad.clone() for n, p in strategy.model.named_parameters() if "mlp.gate" in n]


def test_hf_train_adds_the_load_balancing_loss_to_the_router_gradient(moe_path, rl_batch):
    batch = rl_batch.chunks(ROWS)[0]  # 8 rows: two micro-batches of 4
    with_loss, without = trainer(moe_path, 0.5), trainer(moe_path, None)
    # transformers' own router logits of the untrained model, micro-batch by micro-batch
    expected = []
    for micro in batch.chunks(ROWS // 2):
        micro = micro.trimmed()
        out = with_loss.model(input_ids=micro.input_ids, attention_mask=micro.attention_mask,
                              output_router_logits=True)
        expected.append(switch_load_balancing_loss(list(out.router_logits),
                                                   micro.attention_mask, 2, 0.5).item())
    metrics = with_loss.train_step(batch, dr_grpo_loss())
    assert metrics[METRIC] == pytest.approx(sum(expected) / 2, rel=1e-5)
    assert METRIC not in without.train_step(batch, dr_grpo_loss())
    for a, b in zip(router_grads(with_loss), router_grads(without), strict=True):
        assert not torch.allclose(a, b)


def test_model_takes_the_checkpoints_coefficient_and_a_dense_model_is_refused(
        moe_path, tiny_model_path):
    assert trainer(moe_path, "model").router.coeff == pytest.approx(0.02)
    assert trainer(moe_path, 0.0).router is None
    with pytest.raises(ValueError, match="has no MoE router to balance"):
        trainer(tiny_model_path, 0.1)


@pytest.mark.long  # two ZeRO ranks under Ray
def test_two_zero_ranks_add_the_router_loss_like_one_hf_rank(moe_path, rl_batch,
                                                             train_cluster):
    """Megatron's scale, 1 / (micro-batches x ranks): hf_train's 1 rank x 4 micro-batches
    and deepspeed_train's 2 ranks x 2 micro-batches (contiguous shards: the same 8-row
    micro-batches) take the same step, router loss included."""
    from backend_cases import cluster_weights, hf_trainer, rank_mean

    args = ModelArgs(moe_aux_loss_coef=0.5)
    hf = hf_trainer(moe_path, model_args=args)
    cluster = train_cluster("deepspeed_train", moe_path, 2, {"zero_stage": 1}, per_device=8,
                            accum=2, model_args=args)
    ref = hf.train_step(rl_batch, dr_grpo_loss())
    got = rank_mean(cluster.scatter("train_step", rl_batch.shard(2), loss_fn=dr_grpo_loss(),
                                    ppo_epochs=1))
    assert got[METRIC] == pytest.approx(ref[METRIC], rel=1e-5)
    assert got["actor/grad_norm"] == pytest.approx(ref["actor/grad_norm"], rel=1e-5)
    weights, want = cluster_weights(cluster), hf.state_dict_for_sync()
    for name in (n for n in want if "mlp.gate" in n):
        assert torch.allclose(weights[name], want[name], atol=1e-6), name
