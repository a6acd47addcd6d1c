"""megatron_train against hf_train: log-probs, loss curve, weights; TP, PP and DP ranks.

megatron-core's home is the GPU: on a CPU-only machine a few of its calls hard-code CUDA
(RoPE, p2p and DDP buffers via torch.cuda.current_device, the TP RNG tracker, a "cuda"
zeros in the schedules, the MoE dispatcher's side stream and host copies, `.cuda()` on the
tied embedding copy of the last pipeline stage, CUDA's autocast replayed in its linear
layers' backward, the optimizers' "cuda" flags and the distributed optimizer's CUDA type
names), and one gloo lacks (the all-to-all dispatcher's all-gather of uneven token counts
at expert_tensor_parallel_size > 1). The
`CPUMegatronWorker` below patches exactly those, inside the test's own worker processes;
the product path (`flywheel/workers/strategies/megatron_train.py`) is not patched.
"""

from __future__ import annotations

import collections
import sys
import types

import pytest
import torch
from ray import cloudpickle

from flywheel.algorithms.sampled_distribution import OUTSIDE_LOGIT
from flywheel.workers.strategies.model_head import POLICY, ModelHead, policy_head
from flywheel.workers.train_worker import TrainWorker

pytest.importorskip("megatron.core")
pytestmark = pytest.mark.slow

from backend_cases import (  # noqa: E402
    PARITY_ATOL,
    actor_loss,
    check_dr_grpo_step,
    cluster_weights,
    hf_trainer,
    make_rl_batch,
    max_diff_on,
    rank_mean,
    save_tiny_qwen3_moe,
    untimed,
    weight_diff,
)

STEPS = 5


def patch_megatron_for_cpu() -> None:
    """Route megatron-core's CUDA-only calls to the CPU (no-ops where CUDA has state)."""
    if torch.cuda.is_available():
        return
    import megatron.core.pipeline_parallel.schedules as schedules
    import megatron.core.tensor_parallel.random as tp_random

    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()
    torch.cuda.manual_seed = lambda *a, **k: None
    torch.cuda.synchronize = lambda *a, **k: None
    torch.Tensor.cuda = lambda self, *a, **k: self
    tp_random._set_cuda_rng_state = lambda *a, **k: None
    tp_random._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()

    class CPUTorch(types.ModuleType):  # the schedules' torch, with zeros(device="cuda") on CPU
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def zeros(*args, device=None, **kwargs):
            return torch.zeros(*args, **kwargs)

    schedules.torch = CPUTorch("torch")
    cpu_streams()
    cpu_autocast_in_linear_backward()
    cpu_megatron_optimizer()


def cpu_streams() -> None:
    """The MoE all-to-all dispatcher moves its split sizes to the host on a CUDA side
    stream: on CPU one stream that is always the current one, waits that return at once."""
    import contextlib

    class Stream:  # a class: megatron's annotations write `torch.cuda.Stream | None`
        def __init__(self, *args, **kwargs) -> None:
            pass

        def __eq__(self, other) -> bool:  # every stream is the current one
            return isinstance(other, Stream)

        __hash__ = object.__hash__

        def wait_stream(self, other) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def record_event(self):  # an event that has happened: it synchronises at once
            return self

    torch.cuda.Stream = Stream
    torch.cuda.current_stream = lambda *a, **k: Stream()
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()
    # its split sizes become numpy on the host (all_to_all_single takes no tensor there);
    # maybe_move_tensor_to_cpu converts only what it moves off a GPU
    import megatron.core.transformer.moe.token_dispatcher as dispatcher

    def to_host(tensor, as_numpy=False, record_stream=False):
        return tensor.numpy() if as_numpy and torch.is_tensor(tensor) else tensor

    dispatcher.maybe_move_tensor_to_cpu = to_host
    cpu_uneven_all_gather()


