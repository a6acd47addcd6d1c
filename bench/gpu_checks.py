"""What the CPU suite cannot run, checked on one CUDA GPU: the phase switch of a colocated
run frees the memory it claims to, and gives it back without changing training (hf_train,
deepspeed_train, megatron_train); and the NCCL path of the weight broadcast.

Run where a GPU is: `python bench/gpu_checks.py --tokenizer-from <a model dir>` (any dir
with the built-in model's tokenizer files: the check builds a random-init Qwen2 of
`--hidden`/`--layers` around them, ~0.7B parameters by default, in bf16).

For hf_train and deepspeed_train (ZeRO 1, 2, 3, with the optimizer a GPU run gets by
default: DeepSpeed's FusedAdam, built on first use) it prints CUDA memory after a train step,
after `offload("optimizer")`, after the weight sync's read and `offload("model")`, and after
`onload()`; then it checks that the next train step gives the same loss, gradient norm and
weights as a run that never offloaded (deterministic kernels, so "same" is bit for bit).
hf_infer: memory around `sleep()` and `wake()`, and the same greedy tokens after. NCCL:
two processes broadcast the model's weights through `workers/weight_broadcast.py`; on a
machine with one GPU NCCL may refuse two ranks on one device, and the check says so.

megatron_train (`--skip` keys megatron, megatron_dist): the same phase-switch check at
DP 1, once through megatron-core's DDP with torch's AdamW and once with its
DistributedOptimizer and the overlapped reduce (its parameters are then views into DDP's
parameter buffer, which `offload("model")` moves by megatron's own buffer calls:
megatron_ddp.offload_megatron). Only what one GPU can show: several data-parallel ranks,
sequence parallelism and NCCL's reduce-scatter need several GPUs and are checked on the
CPU's gloo only (tests/workers/test_megatron_train.py). The lent machine has no
megatron-core: carry its wheel (`pip download megatron-core==0.16.1 --no-deps -d wheels`
here, `pip install --no-deps wheels/megatron_core-*.whl` there; it imports without
Transformer Engine or apex, as here).

The vllm and sglang engines are not checked here: the GPU machine this was written for has
neither, and their CUDA wheels are too large to carry to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import multiprocessing as mp
import os
import shutil
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402

from flywheel.algorithms import PolicyLossParams  # noqa: E402
from flywheel.config.schema import ModelArgs, StrategyArgs, TrainingArgs, WorkerConfig
from flywheel.workers.actor_loss import ActorLoss  # noqa: E402
from flywheel.workers.batch import pack_sequences  # noqa: E402
from flywheel.workers.strategies.base import SamplingParams  # noqa: E402
from flywheel.workers.strategies.offload import MODEL, OPTIMIZER  # noqa: E402

GIB = 2**30


def memory() -> str:
    if not torch.cuda.is_available():
        return "cpu"
    torch.cuda.synchronize()
    return (f"allocated {torch.cuda.memory_allocated() / GIB:6.2f} GiB, "
            f"reserved {torch.cuda.memory_reserved() / GIB:6.2f} GiB")


def build_model(tokenizer_dir: Path, out: Path, hidden: int, layers: int) -> Path:
    """A random-init Qwen2 with the tokenizer of `tokenizer_dir`, saved in bf16."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tokenizer_dir)
    config.update({"hidden_size": hidden, "intermediate_size": hidden * 11 // 4,
                   "num_hidden_layers": layers, "num_attention_heads": hidden // 128,
                   "num_key_value_heads": max(1, hidden // 512), "head_dim": 128,
                   "layer_types": ["full_attention"] * layers})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (tokenizer_dir / name).exists():
            shutil.copy(tokenizer_dir / name, out / name)
    count = sum(p.numel() for p in model.parameters())
    print(f"model: {count / 1e9:.2f}B parameters, hidden {hidden}, {layers} layers, bf16")
    return out


def still_on_device(device_type: str, top: int = 6) -> list[str]:
    """The largest tensors left on the device, each with what holds it (an attribute, a
    list or dict entry, or the gradient slot of a tensor): what an offload missed, or
    what another engine in the process still holds."""
    found, seen, grads = [], set(), {}
    for obj in gc.get_objects():
        if not torch.is_tensor(obj):
            continue
        if obj.grad is not None:
            grads[obj.grad.untyped_storage().data_ptr()] = (
                f"grad of a {tuple(obj.shape)} tensor now on {obj.device.type}")
        ptr = obj.untyped_storage().data_ptr()
        if obj.device.type == device_type and ptr not in seen:
            seen.add(ptr)
            found.append((obj.untyped_storage().nbytes(), ptr, obj))
    found.sort(key=lambda f: -f[0])
    return [f"{n / GIB:.2f} GiB {tuple(t.shape)} {t.dtype} {grads.get(ptr) or holders(t)}"
            for n, ptr, t in found[:top]]


def holders(tensor: torch.Tensor) -> str:
    """Who refers to `tensor`: `Class.attr`, `Class.attr[i]` or `Class.attr[key]`."""
    names = []
    for ref in gc.get_referrers(tensor):
        if isinstance(ref, dict):
            keys = [k for k, v in ref.items() if v is tensor]
            for owner in gc.get_referrers(ref):
                if getattr(owner, "__dict__", None) is ref:
                    names.append(f"{type(owner).__name__}.{keys[0] if keys else '?'}")
                elif isinstance(owner, dict):
                    outer = [k for k, v in owner.items() if v is ref]
                    first = outer[0] if outer else "?"
                    key = (f"a {tuple(first.shape)} tensor" if torch.is_tensor(first)
                           else str(first)[:40])
                    names.append(f"{type(owner).__name__}[{key}][{str(keys[:1])[:40]}]")
            if not names:
                names.append(f"a dict, key {str(keys[:1])[:60]}")
        elif isinstance(ref, list):
            index = next((i for i, v in enumerate(ref) if v is tensor), "?")
            for owner in gc.get_referrers(ref):
                attrs = [k for k, v in getattr(owner, "__dict__", {}).items() if v is ref]
                if attrs:
                    names.append(f"{type(owner).__name__}.{attrs[0]}[{index}]")
            if not names:
                names.append(f"a list [{index}]")
    return "; ".join(names[:3]) or "no Python referrer"


def rl_batch(vocab: int, rows: int = 16, prompt: int = 24, response: int = 40):
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab, (prompt,), generator=gen).tolist() for _ in range(rows)]
    responses = [torch.randint(3, vocab, (response - i % 7,), generator=gen).tolist()
                 for i in range(rows)]
    logps = [[-1.0] * len(r) for r in responses]
    batch = pack_sequences(prompts, responses, pad_id=0, infer_log_probs=logps)
    batch.advantages = torch.randn(rows, 1, generator=gen) * batch.response_mask
    return batch


