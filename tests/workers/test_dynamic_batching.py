"""Micro-batches cut by a token budget (training_args.dynamic_batching, train_loop.py).

The cut must not change what is learned: the objective divides by the mini-batch's counts,
so one optimizer step over the same rows gives the same loss sum and the same weights
whether the mini-batch is cut into fixed row blocks or by tokens. Checked on hf_train
with the tiny model (token-mean with an entropy term, uneven lengths).
"""

from __future__ import annotations

import pytest
import torch
from backend_cases import actor_loss, training_args, uneven

from flywheel.config.schema import WorkerConfig
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.train_loop import split_to, token_budget_rows


def trainer(model_path: str, budget: int = 0) -> HFTrainStrategy:
    args = training_args(per_device=4, accum=4)  # the 16-row batch: one mini-batch
    args.dynamic_batching, args.max_tokens_per_micro_batch = budget > 0, budget
    return HFTrainStrategy(model_path, WorkerConfig(training_args=args), seed=0,
                           total_steps=10)


def test_rows_are_sorted_and_cut_to_the_budget():
    lengths = torch.tensor([3, 9, 5, 9, 2, 4])
    cut = token_budget_rows(lengths, 18)
    assert [c.tolist() for c in cut] == [[1, 3], [2, 5, 0], [4]]
    assert all(len(c) * int(lengths[c[0]]) <= 18 for c in cut)
    assert [c.tolist() for c in token_budget_rows(lengths, 4)][:2] == [[1], [3]]  # alone
    assert sorted(torch.cat(split_to(cut, lengths, 5)).tolist()) == list(range(6))
    assert len(split_to(cut, lengths, 5)) == 5


def recording(strategy: HFTrainStrategy) -> tuple[list, list]:
    """The micro-batches each optimizer step was given, and the gradients it stepped on."""
    cuts, grads = [], []
    forward_backward, optimizer_step = strategy.forward_backward, strategy.optimizer_step

    def record_cut(micros, *args):
        cuts.append(micros)
        return forward_backward(micros, *args)

    def record_grads(max_grad_norm):
        grads.append({n: p.grad.clone() for n, p in strategy.model.named_parameters()})
        return optimizer_step(max_grad_norm)

    strategy.forward_backward, strategy.optimizer_step = record_cut, record_grads
    return cuts, grads


def test_token_budget_gives_the_fixed_row_gradient(tiny_model_path, rl_batch):
    batch = uneven(rl_batch).select(slice(8, 24))  # 8 rows cut short, 8 whole
    fixed, budget = trainer(tiny_model_path), trainer(tiny_model_path, budget=40)
    (fixed_cuts, fixed_grads), (cuts, grads) = recording(fixed), recording(budget)
    loss = actor_loss(entropy_coef=0.01)  # token-mean: the global token count matters
    a, b = fixed.train_step(batch, loss), budget.train_step(batch, loss)
    assert [len(m) for m in fixed_cuts[0]] == [4, 4, 4, 4]
    assert len(cuts[0]) > 4 and sorted(torch.cat([m.input_ids for m in cuts[0]]).tolist()) \
        == sorted(batch.input_ids.tolist())  # every row once, in another cut
    assert all(len(m) * m.trimmed().input_ids.shape[1] <= 40 for m in cuts[0])
    assert a["actor/grad_norm"] == pytest.approx(b["actor/grad_norm"], rel=1e-5)
    for name, grad in fixed_grads[0].items():
        assert torch.allclose(grads[0][name], grad, atol=1e-7, rtol=1e-4), name


@pytest.mark.long  # two DeepSpeed ranks: minutes on a busy 2-core machine (make test-long)
def test_zero_ranks_that_cut_differently_run_as_many_micro_batches(train_cluster,
                                                                   tiny_model_path, rl_batch):
    """Two ZeRO-1 ranks, one holding the short rows: their budgets cut different numbers of
    micro-batches, and every rank must run the most (ZeRO's backward is a collective);
    the step is hf_train's fixed-row step."""
    pytest.importorskip("deepspeed")
    batch = uneven(rl_batch).select(slice(8, 24))  # rank 0: 8 rows cut short; rank 1: whole
    loss = actor_loss()
    ref = trainer(tiny_model_path).train_step(batch, loss)
    cluster = train_cluster("deepspeed_train", tiny_model_path, 2, {"zero_stage": 1},
                            per_device=4, accum=2, token_budget=40)
    got = cluster.scatter("train_step", batch.shard(2), loss_fn=loss, ppo_epochs=1)
    assert got[0]["actor/grad_norm"] == pytest.approx(ref["actor/grad_norm"], rel=1e-5)
