"""The critic on every training backend: the same value head and value loss through the
one update loop, so deepspeed_train and megatron_train follow hf_train's critic."""

from __future__ import annotations

import pytest
import torch

from flywheel.config.schema import WorkerConfig
from flywheel.workers.critic_loss import CriticLoss
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.model_head import VALUE

pytest.importorskip("deepspeed")
pytest.importorskip("megatron.core")
pytestmark = pytest.mark.slow

from backend_cases import max_diff_on, rank_mean, training_args  # noqa: E402
from test_megatron_train import CPUMegatronWorker  # noqa: E402

STEPS = 3


def hf_critic(model_path: str) -> HFTrainStrategy:
    cfg = WorkerConfig(training_args=training_args(8, 4))
    return HFTrainStrategy(model_path, cfg, seed=0, total_steps=10, head=VALUE)


@pytest.fixture(scope="module")
def critic_batch(rl_batch, tiny_model_path):
    batch = rl_batch.select(slice(None))
    batch.values = hf_critic(tiny_model_path).forward_values(batch)
    generator = torch.Generator().manual_seed(1)
    batch.returns = torch.randn(len(batch), 1, generator=generator) * batch.response_mask
    return batch


@pytest.mark.parametrize("backend", ["deepspeed_train", "megatron_train"])
def test_critic_follows_hf_critic(backend, train_cluster, tiny_model_path, critic_batch):
    if backend == "deepspeed_train":  # 2 ranks x (8 rows x 2) = 1 rank x (8 rows x 4)
        cluster = train_cluster(backend, tiny_model_path, 2, {"zero_stage": 2}, per_device=8,
                                accum=2, head=VALUE)
    else:
        cluster = train_cluster(backend, tiny_model_path, 1, {}, per_device=8, accum=4,
                                worker_cls=CPUMegatronWorker, head=VALUE)
    world = cluster.world_size
    hf, batch, loss = hf_critic(tiny_model_path), critic_batch, CriticLoss(value_clip=0.2)
    values = torch.cat(cluster.scatter("forward_values", batch.shard(world)))
    diffs = {"values": max_diff_on(batch.attention_mask, values, batch.values), "loss": 0.0}
    for _ in range(STEPS):
        ref = hf.train_step(batch, loss)
        got = rank_mean(cluster.scatter("train_step", batch.shard(world), loss_fn=loss,
                                        ppo_epochs=1))
        assert got["critic/optimizer_steps"] == ref["critic/optimizer_steps"] == 1
        assert got["critic/grad_norm"] == pytest.approx(ref["critic/grad_norm"], rel=1e-4)
        diffs["loss"] = max(diffs["loss"], abs(got["vf/loss"] - ref["vf/loss"]))
    after = torch.cat(cluster.scatter("forward_values", batch.shard(world)))
    diffs["values_after"] = max_diff_on(batch.attention_mask, after, hf.forward_values(batch))
    print(backend, diffs)
    assert diffs["values"] < 1e-4 and diffs["loss"] < 1e-6 and diffs["values_after"] < 1e-4
    assert diffs["values_after"] < float((after - values)[batch.response_mask.bool()].abs().max())