def cpu_uneven_all_gather() -> None:
    """At expert_tensor_parallel_size > 1 the all-to-all dispatcher all-gathers each
    expert-TP rank's routed tokens, counts that differ (torch.distributed.all_gather into
    tensors of different sizes: NCCL takes it, gloo's allgather wants equal sizes): on
    gloo, each padded to the largest, gathered, and cut back."""
    import torch.distributed as dist

    if getattr(dist.all_gather, "_uneven", False):
        return
    plain = dist.all_gather

    def all_gather(tensor_list, tensor, group=None, async_op=False):
        if async_op or all(t.shape == tensor.shape for t in tensor_list):
            return plain(tensor_list, tensor, group=group, async_op=async_op)
        rows = max(len(t) for t in tensor_list)
        mine = tensor.new_zeros((rows, *tensor.shape[1:]))
        mine[:len(tensor)] = tensor
        padded = [torch.empty_like(mine) for _ in tensor_list]
        plain(padded, mine, group=group)
        for out, got in zip(tensor_list, padded):
            out.copy_(got[:len(out)])

    all_gather._uneven = True
    dist.all_gather = all_gather


def cpu_megatron_optimizer() -> None:
    """megatron's optimizers make their flags with torch.tensor(device="cuda"), and the
    distributed optimizer sorts parameters by `Tensor.type()` names that are CUDA's
    ("torch.cuda.FloatTensor"): flags on the CPU, and the CPU's type names read as CUDA's
    while it sorts (DDP's buffers allocate on torch.cuda.current_device(), patched above)."""
    import megatron.core.optimizer.distrib_optimizer as distrib
    import megatron.core.optimizer.optimizer as optimizer

    class CPUFlags(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def tensor(*args, device=None, **kwargs):
            return torch.tensor(*args, **kwargs)

    optimizer.torch = CPUFlags("torch")
    build = distrib.DistributedOptimizer._build_model_and_main_param_groups.__func__
    if getattr(build, "_cpu_types", False):
        return

    def build_with_cuda_names(cls, *args, **kwargs):
        plain = torch.Tensor.type

        def cuda_name(self, *a, **k):
            name = plain(self, *a, **k)
            return name.replace("torch.", "torch.cuda.", 1) if not a and not k else name

        torch.Tensor.type = cuda_name
        try:
            return build(cls, *args, **kwargs)
        finally:
            torch.Tensor.type = plain

    build_with_cuda_names._cpu_types = True
    distrib.DistributedOptimizer._build_model_and_main_param_groups = classmethod(
        build_with_cuda_names)


def cpu_autocast_in_linear_backward() -> None:
    """megatron's linear layers replay the forward's autocast in their backward for CUDA
    only (torch.amp.custom_fwd / custom_bwd with device_type "cuda"), so on CPU a bf16 or
    fp16 backward meets the fp32 weight; re-decorate them for the CPU's autocast."""
    import megatron.core.tensor_parallel.layers as layers

    for fn in (layers.LinearWithFrozenWeight,
               layers.LinearWithGradAccumulationAndAsyncCommunication):
        if "_cpu_autocast" not in vars(fn):
            fn.forward = staticmethod(torch.amp.custom_fwd(fn.forward.__wrapped__,
                                                           device_type="cpu"))
            fn.backward = staticmethod(torch.amp.custom_bwd(fn.backward.__wrapped__,
                                                            device_type="cpu"))
            fn._cpu_autocast = True


class CPUMegatronWorker(TrainWorker):
    def __init__(self, *args, **kwargs):
        patch_megatron_for_cpu()
        super().__init__(*args, **kwargs)

    def record_grad_reduces(self) -> int:
        """From now on, note each bucket group's reduce: launched asynchronously or not,
        and from the backward pass (DDP's hook) or from finalize_model_grads. Returns the
        number of bucket groups."""
        self.reduces: list[tuple[bool, bool]] = []
        groups = [g for ddp in self.strategy.ddps for g in ddp.bucket_groups]
        for group in groups:
            start, finish = group.start_grad_sync, group.finish_grad_sync
            group.finishing = False

            def started(*a, group=group, start=start, **k):
                start(*a, **k)
                self.reduces.append((group.grad_reduce_handle is not None, group.finishing))

            def finished(*a, group=group, finish=finish, **k):
                group.finishing = True
                try:
                    finish(*a, **k)
                finally:
                    group.finishing = False

            group.start_grad_sync, group.finish_grad_sync = started, finished
        return len(groups)

    def grad_reduces(self) -> list[tuple[bool, bool]]:
        """(asynchronous, from finalize) per reduce launched since record_grad_reduces."""
        return self.reduces

    def expert_fc1_rows(self) -> int:
        """Rows of this rank's first local expert's linear_fc1 ([gate; up] of its slice)."""
        return next(p.shape[0] for n, p in self.strategy.model.named_parameters()
                    if "local_experts.0.linear_fc1" in n)

    def chunk_layers(self) -> list[list[int]]:
        """The global decoder layers of each model chunk this rank built."""
        return [list(layers) for layers in self.strategy.chunk_layers]

    def optimizer_footprint(self) -> tuple[int, int]:
        """(AdamW moment elements this rank holds, elements of its model shard)."""
        from flywheel.workers.strategies.megatron_ddp import state_numel

        strategy = self.strategy
        return (state_numel(strategy.optimizer),
                sum(p.numel() for p in strategy.model.parameters() if p.requires_grad))


class FP16MegatronWorker(CPUMegatronWorker):
    """Reaches into the strategy's loss scaler and fp32 parameters, for the fp16 test."""

    def set_loss_scale(self, scale: float) -> None:
        self.strategy.precision.scaler.scale = scale

    def master_weights(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.strategy.model.named_parameters()}


# Ray workers cannot import test modules; ship this module's classes by value instead.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def kv2_model_path(tmp_path_factory, tiny_model_path) -> str:
    """The tiny Qwen2 re-initialised with 2 KV heads and an even vocabulary, so tensor
    parallelism of 2 can split both (megatron_train refuses what does not divide)."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM

    out = tmp_path_factory.mktemp("kv2")
    config = AutoConfig.from_pretrained(tiny_model_path)
    config.num_key_value_heads = 2
    config.vocab_size += config.vocab_size % 2
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{tiny_model_path}/{name}", out / name)
    return str(out)


def follows_hf_train(cluster, model_path: str, batch, steps: int = STEPS,
                     head: ModelHead = POLICY) -> dict[str, float]:
    """Train the cluster and hf_train (under the same head) side by side; the largest
    differences seen."""
    world = cluster.world_size
    hf = hf_trainer(model_path, head=head)
    log_probs = torch.cat(cluster.scatter("forward_logprobs", batch.shard(world)))
    want = hf.forward_logprobs(batch)
    # a token the distribution does not keep scores about OUTSIDE_LOGIT (-1e4) on both, where
    # fp32 resolves only ~1e-3: compared as "outside" on both, the rest to PARITY_ATOL
    outside = want < OUTSIDE_LOGIT / 2
    assert (log_probs[outside] < OUTSIDE_LOGIT / 2).all()
    diffs = {"logprobs": max_diff_on(batch.attention_mask * ~outside, log_probs, want)}
    if head is POLICY:  # its reference gradient is computed under the raw distribution
        check_dr_grpo_step(model_path, batch, hf, cluster)
    loss = actor_loss(entropy_coef=0.01)
    diffs["loss"] = diffs["grad_norm"] = 0.0
    for _ in range(steps):
        ref = hf.train_step(batch, loss)
        got = rank_mean(cluster.scatter("train_step", batch.shard(world), loss_fn=loss,
                                           ppo_epochs=1))
        diffs["loss"] = max(diffs["loss"], abs(got["pg/loss"] - ref["pg/loss"]))
        diffs["grad_norm"] = max(diffs["grad_norm"],
                                 abs(got["actor/grad_norm"] - ref["actor/grad_norm"]))
    diffs["weights"] = weight_diff(cluster_weights(cluster), hf.state_dict_for_sync())
    return diffs


def check(diffs: dict[str, float]) -> None:
    print(diffs)
    assert diffs["logprobs"] < PARITY_ATOL
    assert diffs["loss"] < 1e-6 and diffs["grad_norm"] < 1e-4
    assert diffs["weights"] < 1e-4


def resumes_exactly(cluster, batch, path) -> None:
    """save, one step, load, the same step again: the same metrics and weights, bit for
    bit (weights, AdamW moments or their distributed slices, schedule, RNG)."""
    world = cluster.world_size
    saved = cluster_weights(cluster)
    cluster.call_all("save", str(path))
    loss = actor_loss(entropy_coef=0.01)

    def next_step() -> tuple[list[dict], dict]:
        metrics = cluster.scatter("train_step", batch.shard(world), loss_fn=loss,
                                  ppo_epochs=1)
        return [untimed(m) for m in metrics], cluster_weights(cluster)

    first = next_step()
    cluster.call_all("load", str(path))
    assert weight_diff(cluster_weights(cluster), saved) == 0.0
    again = next_step()
    assert again[0] == first[0] and weight_diff(again[1], first[1]) == 0.0
    hf_dir = path / "model"  # the full model in HF format, loadable as is
    from flywheel.workers.strategies.megatron_parallel import load_hf_tensors

    assert weight_diff(load_hf_tensors(str(hf_dir)), saved) == 0.0
    assert (hf_dir / "config.json").exists()


def test_one_rank_matches_hf_train_and_resumes_from_checkpoint(train_cluster, tiny_model_path,
                                                              rl_batch, tmp_path):
    # bias_activation_fusion: megatron's torch.jit SwiGLU, the same numbers
    cluster = train_cluster("megatron_train", tiny_model_path, 1,
                            {"bias_activation_fusion": True}, per_device=8, accum=4,
                            worker_cls=CPUMegatronWorker)
    check(follows_hf_train(cluster, tiny_model_path, rl_batch))
    resumes_exactly(cluster, rl_batch, tmp_path / "ckpt")


def holds_its_share_of_adamw(cluster, dp: int) -> None:
    """Each rank holds 1/dp of its model shard's AdamW moments (two per element; within
    1 %: megatron cuts its padded buckets, not the parameters, into dp equal slices), and
    the data-parallel ranks together hold each element's moments once."""
    footprints = cluster.call_all("optimizer_footprint")
    print("AdamW moment elements per rank, local parameters:", footprints)
    for state, params in footprints:
        assert abs(state - 2 * params / dp) <= 0.01 * 2 * params / dp, (state, params, dp)
    assert sum(state for state, _ in footprints) == sum(2 * p for _, p in footprints) / dp