def worker_config(strategy: str, strategy_config: dict) -> WorkerConfig:
    return WorkerConfig(
        model_args=ModelArgs(dtype="bf16"),
        training_args=TrainingArgs(learning_rate=1e-5, per_device_train_batch_size=8,
                                   gradient_accumulation_steps=2, max_grad_norm=1.0),
        strategy_args=StrategyArgs(strategy_name=strategy, strategy_config=strategy_config),
        infer_batch_size=8)


def make_trainer(strategy: str, strategy_config: dict, model: Path):
    cfg = worker_config(strategy, strategy_config)
    if strategy == "hf_train":
        from flywheel.workers.strategies.hf_train import HFTrainStrategy
        return HFTrainStrategy(str(model), cfg, seed=0, total_steps=10)
    if strategy == "megatron_train":
        from flywheel.workers.strategies.megatron_train import MegatronTrainStrategy
        return MegatronTrainStrategy(str(model), cfg, seed=0, total_steps=10)
    from flywheel.workers.strategies.deepspeed_train import DeepSpeedTrainStrategy
    return DeepSpeedTrainStrategy(str(model), cfg, seed=0, total_steps=10)


def release(trainer) -> None:
    engine = getattr(trainer, "engine", None)
    if engine is not None and hasattr(engine, "destroy"):
        engine.destroy()
    if type(trainer).__name__ == "MegatronTrainStrategy":  # the next one initialises anew
        from megatron.core import parallel_state
        parallel_state.destroy_model_parallel()
    del trainer
    gc.collect()
    torch.cuda.empty_cache()


