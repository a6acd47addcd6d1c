"""Weight sync through shared memory (workers/weight_shm.py): every byte arrives, files are
reused only once every reader is past them, the newest sync is never overwritten, a dead
writer's files are swept, and hf_infer loaded from it holds exactly the trainer's weights.

Every RLVR and agentic run of the suite syncs this way (one node: the start-up line says
"weight sync: shared memory"); tests/pipelines/test_collective_weight_sync.py compares a
run on it with one on the collective path.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from backend_cases import hf_trainer

from flywheel.config.schema import WorkerConfig
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.weight_shm import (
    PREFIX,
    SharedWeightWriter,
    mark_loaded,
    read_buckets,
    remove_orphans,
    shared_memory_room,
)
from flywheel.workers.weight_transfer import copied_weights, received_buckets


def tensors(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(100, 50, generator=gen),  # 20000 bytes
            "b": torch.randn(30, generator=gen).to(torch.bfloat16),
            "big": torch.randn(9000, generator=gen),  # 36000 bytes: a bucket alone
            "steps": torch.tensor(seed, dtype=torch.int64),
            "d": torch.randn(4000, generator=gen)}


@pytest.fixture
def writer(tmp_path):
    w = SharedWeightWriter(readers=2, bucket_bytes=24000, directory=str(tmp_path))
    yield w
    w.close()


def test_every_byte_arrives_in_bounded_buckets(writer):
    sent = tensors(1)
    handle = writer.publish(sent.items())
    cut = [list(b) for b in read_buckets(handle)]
    assert cut == [["a", "b"], ["big"], ["steps", "d"]]
    back = copied_weights(handle)
    assert list(back) == list(sent)
    for name, tensor in sent.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name


def test_files_are_reused_only_when_every_reader_is_past_them(writer):
    first = writer.publish(tensors(1).items())
    mark_loaded(first, 0)
    second = writer.publish(tensors(2).items())  # reader 1 may still read the first
    assert second.path != first.path
    mark_loaded(first, 1)
    third = writer.publish(tensors(3).items())  # the first is free, the second newest
    assert third.path == first.path
    fourth = writer.publish(tensors(4).items())  # nobody has read the second yet
    assert fourth.path not in (first.path, second.path)
    # Both readers skip the third and load the fourth: the second and third are free,
    # the fourth (newest) is kept for a checkpoint however far the readers are.
    for reader in (0, 1):
        mark_loaded(fourth, reader)
    fifth = writer.publish(tensors(5).items())
    assert fifth.path in (second.path, third.path)
    assert torch.equal(copied_weights(fourth)["big"], tensors(4)["big"])
    assert torch.equal(copied_weights(fifth)["big"], tensors(5)["big"])
    assert len({h.path for h in (first, second, third, fourth, fifth)}) == 3


def test_close_removes_the_files(tmp_path):
    w = SharedWeightWriter(readers=1, bucket_bytes=1 << 20, directory=str(tmp_path))
    w.publish(tensors(1).items())
    assert len(os.listdir(tmp_path)) == 2  # one file and the control file
    w.close()
    assert os.listdir(tmp_path) == []


def test_a_dead_writers_files_are_swept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    orphan = tmp_path / f"{PREFIX}{int(dead.stdout)}-1-0"
    orphan.write_bytes(b"x" * 10)
    alive = tmp_path / f"{PREFIX}{os.getpid()}-1-0"
    alive.write_bytes(b"x")
    remove_orphans(str(tmp_path))
    assert not orphan.exists() and alive.exists()


def test_room_is_checked(tmp_path):
    assert shared_memory_room(1 << 20, str(tmp_path)) is None
    assert "fewer than 3 x" in shared_memory_room(1 << 60, str(tmp_path))
    assert "does not exist" in shared_memory_room(1, str(tmp_path / "nope"))


def test_hf_infer_loads_from_shared_memory_as_from_the_trainer(tiny_model_path, rl_batch,
                                                               tmp_path):
    from backend_cases import actor_loss

    trainer = hf_trainer(tiny_model_path)
    trainer.optimizer.param_groups[0]["lr"] = 3e-2
    trainer.train_step(rl_batch, actor_loss())
    w = SharedWeightWriter(readers=1, bucket_bytes=64 << 10, directory=str(tmp_path))
    try:
        handle = w.publish(trainer.weights_for_sync())
        engine = HFInferStrategy(tiny_model_path, WorkerConfig(), seed=0)
        engine.update_weights_from_buckets(received_buckets(handle), version=1)
        mark_loaded(handle, 0)
        want = trainer.state_dict_for_sync()
        for name, tensor in engine.model.state_dict().items():
            assert torch.equal(tensor, want[name]), name
    finally:
        w.close()