@pytest.mark.long  # ~15 s idle, ~1 min under load: two ranks, 6 steps and a resume
def test_distributed_optimizer_at_two_data_parallel_ranks(train_cluster, tiny_model_path,
                                                          rl_batch, tmp_path):
    """megatron-core's DDP (its gradients reduce-scattered, bucket by bucket, overlapped
    with the backward) and DistributedOptimizer at DP 2: hf_train's loss, grad norm and
    weights on one rank, half the AdamW state per rank, and an exact resume."""
    cluster = train_cluster("megatron_train", tiny_model_path, 2,
                            {"use_distributed_optimizer": True, "overlap_grad_reduce": True,
                             "ddp_bucket_size": 100_000}, per_device=8, accum=2,
                            worker_cls=CPUMegatronWorker)
    groups = cluster.call_all("record_grad_reduces")
    check(follows_hf_train(cluster, tiny_model_path, rl_batch))
    overlapped_from_the_backward(cluster, groups)
    holds_its_share_of_adamw(cluster, dp=2)  # AdamW's state exists after its first step
    resumes_exactly(cluster, rl_batch, tmp_path / "ckpt")


@pytest.mark.long  # ~15 s idle: two ranks, 6 steps
def test_overlapped_all_reduce_at_two_data_parallel_ranks(train_cluster, tiny_model_path,
                                                          rl_batch):
    """Without the distributed optimizer: DDP's buckets all-reduced from the backward, torch's
    AdamW over the whole parameters on each rank."""
    cluster = train_cluster("megatron_train", tiny_model_path, 2,
                            {"overlap_grad_reduce": True, "ddp_bucket_size": 100_000},
                            per_device=8, accum=2, worker_cls=CPUMegatronWorker)
    groups = cluster.call_all("record_grad_reduces")
    check(follows_hf_train(cluster, tiny_model_path, rl_batch))
    holds_its_share_of_adamw(cluster, dp=1)
    overlapped_from_the_backward(cluster, groups)


