"""Weight sync over a collective group (workers/weight_broadcast.py), on CPU with gloo:
buckets are cut and packed bit-exactly, a sync reaches every receiver, a receiver that
never comes is named within the timeout, and between Ray actors (hf_train rank 0 to one
and two hf_infer workers) the engine ends up with actor_train's exact weights. NCCL, the
path GPUs take, runs the same code with another backend and is untested here.
"""

from __future__ import annotations

import socket
import sys
import threading

import pytest
import torch
from ray import cloudpickle

from flywheel.config.schema import StrategyArgs, WorkerConfig
from flywheel.pipelines.roles.handles import InferRole, TrainRole
from flywheel.platform.resources import RoleDevices
from flywheel.workers.infer_worker import InferWorker
from flywheel.workers.train_worker import TrainWorker
from flywheel.workers.weight_broadcast import (
    ALIGN,
    BroadcastWeights,
    GroupAddress,
    SendInFlight,
    WeightGroup,
    bucket_size_needed,
    pack,
    plan_buckets,
    receive,
    send,
    unpack,
)


def tensors(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(100, 50, generator=gen),  # 20000 bytes
            "b": torch.randn(30, generator=gen).to(torch.bfloat16),  # 60 -> 64 aligned
            "big": torch.randn(9000, generator=gen),  # 36000 bytes: a bucket alone
            "steps": torch.tensor(seed, dtype=torch.int64),
            "mask": torch.rand(7, generator=gen) > 0.5,
            "d": torch.randn(40, 100, generator=gen).t()}  # not contiguous


def assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want)
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype and got[name].shape == tensor.shape, name
        assert torch.equal(got[name], tensor), name


def test_buckets_are_bounded_and_unpack_bit_exactly():
    sent = tensors(1)
    cut = list(plan_buckets(sent.items(), max_bytes=24000))
    assert [[n for n, _ in b] for b in cut] == [["a", "b"], ["big"], ["steps", "mask", "d"]]
    back = {}
    for bucket in cut:
        buffer = torch.zeros(bucket_size_needed(bucket), dtype=torch.uint8)
        layout = pack(bucket, buffer)
        assert all(offset % ALIGN == 0 for offset in layout.offsets)
        assert layout.nbytes <= max(24000, 36000)
        back |= {k: v.clone() for k, v in unpack(buffer, layout).items()}
    assert_same(back, sent)
    with pytest.raises(ValueError, match="positive"):
        list(plan_buckets(sent.items(), 0))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def run_group(receivers: int, work, timeout_s: float = 30.0) -> list:
    """`work(group)` on a sender and `receivers` receivers, each a thread of this process
    holding its own end of one gloo group; their results, sender first."""
    address = GroupAddress("127.0.0.1", free_port(), 1 + receivers, "gloo", timeout_s)
    results: list = [None] * (1 + receivers)

    def member(rank: int) -> None:
        try:
            results[rank] = work(WeightGroup(address, rank, f"member {rank}"))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            results[rank] = e

    threads = [threading.Thread(target=member, args=(r,)) for r in range(1 + receivers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_every_receiver_gets_every_sync_bit_exactly():
    syncs = [tensors(1), tensors(2)]

    def work(group: WeightGroup):
        if group.rank == 0:
            return [send(group, i, s.items(), bucket_bytes=24000) for i, s in enumerate(syncs)]
        got = []
        for i in range(len(syncs)):
            copied = {}
            for bucket in receive(group, BroadcastWeights(i)):
                copied |= {k: v.clone() for k, v in bucket.items()}
            got.append(copied)
        return got

    sender, *receivers = run_group(2, work)
    assert sender == [3, 3]  # buckets per sync
    for got in receivers:
        assert not isinstance(got, BaseException), got
        for copied, want in zip(got, syncs):
            assert_same(copied, want)


def test_a_receiver_that_never_starts_is_named():
    def work(group: WeightGroup):
        if group.rank == 0:
            return send(group, 0, tensors(1).items(), bucket_bytes=24000)
        return None  # joined the group, never receives

    sender, _ = run_group(1, work, timeout_s=2)
    assert isinstance(sender, TimeoutError)
    assert "member 0: waited 2 s for actor_infer worker 0 to start receiving sync 0" in str(
        sender)


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the Peek workers, into Ray


class PeekTrainWorker(TrainWorker):
    def perturb(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.strategy.model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.01)

    def state(self) -> dict[str, torch.Tensor]:
        return self.strategy.state_dict_for_sync()


class PeekInferWorker(InferWorker):
    def state(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.strategy.model.state_dict().items()}


def test_hf_train_to_two_hf_infer_workers_over_gloo(ray_session, tiny_model_path):
    infer_workers = 2
    train = TrainRole.create(
        "actor_train", PeekTrainWorker, RoleDevices("actor_train", (0,)), None,
        init_kwargs=dict(model_path=tiny_model_path, cfg=WorkerConfig(), seed=0,
                         total_steps=1, trainable=True, num_threads=1))
    infer = InferRole.create(
        "actor_infer", PeekInferWorker, RoleDevices("actor_infer", tuple(range(infer_workers))),
        None, init_kwargs=dict(model_path=tiny_model_path, seed=0,
                               cfg=WorkerConfig(strategy_args=StrategyArgs("hf_infer")),
                               num_threads=1))
    try:
        line = train.share_weights_with(infer, None, collective="gloo", timeout_s=60)
        assert line.startswith("collective (gloo")
        for version in (1, 2):  # the second sync reuses the buffers and the keys' room
            train.call_all("perturb", version)
            weights = train.weights().result()
            assert weights == BroadcastWeights(version - 1)
            infer.gather(infer.update_weights(weights, version))
            want = train.call_all("state")[0]
            for got in infer.call_all("state"):
                for name, tensor in got.items():
                    assert torch.equal(tensor, want[name]), name
    finally:
        infer.shutdown()
        train.shutdown()


def test_a_failed_send_is_raised_by_the_next_call_that_joins_it():
    sending = SendInFlight("actor_train rank 0")
    sending.start(lambda: 1 / 0)
    with pytest.raises(RuntimeError, match="actor_train rank 0: the previous weight sync "
                                           "failed: division by zero"):
        sending.join()
    sending.join()  # reported once
