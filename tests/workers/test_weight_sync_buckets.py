"""Weight sync in buckets (workers/weight_buckets.py): bounded buckets through Ray's object
store, loaded in place by hf_infer and vllm, giving exactly the weights (and so exactly the
generations) of an engine loaded fresh from the same checkpoint.

Buckets of 64 KiB cut the tiny model (~1.3 MB) into ~20 pieces, so layers straddle
buckets, which is what vLLM's layerwise reload has to cope with.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from backend_cases import PROMPTS, actor_loss, hf_trainer
from safetensors.torch import save_file

from flywheel.config.schema import WorkerConfig
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.weight_buckets import buckets, gather_weights, put_weights, stream_weights

SMALL = 64 << 10
SAMPLED = SamplingParams(max_new_tokens=8, n=2, seed=11)
GREEDY = SamplingParams(max_new_tokens=8, do_sample=False)


@pytest.fixture(scope="module")
def trained(tiny_model_path, rl_batch):
    """hf_train after three large steps: weights far from the checkpoint's."""
    trainer = hf_trainer(tiny_model_path)
    trainer.optimizer.param_groups[0]["lr"] = 3e-2
    for _ in range(3):
        trainer.train_step(rl_batch, actor_loss())
    return trainer


def outputs(engine, prompts=PROMPTS[:6]):
    return [[(g.token_ids, g.log_probs) for g in engine.generate(prompts, s)]
            for s in (SAMPLED, GREEDY)]


def test_buckets_are_bounded_and_carry_every_byte(ray_session):
    gen = torch.Generator().manual_seed(0)
    tensors = {"a": torch.randn(100, 50, generator=gen),  # 20000 bytes
               "b": torch.randn(30, generator=gen).to(torch.bfloat16),
               "c": torch.randn(7, 3, generator=gen).to(torch.float16),
               "big": torch.randn(9000, generator=gen),  # 36000 bytes: alone
               "steps": torch.tensor(5, dtype=torch.int64),
               "d": torch.randn(4000, generator=gen)}
    cut = list(buckets(tensors.items(), max_bytes=24000))
    assert [b.names for b in cut] == [["a", "b", "c"], ["big"], ["steps", "d"]]
    assert all(b.nbytes <= 24000 or len(b.names) == 1 for b in cut)
    back = gather_weights(put_weights(tensors.items(), max_bytes=24000))
    assert list(back) == list(tensors)
    for name, tensor in tensors.items():
        assert back[name].dtype == tensor.dtype and back[name].shape == tensor.shape
        assert torch.equal(back[name], tensor), name


def test_hf_train_sends_its_live_tensors_and_a_tied_head_once(trained):
    full = trained.state_dict_for_sync()
    streamed = dict(trained.weights_for_sync())
    assert "lm_head.weight" in full and "lm_head.weight" not in streamed  # tied model
    assert set(streamed) == set(full) - {"lm_head.weight"}
    assert all(torch.equal(streamed[k], full[k]) for k in streamed)


def test_hf_infer_in_buckets_equals_the_whole_model_path(ray_session, tiny_model_path,
                                                         trained):
    bucketed = HFInferStrategy(tiny_model_path, WorkerConfig(), seed=0)
    bucketed.update_weights_from_buckets(
        stream_weights(put_weights(trained.weights_for_sync(), SMALL)), version=1)
    whole = HFInferStrategy(tiny_model_path, WorkerConfig(), seed=0)
    whole.model.load_state_dict(trained.state_dict_for_sync())  # the path before buckets
    for (k, a), b in zip(bucketed.model.state_dict().items(), whole.model.state_dict().values()):
        assert torch.equal(a, b), k
    assert bucketed.version == 1 and outputs(bucketed) == outputs(whole)


def test_hf_infer_refuses_a_weight_it_does_not_have(tiny_model_path):
    engine = HFInferStrategy(tiny_model_path, WorkerConfig(), seed=0)
    with pytest.raises(ValueError, match="unexpected=\\['model.nope'\\]"):
        engine.update_weights_from_buckets([{"model.nope": torch.zeros(2)}], version=1)


@pytest.mark.slow
def test_vllm_in_buckets_equals_a_fresh_engine(ray_session, tiny_model_path, trained,
                                               tmp_path):
    pytest.importorskip("vllm")
    from flywheel.workers.strategies import vllm_infer

    set_num_threads = torch.set_num_threads  # vLLM's CPU worker replaces it process-wide
    try:
        synced = vllm_infer.VLLMInferStrategy(tiny_model_path, WorkerConfig(), seed=0)
        before = outputs(synced)
        synced.update_weights_from_buckets(
            stream_weights(put_weights(trained.weights_for_sync(), SMALL)), version=1)
        after = outputs(synced)
        assert synced.in_process and synced.version == 1
        folder = shutil.copytree(tiny_model_path, tmp_path / "trained")
        save_file({k: v.contiguous() for k, v in trained.state_dict_for_sync().items()},
                  str(folder / "model.safetensors"))
        fresh = vllm_infer.VLLMInferStrategy(str(folder), WorkerConfig(), seed=0)
        assert after != before and after == outputs(fresh)
    finally:
        torch.set_num_threads = set_num_threads