def overlapped_from_the_backward(cluster, groups: list[int]) -> None:
    """Several buckets, each reduce launched asynchronously, and after the first mini-batch
    (where megatron learns how many gradients each parameter gets) from the backward
    pass, not from finalize_model_grads."""
    reduces = cluster.call_all("grad_reduces")
    print("bucket groups per rank:", groups, "reduces (async, from finalize):",
          [collections.Counter(r) for r in reduces])
    assert all(g > 1 for g in groups)
    for per_rank in reduces:
        assert all(asynchronous for asynchronous, _ in per_rank)
        assert sum(not from_finalize for _, from_finalize in per_rank) > len(per_rank) / 2


@pytest.mark.long  # ~20 s idle: two ranks, 6 steps
def test_sequence_parallel_at_two_tensor_parallel_ranks(train_cluster, kv2_model_path):
    batch = make_rl_batch(kv2_model_path)
    cluster = train_cluster("megatron_train", kv2_model_path, 2,
                            {"tensor_model_parallel_size": 2, "sequence_parallel": True},
                            per_device=8, accum=4, worker_cls=CPUMegatronWorker)
    check(follows_hf_train(cluster, kv2_model_path, batch))


def test_pipeline_parallel_two_stages(train_cluster, tiny_model_path, rl_batch):
    # 2 stages of one replica: each stage sees the union of both shards (32 rows)
    cluster = train_cluster("megatron_train", tiny_model_path, 2,
                            {"pipeline_model_parallel_size": 2}, per_device=8, accum=4,
                            worker_cls=CPUMegatronWorker)
    check(follows_hf_train(cluster, tiny_model_path, rl_batch))