def weights(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in trainer.state_dict_for_sync().items()}


def check_trainer(strategy: str, strategy_config: dict, model: Path, batch,
                  diagnose: bool = False) -> bool:
    """Offload and onload between two train steps change nothing; memory per phase."""
    name = (f"{strategy} zero {strategy_config['zero_stage']}" if "zero_stage" in
            strategy_config else f"{strategy} dist-opt" if strategy_config.get(
                "use_distributed_optimizer") else strategy)
    loss = ActorLoss("ppo", PolicyLossParams(), "token-mean")

    def two_steps(phase_switch: bool):
        trainer = make_trainer(strategy, strategy_config, model)
        batch.old_log_probs = trainer.forward_logprobs(batch)
        trainer.train_step(batch, loss)
        if phase_switch:
            print(f"  {name:<19} after train step     {memory()}")
            note = trainer.offload(OPTIMIZER)
            print(f"  {name:<19} offload optimizer    {memory()}   ({note})")
            synced = sum(float(t.float().sum()) for t in trainer.state_dict_for_sync().values())
            note = trainer.offload(MODEL)
            print(f"  {name:<19} offload model        {memory()}   ({note}; sync read "
                  f"{synced:.3e})")
            if diagnose:
                for line in still_on_device(trainer.device.type):
                    print(f"  {name:<19}   left: {line}")
            note = trainer.onload()
            print(f"  {name:<19} onload               {memory()}   ({note})")
        metrics = trainer.train_step(batch, loss)
        result = (metrics["pg/loss"], metrics["actor/grad_norm"], weights(trainer))
        release(trainer)
        return result

    print(f"  {name:<19} before               {memory()}")
    try:  # the measured run first: a ZeRO-3 engine outlives engine.destroy() in-process
        got_loss, got_norm, got_weights = two_steps(True)
        ref_loss, ref_norm, ref_weights = two_steps(False)
    except Exception:
        print(f"  {name}: FAILED\n{traceback.format_exc()}")
        return False
    diff = max(float((got_weights[k].float() - ref_weights[k].float()).abs().max())
               for k in ref_weights)
    same = got_loss == ref_loss and got_norm == ref_norm and diff == 0.0
    print(f"  {name:<19} next step: loss {got_loss:.6f} vs {ref_loss:.6f}, grad norm "
          f"{got_norm:.6f} vs {ref_norm:.6f}, max weight diff {diff:.2e} -> "
          f"{'same' if same else 'DIFFERENT'}")
    return same


def check_infer(model: Path) -> bool:
    from flywheel.workers.strategies.hf_infer import HFInferStrategy

    infer = HFInferStrategy(str(model), worker_config("hf_infer", {}), seed=0)
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    sampling = SamplingParams(max_new_tokens=8, do_sample=False)
    before = [g.token_ids for g in infer.generate(prompts, sampling)]
    print(f"  hf_infer  awake      {memory()}")
    note = infer.sleep()
    print(f"  hf_infer  sleep      {memory()}   ({note})")
    note = infer.wake()
    print(f"  hf_infer  wake       {memory()}   ({note})")
    after = [g.token_ids for g in infer.generate(prompts, sampling)]
    print(f"  hf_infer  greedy tokens after wake {'same' if after == before else 'DIFFERENT'}")
    del infer
    gc.collect()
    torch.cuda.empty_cache()
    return after == before


