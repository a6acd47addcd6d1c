"""deepspeed_train against hf_train: ZeRO 1/2/3 over two data-parallel ranks.

Two ranks holding half of a 32-row batch each must train exactly like one hf_train rank
holding all of it (token-mean loss: the global token count is all-reduced, gradients are
summed), so the loss curve, the gradient norm and the weights after 10 steps agree. With
a LoRA adapter too (ZeRO-1 and ZeRO-3): the same steps as hf_train's LoRA, the frozen base
untouched, the merged weights synced, a checkpoint of the adapter that resumes exactly.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import sys

import pytest
import torch
from ray import cloudpickle
from safetensors.torch import load_file

from flywheel.algorithms import MismatchCorrection
from flywheel.config.schema import ModelArgs
from flywheel.workers.strategies import deepspeed_train
from flywheel.workers.strategies.lora import ADAPTER_WEIGHTS
from flywheel.workers.train_worker import TrainWorker

pytest.importorskip("deepspeed")
pytestmark = pytest.mark.slow

from backend_cases import (  # noqa: E402
    PARITY_ATOL,
    actor_loss,
    check_dr_grpo_step,
    cluster_weights,
    hf_trainer,
    max_diff_on,
    rank_mean,
    untimed,
    weight_diff,
)

STEPS = 10
SHM_FILES = "/dev/shm/deepspeed_allreduce_buffer_*"


def start_zero(train_cluster, model_path: str, stage: int, **kwargs):
    # 2 ranks x (8 rows x 2 micro-batches) = hf_train's 1 rank x (8 rows x 4 micro-batches)
    return train_cluster("deepspeed_train", model_path, 2, {"zero_stage": stage},
                         per_device=8, accum=2, **kwargs)


# ZeRO-2 partitions gradients as ZeRO-1 does optimizer state, on the same path: make test-long
@pytest.mark.parametrize("stage", [1, pytest.param(2, marks=pytest.mark.long), 3])
def test_two_zero_ranks_train_like_one_hf_rank(stage, train_cluster, tiny_model_path,
                                               rl_batch):
    hf = hf_trainer(tiny_model_path)
    cluster = start_zero(train_cluster, tiny_model_path, stage)
    log_probs = torch.cat(cluster.scatter("forward_logprobs", rl_batch.shard(2)))
    assert max_diff_on(rl_batch.attention_mask, log_probs,
                       rl_batch.old_log_probs) < PARITY_ATOL
    check_dr_grpo_step(tiny_model_path, rl_batch, hf, cluster)
    loss, curve = actor_loss(), []
    for _ in range(STEPS):
        ref = hf.train_step(rl_batch, loss)
        got = rank_mean(cluster.scatter("train_step", rl_batch.shard(2), loss_fn=loss,
                                        ppo_epochs=1))
        assert got["actor/optimizer_steps"] == ref["actor/optimizer_steps"] == 1
        curve.append((ref["pg/loss"], got["pg/loss"]))
        assert got["actor/grad_norm"] == pytest.approx(ref["actor/grad_norm"], rel=1e-5)
    print(f"zero {stage}: max loss diff "
          f"{max(abs(a - b) for a, b in curve):.2e}", end=" ")
    assert [b for _, b in curve] == pytest.approx([a for a, _ in curve], abs=1e-6)
    assert curve[-1][0] < curve[0][0]  # it does learn on this batch
    diff = weight_diff(cluster_weights(cluster), hf.state_dict_for_sync())
    print(f"weights after {STEPS} steps {diff:.2e}")
    assert diff < 1e-4


@pytest.mark.parametrize("stage", [1, pytest.param(3, marks=pytest.mark.long)])  # suite budget
def test_one_step_update_takes_old_logprobs_from_the_training_forward(
        stage, train_cluster, tiny_model_path, rl_batch):
    """strategies/fused_old_logprobs.py on two ZeRO ranks: both skip the separate pass
    (under ZeRO-3 a collective, so they must decide alike), each rank's off-policy metrics
    are the separate pass's over its shard, and the step is hf_train's unfused one."""
    correction = MismatchCorrection("token", "truncate", upper=1.5, apply=True)
    unfused = dataclasses.replace(rl_batch)
    unfused.is_weights, _ = correction(rl_batch.old_log_probs, rl_batch.infer_log_probs,
                                       rl_batch.response_mask)
    hf = hf_trainer(tiny_model_path)
    want = hf.train_step(unfused, actor_loss())
    cluster = start_zero(train_cluster, tiny_model_path, stage)
    got = cluster.scatter("train_step", dataclasses.replace(rl_batch, old_log_probs=None)
                          .shard(2), loss_fn=actor_loss(), ppo_epochs=1,
                          old_log_probs=correction)
    for shard, metrics in zip(rl_batch.shard(2), got):
        assert metrics["actor/old_logprobs_fused"] == 1.0
        _, shard_want = correction(shard.old_log_probs, shard.infer_log_probs,
                                   shard.response_mask)
        for name, value in shard_want.items():
            assert metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
    mean = rank_mean(got)
    assert mean["pg/loss"] == pytest.approx(want["pg/loss"], abs=1e-6)
    assert mean["actor/grad_norm"] == pytest.approx(want["actor/grad_norm"], rel=1e-5)
    # ZeRO-1 lands within 1e-5 of hf_train; ZeRO-3 5.4e-5 away, fused or with the old
    # log-probs handed in alike (its own rounding after one AdamW step at lr 1e-3)
    assert weight_diff(cluster_weights(cluster), hf.state_dict_for_sync()) < PARITY_ATOL


def test_zero3_checkpoint_resumes_exactly_and_leaves_no_shm_files(train_cluster,
                                                                  tiny_model_path, rl_batch,
                                                                  tmp_path):
    before = set(glob.glob(SHM_FILES))
    # LOCAL_SIZE=2 tells DeepSpeed both ranks share a host: it maps a shared-memory
    # all-reduce buffer per rank, which the strategy unlinks once every rank has it mapped.
    cluster = start_zero(train_cluster, tiny_model_path, 3, env_vars={"LOCAL_SIZE": "2"})
    assert set(glob.glob(SHM_FILES)) - before == set()
    saved = check_resumes_exactly(cluster, rl_batch, tmp_path / "ckpt")
    hf_file = tmp_path / "ckpt" / "model" / "model.safetensors"  # full model, HF format
    assert weight_diff(load_file(hf_file), saved) == 0.0


def check_resumes_exactly(cluster, batch, ckpt) -> dict[str, torch.Tensor]:
    """One step and a checkpoint, two more steps; then the checkpoint loaded and the two
    steps again: the same metrics and weights, bit for bit. Returns the weights saved."""
    loss, shards = actor_loss(), batch.shard(2)

    def step() -> tuple[dict, dict]:
        metrics = rank_mean(cluster.scatter("train_step", shards, loss_fn=loss, ppo_epochs=1))
        return metrics, cluster_weights(cluster)

    step()
    saved = cluster_weights(cluster)
    cluster.call_all("save", str(ckpt))
    first = [step() for _ in range(2)]
    cluster.call_all("load", str(ckpt))  # partitions, AdamW moments, schedule
    assert weight_diff(cluster_weights(cluster), saved) == 0.0
    again = [step() for _ in range(2)]
    for (m1, w1), (m2, w2) in zip(first, again, strict=True):
        assert untimed(m1) == untimed(m2) and weight_diff(w1, w2) == 0.0
    return saved


# fp32, so that two backends' numbers agree to PARITY_ATOL; a fully trained norm as well
LORA = ModelArgs(lora_target="all-linear", lora_rank=4, additional_target="model.norm")
LORA_STEPS = 3  # B moves from the first step (A's first gradient is 0, B being 0), A after


class ParamsWorker(TrainWorker):
    """Hands out the model's parameters, gathered under ZeRO-3 (a collective: call_all);
    cuts the weight sync's ZeRO-3 runs small, so that an adapted weight's run (q_proj's)
    holds none of its A and B unless the sync gathers them on purpose."""

    def __init__(self, *args, **kwargs):
        deepspeed_train.GATHER_BYTES = 1 << 16  # a q_proj weight (fp32) fills a run
        super().__init__(*args, **kwargs)

    def named_params(self) -> dict[str, tuple[bool, torch.Tensor]]:
        strategy = self.strategy
        with strategy._gathered():
            return {n: (p.requires_grad, p.detach().clone())
                    for n, p in strategy.engine.module.named_parameters()}


# Ray workers cannot import test modules; ship this module's classes by value instead.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ~80 s each on 2 cores (two ZeRO ranks and an hf_train rank): make test-long. hf_train's
# LoRA (tests/workers/test_lora.py) runs in make test.
@pytest.mark.long
@pytest.mark.parametrize("stage", [1, 3])
def test_a_lora_step_on_two_zero_ranks_is_hf_trains_and_moves_only_the_adapter(
        stage, train_cluster, tiny_model_path, rl_batch):
    """The same adapter (same seed) trained by two ZeRO ranks and by one hf_train rank:
    gradient norms, losses, the adapter after the steps, the log-probs and the merged
    weights synced all agree; the frozen base is bit for bit the loaded one, and with the
    trained adapter disabled the log-probs are the base model's (the reference)."""
    hf = hf_trainer(tiny_model_path, model_args=LORA)
    cluster = start_zero(train_cluster, tiny_model_path, stage, model_args=LORA,
                         worker_cls=ParamsWorker)
    shards, mask, loss = rl_batch.shard(2), rl_batch.attention_mask, actor_loss()
    before = cluster.call_all("named_params")[0]
    hf_params = {n: p.detach() for n, p in hf.model.named_parameters()}
    assert before.keys() == hf_params.keys()
    assert all(torch.equal(before[n][1], hf_params[n]) for n in hf_params)  # the same A
    for _ in range(LORA_STEPS):
        ref = hf.train_step(rl_batch, loss)
        got = rank_mean(cluster.scatter("train_step", shards, loss_fn=loss, ppo_epochs=1))
        assert got["actor/grad_norm"] == pytest.approx(ref["actor/grad_norm"], rel=1e-5)
        assert got["pg/loss"] == pytest.approx(ref["pg/loss"], abs=1e-6)
    after = cluster.call_all("named_params")[0]
    trained = {n for n, (grad, _) in after.items() if grad}
    assert trained == {n for n, p in hf.model.named_parameters() if p.requires_grad}
    assert all(torch.equal(after[n][1], before[n][1]) for n in after.keys() - trained)
    assert all(not torch.equal(after[n][1], before[n][1]) for n in trained)
    diff = max(float((after[n][1] - p.detach()).abs().max())
               for n, p in hf.model.named_parameters())
    print(f"zero {stage} LoRA: parameters after {LORA_STEPS} steps {diff:.2e}")
    assert diff < PARITY_ATOL
    log_probs = torch.cat(cluster.scatter("forward_logprobs", shards))
    assert max_diff_on(mask, log_probs, hf.forward_logprobs(rl_batch)) < PARITY_ATOL
    base = torch.cat(cluster.scatter("forward_base_logprobs", shards))
    assert max_diff_on(mask, base, rl_batch.old_log_probs) < PARITY_ATOL  # hf_train's base
    print(f"adapter on vs off: {max_diff_on(mask, log_probs, base):.2e}")
    assert max_diff_on(mask, log_probs, base) > 100 * PARITY_ATOL  # the adapter acts
    synced, want = cluster_weights(cluster), hf.state_dict_for_sync()
    assert synced.keys() == want.keys()  # the base model's names: actor_infer loads them
    assert weight_diff(synced, want) < PARITY_ATOL


# suite budget: hf_train's LoRA checkpoint round trip runs in make test (tests/workers/
# test_lora.py); this ZeRO-3 one in make test-long
@pytest.mark.long
def test_a_zero3_lora_checkpoint_holds_the_adapter_and_resumes_exactly(
        train_cluster, tiny_model_path, rl_batch, tmp_path):
    cluster = start_zero(train_cluster, tiny_model_path, 3, model_args=LORA)
    check_resumes_exactly(cluster, rl_batch, tmp_path / "ckpt")
    adapter = load_file(tmp_path / "ckpt" / "adapter" / ADAPTER_WEIGHTS)
    assert len(adapter) == 2 * 4 * 7 + 1  # A and B of 4 layers x 7 linear layers, the norm
    state = tmp_path / "ckpt" / "deepspeed"
    state_bytes = sum(f.stat().st_size for f in state.rglob("*") if f.is_file())
    model_bytes = os.path.getsize(os.path.join(tiny_model_path, "model.safetensors"))
    assert state_bytes < model_bytes / 2  # adapter, masters and moments; no frozen weight


@pytest.mark.long  # two ZeRO-3 ranks and an hf_train rank, ~80 s on 2 cores
def test_a_zero3_lora_run_started_from_an_adapter_anchors_its_reference_there(
        train_cluster, tiny_model_path, rl_batch, tmp_path):
    """With adapter_name_or_path the reference is the starting adapter on the base (a
    frozen copy, lora.py), on two ZeRO-3 ranks as on hf_train: equal to the policy before
    any step, unmoved by the steps."""
    sft = hf_trainer(tiny_model_path, model_args=LORA)
    with torch.no_grad():
        for p in sft.model.parameters():
            if p.requires_grad:
                p.add_(0.05)
    sft.adapter.save_pretrained(str(tmp_path / "sft"))
    start = sft.forward_logprobs(rl_batch)
    args = dataclasses.replace(LORA, adapter_name_or_path=str(tmp_path / "sft"))
    cluster = start_zero(train_cluster, tiny_model_path, 3, model_args=args)
    shards, mask, loss = rl_batch.shard(2), rl_batch.attention_mask, actor_loss()
    base = torch.cat(cluster.scatter("forward_base_logprobs", shards))
    assert max_diff_on(mask, base, start) < PARITY_ATOL
    for _ in range(LORA_STEPS):
        cluster.scatter("train_step", shards, loss_fn=loss, ppo_epochs=1)
    base = torch.cat(cluster.scatter("forward_base_logprobs", shards))
    assert max_diff_on(mask, base, start) < PARITY_ATOL
    moved = torch.cat(cluster.scatter("forward_logprobs", shards))
    assert max_diff_on(mask, moved, start) > 100 * PARITY_ATOL