@pytest.fixture(scope="module")
def six_layer_model_path(tmp_path_factory, tiny_model_path) -> str:
    """The tiny Qwen2 with 6 layers: 6 + the embedding + the loss split into 2 stages x 2
    chunks of 2, so the split keys leave the first and last chunk one layer each."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM

    out = tmp_path_factory.mktemp("six")
    config = AutoConfig.from_pretrained(tiny_model_path)
    config.num_hidden_layers = 6
    config.layer_types = ["full_attention"] * 6
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{tiny_model_path}/{name}", out / name)
    return str(out)


@pytest.mark.long  # 49 s under load (+19 s setup): two ranks, 4 steps and a resume
def test_interleaved_pipeline_two_stages_two_chunks(train_cluster, tiny_model_path, rl_batch,
                                                    tmp_path):
    """megatron-core's interleaved schedule at PP 2 x VPP 2: each rank holds two model
    chunks of one layer (rank 0 layers 0 and 2, rank 1 layers 1 and 3), the 4 micro-batches
    run in groups of PP, and the update is hf_train's on one rank; a resume is exact."""
    cluster = train_cluster("megatron_train", tiny_model_path, 2,
                            {"pipeline_model_parallel_size": 2,
                             "virtual_pipeline_model_parallel_size": 2},
                            per_device=8, accum=4, worker_cls=CPUMegatronWorker)
    assert cluster.call_all("chunk_layers") == [[[0], [2]], [[1], [3]]]
    check(follows_hf_train(cluster, tiny_model_path, rl_batch, steps=3))
    resumes_exactly(cluster, rl_batch, tmp_path / "ckpt")


@pytest.mark.long  # ~1 min under load: two ranks, 4 steps
def test_pipeline_split_counts_embedding_and_loss(train_cluster, six_layer_model_path):
    """account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split as
    Megatron documents them: 6 layers + 2 split as 8 over PP 2 x VPP 2, the first chunk
    (embedding) and the last (loss) one decoder layer each, the middle ones two."""
    batch = make_rl_batch(six_layer_model_path)
    cluster = train_cluster("megatron_train", six_layer_model_path, 2,
                            {"pipeline_model_parallel_size": 2,
                             "virtual_pipeline_model_parallel_size": 2,
                             "account_for_embedding_in_pipeline_split": True,
                             "account_for_loss_in_pipeline_split": True},
                            per_device=8, accum=4, worker_cls=CPUMegatronWorker)
    assert cluster.call_all("chunk_layers") == [[[0], [3, 4]], [[1, 2], [5]]]
    check(follows_hf_train(cluster, six_layer_model_path, batch, steps=3))


@pytest.fixture(scope="module")
def moe_model_path(tmp_path_factory, tiny_model_path) -> str:
    """A tiny random Qwen3-MoE (q/k norms, 4 experts, top 2 renormalised as Qwen3-30B-A3B
    does), built from transformers' config class with the tiny model's vocabulary."""
    return save_tiny_qwen3_moe(tmp_path_factory.mktemp("tiny_qwen3_moe"), tiny_model_path,
                               hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                               head_dim=16, norm_topk_prob=True, pad_token_id=0)