def _broadcast_rank(rank: int, port: int, model: str, queue) -> None:
    from safetensors.torch import load_file

    from flywheel.workers.weight_broadcast import (
        BroadcastWeights,
        GroupAddress,
        WeightGroup,
        receive,
        send,
    )
    cuda = torch.cuda.is_available()  # without one, the same code over gloo (a dry run)
    try:
        if cuda:
            torch.cuda.set_device(0)
        group = WeightGroup(GroupAddress("127.0.0.1", port, 2, "nccl" if cuda else "gloo",
                                         30.0), rank,
                            "actor_train rank 0" if rank == 0 else "actor_infer worker 0")
        tensors = {k: v.to(group.device) for k, v in
                   load_file(f"{model}/model.safetensors").items()}
        sync = torch.cuda.synchronize if cuda else (lambda: None)
        sync()
        start = time.perf_counter()
        if rank == 0:
            buckets = send(group, 0, tensors.items(), bucket_bytes=256 << 20)
            sync()
            queue.put((rank, f"sent {buckets} buckets in {time.perf_counter() - start:.3f} s"))
            return
        equal = 0
        for bucket in receive(group, BroadcastWeights(sync=0)):
            equal += sum(torch.equal(t, tensors[k]) for k, t in bucket.items())
        sync()
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        seconds = time.perf_counter() - start
        queue.put((rank, f"received {equal}/{len(tensors)} tensors bit-exact, "
                         f"{nbytes / GIB:.2f} GiB in {seconds:.3f} s "
                         f"({nbytes / GIB / seconds:.1f} GiB/s)"))
    except Exception as e:  # reported by the parent: one line per rank
        queue.put((rank, f"FAILED: {type(e).__name__}: {str(e).splitlines()[0][:300]}"))


def check_nccl_broadcast(model: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_broadcast_rank, args=(r, port, str(model), queue))
             for r in (0, 1)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 90
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            print(f"  nccl broadcast: rank {procs.index(p)} still running after 90 s, killed")
    while not queue.empty():
        rank, line = queue.get()
        print(f"  nccl broadcast rank {rank}: {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer-from", type=Path, required=True)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--diagnose", action="store_true",
                        help="list the largest tensors an offload left on the device")
    parser.add_argument("--skip", default="", help="comma list: hf_train,zero1,zero2,"
                        "zero3,megatron,megatron_dist,hf_infer,nccl")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(f"torch {torch.__version__}, cuda {torch.version.cuda}, "
          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}")
    torch.use_deterministic_algorithms(True, warn_only=True)
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531"}.items():
        os.environ.setdefault(key, value)
    work = Path(tempfile.mkdtemp(prefix="gpu-checks-"))
    model = build_model(args.tokenizer_from, work / "model", args.hidden, args.layers)
    batch = rl_batch(vocab=int(__import__("json").loads(
        (model / "config.json").read_text())["vocab_size"]))
    results = {}
    cases = [("hf_train", "hf_train", {})] + [
        (f"zero{s}", "deepspeed_train", {"zero_stage": s}) for s in (1, 2, 3)] + [
        ("megatron", "megatron_train", {}),
        ("megatron_dist", "megatron_train", {"use_distributed_optimizer": True,
                                             "overlap_grad_reduce": True})]
    print("phase switch (memory of this process's GPU):")
    for key, strategy, config in cases:
        if key not in skip:
            started = time.perf_counter()
            results[key] = check_trainer(strategy, config, model, dataclasses.replace(batch),
                                         args.diagnose)
            print(f"  ({time.perf_counter() - started:.0f} s)")
    if "hf_infer" not in skip:
        results["hf_infer"] = check_infer(model)
    if "nccl" not in skip:
        print("weight broadcast over NCCL (two processes, one GPU):")
        check_nccl_broadcast(model)
    print("summary:", ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in results.items()))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
