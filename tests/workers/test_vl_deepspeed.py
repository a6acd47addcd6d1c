"""deepspeed_train with images in context (issue 29 item 2): two ranks score hf_infer's
sampled image rows with the images (their log-probs are the sampler's), and a train step
with `freeze_module_prefix` takes hf_train's frozen step (the same gradient norm: a vision
tower that trained, or images that were dropped, would change it), and its weight sync
leaves the frozen tower out as hf_train's does. ROLL's VL configs run
their actor on Megatron or FSDP2, which the converter maps here."""

from __future__ import annotations

import pytest
import torch
from backend_cases import cluster_weights
from test_vl_hf import infer, prompts, sampled, train  # noqa: F401 (fixtures)

from flywheel.algorithms import PolicyLossParams
from flywheel.config.schema import ModelArgs
from flywheel.workers.actor_loss import ActorLoss


@pytest.mark.long  # two DeepSpeed ranks on the VL model (make test-long)
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_ranks_score_and_train_with_the_images(train_cluster, tiny_idefics3_path,
                                                         sampled, stage):  # noqa: F811
    pytest.importorskip("deepspeed")
    _, batch = sampled  # 6 rows: a one-image prompt, a two-image one, a text one, x 2
    batch.old_log_probs = batch.infer_log_probs
    torch.manual_seed(0)
    batch.advantages = torch.randn(len(batch))[:, None] * batch.response_mask
    loss = ActorLoss("ppo", PolicyLossParams(), "seq-mean-token-mean", norm_length=6)
    cluster = train_cluster("deepspeed_train", tiny_idefics3_path, 2, {"zero_stage": stage},
                            per_device=3, accum=1,
                            model_args=ModelArgs(freeze_module_prefix="vision_model"))
    shards = batch.shard(2)
    scored = torch.cat(cluster.scatter("forward_logprobs", shards))
    mask = batch.response_mask.bool()
    assert torch.allclose(scored[mask], batch.infer_log_probs[mask], atol=1e-5)
    got = cluster.scatter("train_step", shards, loss_fn=loss, ppo_epochs=1)
    frozen = train(tiny_idefics3_path, "vision_model").train_step(batch, loss)
    trained = train(tiny_idefics3_path).train_step(batch, loss)
    assert got[0]["actor/grad_norm"] == pytest.approx(frozen["actor/grad_norm"], rel=1e-5)
    assert frozen["actor/grad_norm"] != pytest.approx(trained["actor/grad_norm"], rel=1e-3)
    # the sync leaves the frozen tower out (ungathered under ZeRO-3) and sends the rest
    synced = cluster_weights(cluster)
    names = {n for n, _ in train(tiny_idefics3_path, "vision_model").weights_for_sync()}
    assert set(synced) == names and not [n for n in names if ".vision_model." in f".{n}"]