def moe_follows_hf_train(cluster, hf, batch, loss) -> dict[str, float]:
    """Loss, grad norm and load-balancing loss over STEPS steps; the weights after them."""
    from flywheel.workers.strategies.router_loss import METRIC

    diffs = collections.defaultdict(float)
    for _ in range(STEPS):
        ref = hf.train_step(batch, loss)
        got = rank_mean(cluster.scatter("train_step", batch.shard(cluster.world_size),
                                        loss_fn=loss, ppo_epochs=1))
        print({k: (got[k], ref[k]) for k in ("pg/loss", "actor/grad_norm", METRIC)})
        for key in ("pg/loss", "actor/grad_norm", METRIC):
            diffs[key] = max(diffs[key], abs(got[key] - ref[key]))
    assert ref[METRIC] > 0.1  # the loss is there (balanced routing gives the coefficient)
    return diffs


@pytest.fixture(scope="module")
def qwen2_moe_model_path(tmp_path_factory, tiny_model_path) -> str:
    """A tiny random Qwen2-MoE: qkv bias, 4 experts (top 2, not renormalised) and the
    sigmoid-gated shared expert."""
    from transformers import AutoConfig, Qwen2MoeConfig, Qwen2MoeForCausalLM

    vocab = AutoConfig.from_pretrained(tiny_model_path).vocab_size
    config = Qwen2MoeConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                            moe_intermediate_size=16, shared_expert_intermediate_size=24,
                            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                            num_experts=4, num_experts_per_tok=2, max_position_embeddings=256,
                            pad_token_id=0)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_qwen2_moe")
    Qwen2MoeForCausalLM(config).save_pretrained(path)
    return str(path)


@pytest.mark.long  # two ranks, 5 steps
def test_qwen2_moe_over_two_pipeline_stages(train_cluster, qwen2_moe_model_path, rl_batch):
    """Qwen2-MoE's shared expert and its gate on megatron-core's MoE layer, one MoE layer
    per pipeline stage: the load-balancing loss of both stages (summed over the stages),
    its gradient at the same scale as the main loss's across the pipeline schedule."""
    from flywheel.config.schema import ModelArgs

    args = ModelArgs(moe_aux_loss_coef=0.1)
    hf = hf_trainer(qwen2_moe_model_path, model_args=args)
    cluster = train_cluster("megatron_train", qwen2_moe_model_path, 2,
                            {"pipeline_model_parallel_size": 2}, per_device=8, accum=4,
                            worker_cls=CPUMegatronWorker, model_args=args)
    diffs = moe_follows_hf_train(cluster, hf, rl_batch, actor_loss(entropy_coef=0.01))
    diffs["weights"] = weight_diff(cluster_weights(cluster), hf.state_dict_for_sync())
    print(dict(diffs))
    assert diffs["pg/loss"] < 1e-6 and diffs["actor/grad_norm"] < 1e-5
    assert diffs["actor/moe_aux_loss"] < 1e-6 and diffs["weights"] < 1e-4


@pytest.mark.long  # 21-44 s under load (+18 s setup): two ranks, 6 steps and a resume
def test_moe_at_two_expert_parallel_ranks(train_cluster, moe_model_path, rl_batch, tmp_path):
    """A Qwen3-MoE on megatron-core's MoE layers (TopKRouter, the all-to-all token
    dispatcher, SequentialMLP experts) with its experts split over EP 2 (two per rank):
    hf_train's loss, grad norm and load-balancing loss over 5 steps, its weights after
    them (synced back in HF form), and an exact resume."""
    from flywheel.config.schema import ModelArgs
    from flywheel.workers.strategies.router_loss import METRIC

    args = ModelArgs(moe_aux_loss_coef=0.1)
    hf = hf_trainer(moe_model_path, model_args=args)
    cluster = train_cluster("megatron_train", moe_model_path, 2,
                            {"expert_model_parallel_size": 2,
                             "moe_token_dispatcher_type": "alltoall"},
                            per_device=8, accum=2, worker_cls=CPUMegatronWorker,
                            model_args=args)
    diffs = moe_follows_hf_train(cluster, hf, rl_batch, actor_loss(entropy_coef=0.01))
    synced = cluster_weights(cluster)
    diffs["weights"] = weight_diff(synced, hf.state_dict_for_sync())
    print(dict(diffs))
    # grad norm to 1e-5: the experts' squares left out of the EP sum moved it by 1e-4
    assert diffs["pg/loss"] < 1e-6 and diffs["actor/grad_norm"] < 1e-5
    assert diffs[METRIC] < 1e-6 and diffs["weights"] < 1e-4
    # the weights actor_infer receives: hf_infer takes them under its own names, in place
    from flywheel.config.schema import WorkerConfig
    from flywheel.workers.strategies.hf_infer import HFInferStrategy

    infer = HFInferStrategy(moe_model_path, WorkerConfig(), seed=0)
    infer.update_weights(synced, version=1)
    assert weight_diff(dict(infer.model.state_dict()), synced) == 0.0
    resumes_exactly(cluster, rl_batch, tmp_path / "ckpt")


