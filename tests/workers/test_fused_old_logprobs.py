"""Old log-probs from the training forward (strategies/fused_old_logprobs.py).

When a train step is one optimizer step, actor_train skips the separate old-log-prob
forward and takes ℓ_old from each micro-batch's training forward. It must train exactly
like the separate pass up to float rounding (different batch shapes): the same loss and
off-policy metrics, the same weights after the step. With more than one optimizer step, or
with dropout, the separate pass is still run.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from backend_cases import actor_loss, make_rl_batch, training_args, untimed

from flywheel.algorithms import MismatchCorrection
from flywheel.config.schema import WorkerConfig
from flywheel.workers.train_worker import TrainWorker

METRIC_REL = 1e-5  # fp32 tiny model: the two paths differ only in batch shapes' rounding
WEIGHT_ATOL = 1e-6  # after one AdamW step at lr 1e-3


@pytest.fixture(scope="module")
def batch(tiny_model_path):
    """32 rows without old log-probs; sampled log-probs nudged so the mismatch weights
    spread past the bounds (some truncated or masked)."""
    batch = make_rl_batch(tiny_model_path)
    noise = torch.randn(batch.infer_log_probs.shape, generator=torch.Generator().manual_seed(1))
    return dataclasses.replace(
        batch, old_log_probs=None,
        infer_log_probs=batch.infer_log_probs + 0.5 * noise * batch.response_mask)


def worker(path: str, per_device: int = 8, accum: int = 4) -> TrainWorker:
    cfg = WorkerConfig(training_args=training_args(per_device, accum))
    return TrainWorker("actor_train", 0, 1, path, cfg, seed=0, total_steps=4, trainable=True)


def counting_forwards(w: TrainWorker) -> list[int]:
    """Counts the strategy's separate old-log-prob forwards."""
    calls, forward = [], w.strategy.forward_logprobs
    w.strategy.forward_logprobs = lambda b: calls.append(1) or forward(b)
    return calls


@pytest.mark.parametrize("correction", [
    MismatchCorrection("token", "truncate", upper=1.5, apply=True),
    MismatchCorrection("sequence", "mask", lower=0.5, upper=2.0, apply=True),
    MismatchCorrection(),  # metrics only
], ids=["token-truncate", "seq-mask", "none"])
def test_one_step_update_fuses_and_trains_like_the_separate_pass(tiny_model_path, batch,
                                                                 correction):
    loss = actor_loss(entropy_coef=1e-3)
    # 32 rows = one mini-batch of 4 micro-batches: one optimizer step
    separate = worker(tiny_model_path)
    unfused = dataclasses.replace(batch)
    unfused.old_log_probs = separate.forward_logprobs(unfused)
    unfused.is_weights, want = correction(unfused.old_log_probs, unfused.infer_log_probs,
                                          unfused.response_mask)
    want |= separate.strategy.train_step(unfused, loss, 1)

    fused = worker(tiny_model_path)
    forwards = counting_forwards(fused)
    got = fused.train_step(dataclasses.replace(batch), loss, 1, old_log_probs=correction)

    assert forwards == [] and got.pop("actor/old_logprobs_fused") == 1.0
    assert got.keys() == want.keys()
    assert want["actor/optimizer_steps"] == 1
    if correction.apply:
        assert want["offpolicy/truncated_frac"] + want["offpolicy/masked_frac"] > 0
    for name in untimed(want):
        assert got[name] == pytest.approx(want[name], rel=METRIC_REL, abs=1e-7), name
    for (name, a), (_, b) in zip(separate.strategy.model.state_dict().items(),
                                 fused.strategy.model.state_dict().items()):
        assert torch.allclose(a, b, rtol=0, atol=WEIGHT_ATOL), name


@pytest.mark.parametrize("ppo_epochs, accum", [(2, 4), (1, 2)],
                         ids=["two-epochs", "two-mini-batches"])
def test_more_than_one_optimizer_step_keeps_the_separate_pass(tiny_model_path, batch,
                                                              ppo_epochs, accum):
    w = worker(tiny_model_path, accum=accum)
    forwards = counting_forwards(w)
    got = w.train_step(dataclasses.replace(batch), actor_loss(), ppo_epochs,
                       old_log_probs=MismatchCorrection())
    assert forwards == [1] and got["actor/old_logprobs_fused"] == 0.0
    assert got["actor/optimizer_steps"] == 2 and "offpolicy/k3_kl" in got


def test_dropout_keeps_the_separate_pass(tiny_model_path):
    strategy = worker(tiny_model_path).strategy
    assert strategy.fuses_old_logprobs(32, 1) and not strategy.fuses_old_logprobs(33, 1)
    strategy.model.config.attention_dropout = 0.1  # applied functionally: no module
    assert not strategy.fuses_old_logprobs(32, 1)
    strategy.model.config.attention_dropout = 0.0
    strategy.model.config.router_jitter_noise = 0.01  # Mixtral's train-mode router noise
    assert not strategy.fuses_old_logprobs(32, 1)
    strategy.model.config.router_jitter_noise = 0.0
    strategy.model.model.extra_dropout = torch.nn.Dropout(0.1)
    assert not strategy.fuses_old_logprobs(32, 1)
