"""Mixed precision on hf_train (mixed_precision.py): fp32 masters under a bf16/fp16 forward,
fp16's dynamic loss scaler, and what leaves the trainer (synced weights, checkpoints).

The test that matters most: at lr 1e-6 (the default) a bf16 or fp16 step must move the
weights as an fp32 step does. Stepping bf16 weights directly (what hf_train did before)
rounds almost every such update away: cosine ~0.1 to the fp32 update on this model, 98% of
the weights unchanged (bench/bench_mixed_precision.py measures it on SmolLM2).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from backend_cases import actor_loss, untimed

from flywheel.config.schema import ModelArgs, TrainingArgs, WorkerConfig
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.mixed_precision import LossScaler
from flywheel.workers.strategies.train_loop import DivergenceError


@pytest.fixture(scope="module")
def batch(rl_batch):
    """8 of the 32 rows (bf16 and fp16 matrix products are slow on CPU)."""
    return rl_batch.chunks(8)[0]


def trainer(path: str, dtype: str, lr: float = 1e-6, trainable: bool = True,
            rows: int = 4, accum: int = 2) -> HFTrainStrategy:
    cfg = WorkerConfig(model_args=ModelArgs(dtype=dtype), infer_batch_size=rows,
                       training_args=TrainingArgs(learning_rate=lr,
                                                  per_device_train_batch_size=rows,
                                                  gradient_accumulation_steps=accum))
    return HFTrainStrategy(path, cfg, seed=0, total_steps=100, trainable=trainable)


def masters(strategy: HFTrainStrategy) -> dict[str, torch.Tensor]:
    return {n: p.detach().float().clone() for n, p in strategy.model.named_parameters()}


def update(strategy: HFTrainStrategy, batch) -> dict[str, torch.Tensor]:
    """The change of every parameter over one train step of `batch` (one optimizer step)."""
    before = masters(strategy)
    metrics = strategy.train_step(batch, actor_loss())
    assert metrics["actor/optimizer_steps"] == 1
    return {n: p - before[n] for n, p in masters(strategy).items()}


def flat(delta: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([d.reshape(-1) for d in delta.values()]).double()


# ---- the loss scaler on its own ---------------------------------------------------------
def test_loss_scaler_halves_on_overflow_and_doubles_after_a_run_of_finite_steps():
    scaler = LossScaler(scale=8.0, growth_interval=3)
    scaler.update(finite=False)
    assert (scaler.scale, scaler.good_steps) == (4.0, 0)
    for _ in range(2):
        scaler.update(finite=True)
    assert scaler.scale == 4.0
    scaler.update(finite=True)  # the third finite step in a row
    assert (scaler.scale, scaler.good_steps) == (8.0, 0)
    scaler.update(finite=True)
    scaler.update(finite=False)  # an overflow restarts the count
    assert (scaler.scale, scaler.good_steps) == (4.0, 0)
    grads = [torch.full((2,), 8.0)]
    scaler.unscale_(grads)
    assert grads[0].tolist() == [2.0, 2.0]
    assert float(scaler.scaled(torch.tensor(0.5))) == 2.0


def test_loss_scaler_overflow_at_the_minimum_scale_is_a_divergence():
    scaler = LossScaler(scale=2.0, min_scale=1.0)
    scaler.update(finite=False)
    assert scaler.scale == 1.0
    with pytest.raises(DivergenceError, match="loss scale 1"):
        scaler.update(finite=False)


# ---- hf_train ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_low_precision_step_at_lr_1e6_moves_the_weights_as_fp32_does(tiny_model_path,
                                                                     batch, dtype):
    reference = flat(update(trainer(tiny_model_path, "fp32"), batch))
    low = trainer(tiny_model_path, dtype)
    delta = flat(update(low, batch))
    cosine = float(delta @ reference / (delta.norm() * reference.norm()))
    print(f"{dtype}: cosine {cosine:.4f}, norm ratio {float(delta.norm() / reference.norm()):.4f}"
          f", unchanged {float((delta == 0).double().mean()):.4f} "
          f"(fp32 {float((reference == 0).double().mean()):.4f})")
    assert cosine > 0.99
    assert abs(float(delta.norm() / reference.norm()) - 1) < 0.02
    assert float((delta == 0).double().mean()) <= float((reference == 0).double().mean()) + 0.01
    assert all(p.dtype == torch.float32 for p in low.model.parameters())  # fp32 masters


def test_forward_logprobs_are_those_of_the_training_forward(tiny_model_path, batch):
    """Both run under the same autocast: the first step's policy ratio is exactly 1."""
    strategy = trainer(tiny_model_path, "bf16", rows=len(batch), accum=1)
    batch = dataclasses.replace(batch.trimmed())
    batch.old_log_probs = strategy.forward_logprobs(batch)
    fp32 = trainer(tiny_model_path, "fp32").forward_logprobs(batch)
    mask = batch.response_mask.bool()
    assert 0 < float((batch.old_log_probs - fp32)[mask].abs().max()) < 0.05  # bf16 compute
    metrics = strategy.train_step(batch, actor_loss())
    assert metrics["pg/ratio_min"] == metrics["pg/ratio_max"] == 1.0