@pytest.mark.long  # four ranks, 5 steps and a resume
@pytest.mark.parametrize(("expert_tp", "dispatcher"),
                         [(1, "alltoall"), (2, "allgather"), (2, "alltoall")])
def test_moe_under_tensor_and_expert_parallelism(train_cluster, tmp_path, tiny_model_path,
                                                 rl_batch, expert_tp, dispatcher):
    """TP 2 (sequence parallel, as megatron-core requires with MoE) x EP 2 on 4 ranks: the
    attention split over TP, the tokens split along the sequence before the routers, the
    experts whole on their EP rank (expert_tensor_parallel_size 1) or each sliced over the
    2 expert-TP ranks (2); hf_train's loss, grad norm, load-balancing loss and weights on
    one rank, and an exact resume."""
    from flywheel.config.schema import ModelArgs

    path = save_tiny_qwen3_moe(tmp_path / "moe_kv2", tiny_model_path, vocab_size=264,
                               hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                               num_key_value_heads=2, head_dim=16, norm_topk_prob=True,
                               pad_token_id=0)
    args = ModelArgs(moe_aux_loss_coef=0.1)
    hf = hf_trainer(path, model_args=args)
    cluster = train_cluster("megatron_train", path, 4,
                            {"tensor_model_parallel_size": 2, "sequence_parallel": True,
                             "expert_model_parallel_size": 2,
                             "expert_tensor_parallel_size": expert_tp,
                             "moe_token_dispatcher_type": dispatcher},
                            per_device=8, accum=2, worker_cls=CPUMegatronWorker,
                            model_args=args)
    # [gate; up] of the expert's 16 intermediate channels, or of its half of them
    assert cluster.call_all("expert_fc1_rows") == [2 * 16 // expert_tp] * 4
    diffs = moe_follows_hf_train(cluster, hf, rl_batch, actor_loss(entropy_coef=0.01))
    diffs["weights"] = weight_diff(cluster_weights(cluster), hf.state_dict_for_sync())
    print(dict(diffs))
    assert diffs["pg/loss"] < 1e-6 and diffs["actor/grad_norm"] < 1e-5
    assert diffs["actor/moe_aux_loss"] < 1e-6 and diffs["weights"] < 1e-4
    resumes_exactly(cluster, rl_batch, tmp_path / "ckpt")


@pytest.mark.long  # four ranks, 6 steps and a resume
def test_moe_under_the_distributed_optimizer(train_cluster, moe_model_path, rl_batch,
                                             tmp_path):
    """EP 2 over 4 ranks with megatron-core's DistributedOptimizer: the dense buffers cut
    over the 4 data-parallel ranks, the experts' (their own AdamW) over their 2
    expert-data-parallel ranks; hf_train's step, and an exact resume from the slices."""
    from flywheel.config.schema import ModelArgs

    args = ModelArgs(moe_aux_loss_coef=0.1)
    hf = hf_trainer(moe_model_path, model_args=args)
    cluster = train_cluster("megatron_train", moe_model_path, 4,
                            {"expert_model_parallel_size": 2, "use_distributed_optimizer": True,
                             "moe_token_dispatcher_type": "alltoall"},
                            per_device=8, accum=1, worker_cls=CPUMegatronWorker,
                            model_args=args)
    diffs = moe_follows_hf_train(cluster, hf, rl_batch, actor_loss(entropy_coef=0.01))
    diffs["weights"] = weight_diff(cluster_weights(cluster), hf.state_dict_for_sync())
    print(dict(diffs))
    assert diffs["pg/loss"] < 1e-6 and diffs["actor/grad_norm"] < 1e-5
    assert diffs["actor/moe_aux_loss"] < 1e-6 and diffs["weights"] < 1e-4
    resumes_exactly(cluster, rl_batch, tmp_path / "ckpt")


def truncation_margins(model_path: str, batch, temperature: float, top_k: int,
                       top_p: float) -> tuple[float, float]:
    """At the initial weights, over the positions that predict a response token: the
    smallest gap between the k-th and (k+1)-th logits, and the smallest distance of the
    top-p cumulative (after top-k) from its 1 - top_p boundary. A position within float
    noise (~1e-6 between backends) of either boundary can keep a token on one backend and
    drop it on the other, which AdamW turns into an lr-sized weight difference."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    with torch.no_grad():
        z = model(input_ids=batch.input_ids,
                  attention_mask=batch.attention_mask).logits / temperature  # [B, T, V]
    predicts_response = batch.response_mask[:, 1:].bool()  # [B, T - 1]
    top = torch.topk(z, top_k + 1, dim=-1).values  # [B, T, k + 1]
    gap = (top[..., top_k - 1] - top[..., top_k])[:, :-1][predicts_response]
    kept = z.masked_fill(z < top[..., top_k - 1:top_k], float("-inf"))
    cumulative = torch.sort(kept, dim=-1).values.softmax(-1).cumsum(-1)  # [B, T, V]
    distance = (cumulative - (1 - top_p)).abs().min(dim=-1).values  # [B, T]
    return float(gap.min()), float(distance[:, :-1][predicts_response].min())


def test_tensor_and_data_parallel_under_a_truncated_distribution(train_cluster,
                                                                   kv2_model_path):
    """TP splits the vocabulary (and, sequence-parallel, the activations' sequence);
    top-k / top-p keep tokens by the whole of it, so the log-probs (and gradients) of the
    sampled distribution match hf_train's on one rank.
    top-k 48 / top-p 0.8 keep every position of this batch >= 1e-4 from both truncation
    boundaries (at 40 / 0.9 two positions sat 3e-6 and 9e-6 from them, and the weights
    differed by 8e-4 on one CPU): the test checks the kept set, not float ties."""
    batch = make_rl_batch(kv2_model_path)
    assert min(truncation_margins(kv2_model_path, batch, 0.7, 48, 0.8)) > 1e-4
    head = policy_head(temperature=0.7, top_k=48, top_p=0.8, do_sample=True)
    # world 4 = TP 2 x DP 2: each replica trains 16 rows (8 x 2), the global batch is 32;
    # with Megatron's memory savings on (sequence parallel, the distributed optimizer, the
    # overlapped reduce-scatter of small buckets), each of which must leave the numbers be
    cluster = train_cluster("megatron_train", kv2_model_path, 4,
                            {"tensor_model_parallel_size": 2, "sequence_parallel": True,
                             "use_distributed_optimizer": True, "overlap_grad_reduce": True,
                             "ddp_bucket_size": 100_000}, per_device=8, accum=2,
                            worker_cls=CPUMegatronWorker, head=head)
    check(follows_hf_train(cluster, kv2_model_path, batch, head=head))
    holds_its_share_of_adamw(cluster, dp=2)


def test_fp16_skips_overflowing_steps_under_its_loss_scaler(train_cluster, tiny_model_path,
                                                            rl_batch):
    """fp16 autocast with a dynamic loss scaler (mixed_precision.py): a scale far too large
    overflows, the step is skipped and the scale halved, the fp32 masters untouched; at
    a scale that fits the step applies. actor_infer receives fp16 weights."""
    cluster = train_cluster("megatron_train", tiny_model_path, 1, {}, per_device=8, accum=4,
                            worker_cls=FP16MegatronWorker, dtype="fp16")
    loss = actor_loss()
    before = cluster.call_all("master_weights")[0]
    assert all(t.dtype == torch.float32 for t in before.values())
    cluster.call_all("set_loss_scale", 2.0 ** 40)
    metrics = cluster.scatter("train_step", [rl_batch], loss_fn=loss, ppo_epochs=1)[0]
    assert metrics["actor/skipped_steps"] == 1 and metrics["actor/loss_scale"] == 2.0 ** 39
    after = cluster.call_all("master_weights")[0]
    assert all(torch.equal(after[k], v) for k, v in before.items())
    cluster.call_all("set_loss_scale", 2.0 ** 10)
    metrics = cluster.scatter("train_step", [rl_batch], loss_fn=loss, ppo_epochs=1)[0]
    assert metrics["actor/skipped_steps"] == 0 and metrics["actor/loss_scale"] == 2.0 ** 10
    after = cluster.call_all("master_weights")[0]
    assert any(not torch.equal(after[k], v) for k, v in before.items())
    assert all(t.dtype == torch.float16 for t in cluster_weights(cluster).values())