def test_synced_weights_are_the_masters_in_the_compute_dtype(tiny_model_path, batch):
    strategy = trainer(tiny_model_path, "bf16", lr=1e-3)
    strategy.train_step(batch, actor_loss())
    live = dict(strategy.model.state_dict())
    full = strategy.state_dict_for_sync()
    streamed = dict(strategy.weights_for_sync())
    assert set(streamed) <= set(full) and "model.embed_tokens.weight" in streamed
    for name, tensor in full.items():
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, live[name].bfloat16())
    for name, tensor in streamed.items():
        assert torch.equal(tensor, full[name])


def test_reference_log_probs_are_the_actors_for_the_same_weights(tiny_model_path, batch):
    """The reference holds fp32 weights under the same autocast: KL 0 at step 0."""
    actor = trainer(tiny_model_path, "bf16").forward_logprobs(batch)
    reference = trainer(tiny_model_path, "bf16", trainable=False)
    assert reference.optimizer is None
    assert torch.equal(reference.forward_logprobs(batch), actor)


def test_fp16_overflow_is_skipped_and_the_scale_settles(tiny_model_path, batch):
    """A loss scale far too large: the step overflows and is skipped (no weight, AdamW
    state or schedule change); from a scale a few halvings too large, the scale halves
    until the gradients fit (2^18 does on this model and batch, 2^20 does not), then
    steps apply."""
    strategy = trainer(tiny_model_path, "fp16", lr=1e-3, rows=8, accum=1)
    strategy.precision.scaler.scale = 2.0 ** 40
    before = masters(strategy)
    metrics = strategy.train_step(batch, actor_loss())
    assert metrics["actor/skipped_steps"] == 1 and metrics["actor/loss_scale"] == 2.0 ** 39
    assert all(torch.equal(p, before[n]) for n, p in masters(strategy).items())
    assert not strategy.optimizer.state and strategy.scheduler.last_epoch == 0
    strategy.precision.scaler.scale = 2.0 ** 22
    metrics = strategy.train_step(batch, actor_loss(), ppo_epochs=6)
    skipped = metrics["actor/skipped_steps"]
    assert 0 < skipped < 6 and metrics["actor/optimizer_steps"] == 6
    assert metrics["actor/loss_scale"] == 2.0 ** (22 - skipped)
    assert math.isfinite(metrics["actor/grad_norm"]) and metrics["actor/grad_norm"] > 0
    assert strategy.scheduler.last_epoch == 6 - skipped
    assert any(not torch.equal(p, before[n]) for n, p in masters(strategy).items())


def test_fp16_checkpoint_keeps_the_masters_and_the_loss_scale(tiny_model_path, batch,
                                                             tmp_path):
    a = trainer(tiny_model_path, "fp16", lr=1e-3)
    a.train_step(batch, actor_loss())
    a.precision.scaler.scale, a.precision.scaler.good_steps = 1024.0, 7
    a.save(str(tmp_path / "ckpt"))
    b = trainer(tiny_model_path, "fp16", lr=1e-3)
    b.load(str(tmp_path / "ckpt"))
    assert b.precision.scaler.state_dict() == {"scale": 1024.0, "good_steps": 7}
    for name, value in masters(a).items():
        assert torch.equal(value, masters(b)[name]), name  # fp32, not rounded to fp16
    assert untimed(a.train_step(batch, actor_loss())) == untimed(b.train_step(batch,
                                                                          actor_loss()))
    for name, value in masters(a).items():
        assert torch.equal(value, masters(b)[name]), name
