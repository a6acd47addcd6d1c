"""vllm: generation with vLLM's offline `LLM` engine, in the worker's own process.

Why in-process: with one device per worker (tensor_parallel_size 1) vLLM's engine-core
subprocesses buy nothing here and cost 15 s and 1 GiB per start on CPU, so
`VLLM_ENABLE_V1_MULTIPROCESSING` defaults to 0 (the environment may still override it);
tensor parallelism needs the multiprocess engine and keeps vLLM's default.

Log-probs: `logprobs_mode="processed_logprobs"` makes vLLM return the log-probs of the
distribution it samples from (after temperature, top-k and top-p), the quantity hf_infer
and the trainers compute (algorithms/sampled_distribution.py). A repetition penalty is
applied before them too, in both infer backends; the trainer does not model it, so it
shows up in the mismatch metrics. `log_probs[i]` is that of the sampled `token_ids[i]`; a
stop token is included, as in hf_infer.

Seeds: every prompt gets its own request seed derived from (`sampling.seed`, prompt
index), so two prompts never share a random stream and the same call is reproducible.
Samples are not the same as hf_infer's for the same seed (different RNG use).

Weight updates arrive in buckets (workers/weight_buckets.py) and stream into the live
engine: `reload_weights(weights_iterator=...)` on the in-process worker runs vLLM's
layerwise reload (each layer is loaded through its checkpoint-format weight loaders, then
re-processed for its kernels, CPU repacking included, and copied into the engine's own
tensors once all its weights are in), reading the next bucket only when it needs it: no
file, no full copy. A multiprocess engine (tensor_parallel_size > 1) cannot take tensors
through `collective_rpc`, so it still reloads from one safetensors file under /dev/shm.
With `lora_sync: adapter` (LoRA on actor_train) an update is A and B alone, loaded as a
new adapter per version (vllm_adapters.py), the base weights untouched.
Tied embeddings: `lm_head.weight` is always sent, or vLLM's head would stay stale. The
prefix cache is reset afterwards, because cached KV blocks were computed by the old
weights.

`forward_logprobs` uses vLLM's prompt log-probs (one engine pass, max_tokens=1), so the
reference numbers come from the same kernels that generated.

The engine runs in a thread of its own (vllm_engine_loop.py): concurrent `generate`
calls (the worker's `generate_stream`, one per prompt group) share its batch, each
answered as soon as its own requests finish, and the number in flight is bounded by the
engine's `max_num_seqs` (`capacity`). With `in_flight_updates` (partial rollout) a weight
update loads between two engine steps and running requests continue on the new weights
with their KV cache kept; otherwise an update waits for the running requests to finish.

Sampling: exactly the generating_args (temperature, top-p/k, repetition_penalty), the
same distribution hf_infer samples; stops are eos, `stop_token_ids` and `stop_strings`,
and a response ends at the token completing a stop string (`stops.response_end`), as in
hf_infer. vLLM's own `generation_config.json` defaults are switched off
(`generation_config="vllm"`).

Context: `max_model_len` unset in strategy_config takes the run's `context_length`
(RLVR: prompt_length + response_length; agentic: sequence_length). The model's own limit
(8192 for SmolLM2) would not fit the CPU's 256 MiB KV cache.

strategy_config: any `vllm.EngineArgs` field (gpu_memory_utilization, tensor_parallel_size,
enforce_eager, block_size, max_model_len, kv_cache_memory_bytes, ...); unknown keys are an
error. CPU defaults: enforce_eager, and a 256 MiB KV cache (`kv_cache_memory_bytes`)
unless gpu_memory_utilization is given: on CPU that fraction is of host RAM and is
checked against the process's resident size, which makes it fragile. Also on CPU,
chunked prefill is off (with a token budget of at least the longest sequence): vLLM's CPU
sampler fails on a seeded request whose prompt is prefilled over several steps, which
happens once the prompts arriving together exceed the budget (agentic turns, streamed
groups).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import vllm
from safetensors.torch import save_file
from transformers import AutoConfig
from vllm.inputs import TokensPrompt

from flywheel.config.derived import engine_memory_fraction
from flywheel.config.schema import WorkerConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.image_inputs import PromptImages
from flywheel.workers.strategies.base import Generation, InferStrategy, SamplingParams
from flywheel.workers.strategies.engine_options import VLLM_OWNED
from flywheel.workers.strategies.frozen_modules import under
from flywheel.workers.strategies.hf_model import load_tokenizer
from flywheel.workers.strategies.stops import response_end
from flywheel.workers.strategies.strategy_config import checked_config
from flywheel.workers.strategies.vllm_adapters import (
    AdapterSpec,
    AdapterVersions,
    engine_lora_kwargs,
)
from flywheel.workers.strategies.vllm_engine_loop import EngineLoop, Sample

VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
OWNED_KEYS = VLLM_OWNED
CPU_KV_CACHE_BYTES = 256 << 20
CPU_BATCHED_TOKENS = 4096  # vLLM's own CPU default for max_num_batched_tokens
SHM_DIR = "/dev/shm"
RELOAD_LOGGERS = ("vllm.model_executor.model_loader.reload.layerwise",  # kept_layers_unlogged
                  "vllm.model_executor.model_loader.reload.inplace")


def engine_kwargs(cfg: WorkerConfig, model_path: str, seed: int, on_gpu: bool,
                  context_length: int | None = None, sleep_mode: bool = False,
                  lora: AdapterSpec | None = None) -> dict[str, Any]:
    """LLM(...) arguments: checked strategy_config over flywheel's defaults. `sleep_mode`
    (a colocated run, pipelines/loop/phase_switch.py) turns on vLLM's `enable_sleep_mode` on
    GPU; vLLM refuses it on CPU ("Sleep mode is not supported on current platform").
    `lora`: the adapters to serve (vllm_adapters.py)."""
    fields = {f.name: None for f in dataclasses.fields(vllm.EngineArgs)
              if not f.name.startswith("_")}
    given = cfg.strategy_args.strategy_config
    # No progress bar per weight reload: a sync every step would print one per step.
    defaults: dict[str, Any] = {**fields, "enforce_eager": not on_gpu,
                                "use_tqdm_on_load": False, "max_model_len": context_length,
                                "enable_sleep_mode": True if sleep_mode and on_gpu else None}
    if not on_gpu and "gpu_memory_utilization" not in given:
        defaults["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
    if lora is not None:
        defaults.update(engine_lora_kwargs(lora))
    if on_gpu and "gpu_memory_utilization" not in given:
        # what is free once the roles started before it (a colocated actor_train's weights)
        defaults["gpu_memory_utilization"] = engine_memory_fraction(*torch.cuda.mem_get_info())
    if not on_gpu and "enable_chunked_prefill" not in given:
        # vLLM's CPU sampler cannot rewind a seeded request's random generator, which it
        # does for a prompt prefilled over several steps ("CPU Generator does not use
        # offset"): prompts are prefilled whole, so the step's token budget must hold the
        # longest sequence (vLLM refuses less).
        defaults["enable_chunked_prefill"] = False
        longest = given.get("max_model_len") or context_length or model_max_len(model_path)
        defaults["max_num_batched_tokens"] = max(CPU_BATCHED_TOKENS, longest or 0)
    merged = checked_config("vllm", given, defaults, owned=OWNED_KEYS,
                            known=f"the fields of vllm.EngineArgs ({vllm.__version__})")
    kwargs = {k: v for k, v in merged.items() if v is not None}
    kwargs.update(model=model_path, dtype=VLLM_DTYPES[cfg.model_args.dtype], seed=seed,
                  logprobs_mode="processed_logprobs", generation_config="vllm")
    return kwargs


def model_max_len(model_path: str) -> int | None:
    """The model's own context limit (max_position_embeddings), when its config says."""
    try:
        return getattr(AutoConfig.from_pretrained(model_path), "max_position_embeddings", None)
    except (OSError, ValueError):
        return None


def _reload_from_safetensors(worker) -> None:
    """Runs in each vLLM worker: weight reloads read safetensors from now on."""
    worker.vllm_config.load_config.load_format = "safetensors"


def engine_form(prompt: list[int], images: PromptImages | None) -> tuple[list[int], dict | None]:
    """(ids, multi_modal_data) of one prompt as vLLM takes it. An image prompt's `prompt`
    starts with its expanded ids (`images.expanded_length` of them; a partial rollout's
    continuation adds its tokens so far): vLLM gets the engine ids in their place, one
    placeholder per image, and expands them itself; given the expanded ids it would
    expand them again (pipelines/data/image_prompts.py)."""
    if images is None or not images.images:
        return prompt, None
    return images.engine_ids + prompt[images.expanded_length:], {"image": images.images}


def request_seed(seed: int, index: int) -> int:
    """A 63-bit seed for prompt `index` of a call seeded `seed` (no two prompts share one)."""
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class VLLMInferStrategy(InferStrategy):
    streams = True  # generate_versioned may be called from many threads at once

    def __init__(self, model_path: str, cfg: WorkerConfig, seed: int,
                 context_length: int | None = None, sleep_mode: bool = False,
                 in_flight_updates: bool = False, lora_adapter: AdapterSpec | None = None):
        self.cfg = cfg
        self.in_flight_updates = in_flight_updates
        self.on_gpu = torch.cuda.is_available()
        kwargs = engine_kwargs(cfg, model_path, seed, on_gpu=self.on_gpu,
                               context_length=context_length, sleep_mode=sleep_mode,
                               lora=lora_adapter)
        self.sleep_mode = bool(kwargs.get("enable_sleep_mode"))
        if kwargs.get("tensor_parallel_size", 1) == 1:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.llm = vllm.LLM(**kwargs)
        self.in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
        if kwargs.get("load_format", "auto") not in ("auto", "safetensors"):
            # `load_format: dummy` (ROLL's configs) starts from random weights; the first
            # sync brings actor_train's, and reloads read the safetensors flywheel writes.
            self.llm.collective_rpc(_reload_from_safetensors)
        self.torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16,
                            "fp16": torch.float16}[cfg.model_args.dtype]
        self.tied = bool(self.llm.llm_engine.model_config.hf_config.tie_word_embeddings)
        self.tokenizer = load_tokenizer(model_path)
        self.eos_id = self.tokenizer.eos_token_id
        self.adapters = AdapterVersions(lora_adapter) if lora_adapter else None
        self.loop = EngineLoop(self.llm, "vllm", self.adapters)

    @property
    def version(self) -> int:
        return self.loop.version

    @property
    def capacity(self) -> int:
        """Sequences the engine decodes at once (vLLM's max_num_seqs)."""
        return self.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs

    def generate(self, prompts: list[list[int]], sampling: SamplingParams,
                 images: list[PromptImages | None] | None = None) -> list[Generation]:
        return self.generate_versioned(prompts, sampling, images=images)[2]

    def generate_versioned(self, prompts: list[list[int]], sampling: SamplingParams,
                           min_version: int = 0,
                           images: list[PromptImages | None] | None = None
                           ) -> tuple[int, float, list[Generation]]:
        """`generate`, safe to call from many threads at once, started on weights of at
        least `min_version`; (the version the responses started on, when they started
        (wall clock, after any wait for that version), the responses). An image prompt
        goes token-in as its engine ids with the images as multi_modal_data (`engine_form`)."""
        # vLLM refuses n > 1 with greedy decoding; hf_infer returns n copies: so do we
        copies = 1 if sampling.do_sample else sampling.n
        forms = [engine_form(p, images[i] if images is not None else None)
                 for i, p in enumerate(prompts)]
        requests = [(ids, self._params(sampling, request_seed(sampling.seed, i)))
                    for i, (ids, _) in enumerate(forms) for _ in range(copies)]
        media = ([media for _, media in forms for _ in range(copies)]
                 if images is not None else None)
        version, started, outputs = self.loop.generate(requests, min_version, media)
        gens = []
        for request, samples in enumerate(outputs):
            for sample in samples:
                gens.append(self._generation(request // copies, sample, sampling, version))
        return version, started, gens

    def _generation(self, prompt_index: int, sample: Sample, sampling: SamplingParams,
                    version: int) -> Generation:
        ids, reason = sample.token_ids, sample.finish_reason or "abort"
        if sampling.stop_strings:  # cut where hf_infer cuts (the completing token)
            end = response_end(ids, set(), sampling.stop_strings, self.tokenizer.decode)
            ids, reason = (ids, reason) if end is None else (ids[:end], "stop")
        versions = sample.versions[:len(ids)]
        return Generation(prompt_index=prompt_index, token_ids=ids,
                          log_probs=sample.log_probs[:len(ids)], finish_reason=reason,
                          token_versions=versions if set(versions) - {version} else [])

    def _params(self, sampling: SamplingParams, seed: int) -> vllm.SamplingParams:
        stop = list(sampling.stop_token_ids)
        if self.eos_id is not None:
            stop.append(self.eos_id)
        sample = sampling.do_sample
        return vllm.SamplingParams(
            n=sampling.n if sample else 1, max_tokens=sampling.max_new_tokens, seed=seed,
            temperature=sampling.temperature if sample else 0.0,
            top_p=sampling.top_p if sample else 1.0,
            top_k=sampling.top_k if sample and sampling.top_k > 0 else 0,
            repetition_penalty=sampling.repetition_penalty,
            stop_token_ids=stop, stop=list(sampling.stop_strings) or None, logprobs=0,
            detokenize=bool(sampling.stop_strings),  # stop strings are matched on text
        )

    def update_weights(self, named_tensors: dict[str, torch.Tensor], version: int) -> None:
        self.update_weights_from_buckets([named_tensors], version)

    def update_weights_from_buckets(self, buckets: Iterable[dict[str, torch.Tensor]],
                                    version: int) -> None:
        def load() -> None:
            if self.adapters:  # A and B of actor_train's adapter (lora_sync: adapter)
                tensors = {name: tensor.detach().to("cpu", self.torch_dtype, copy=True)
                           for bucket in buckets for name, tensor in bucket.items()}
                self.adapters.load(self.llm.llm_engine, tensors, version)
            elif self.in_process:  # the engine's model is in this process: stream into it
                with kept_layers_unlogged(self.unsynced):
                    self.llm.collective_rpc("reload_weights",
                                            kwargs={"weights_iterator": self._stream(buckets)})
            else:
                self._reload_through_file(self._stream(buckets))
        self.loop.update(load, version, in_flight=self.in_flight_updates)

    def _stream(self, buckets: Iterable[dict[str, torch.Tensor]]
                ) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor) in the engine's dtype, bucket after bucket as vLLM reads them;
        a tied head is sent last as the embedding (vLLM's head would stay stale). Tensors
        stay on the device they arrived on (a collective sync's are on the GPU), and the
        embedding is copied when it is kept: a bucket's views may be overwritten two
        buckets later (workers/weight_broadcast.py)."""
        embed, head_sent = None, False
        for bucket in buckets:
            for name, tensor in bucket.items():
                tensor = tensor.detach().to(dtype=self.torch_dtype)
                if name == "model.embed_tokens.weight" and self.tied:
                    embed = tensor.clone()
                head_sent |= name == "lm_head.weight"
                yield name, tensor
        if self.tied and not head_sent and embed is not None:
            yield "lm_head.weight", embed

    def _reload_through_file(self, weights: Iterator[tuple[str, torch.Tensor]]) -> None:
        """Multiprocess engines (tensor_parallel_size > 1): tensors do not cross
        `collective_rpc`, so one safetensors file under /dev/shm carries them."""
        tensors = {k: v.clone() for k, v in weights}  # save_file refuses shared tensors
        folder = tempfile.mkdtemp(prefix="flywheel-vllm-",
                                  dir=SHM_DIR if os.path.isdir(SHM_DIR) else None)
        try:
            save_file(tensors, os.path.join(folder, "model.safetensors"))
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": folder})
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    # ---- phase switch (pipelines/loop/phase_switch.py; unverified on GPU) ----------------------
    def sleep(self) -> str:
        """vLLM sleep mode level 1: weights to CPU memory, KV cache dropped. Level 1, not
        2, because a step without a weight sync (model_update_frequency > 1) wakes up to
        the same weights. On CPU vLLM ignores sleep (its CPU worker logs "sleep mode is
        not supported on CPU, ignore it"), so flywheel does not call it there."""
        if not self.on_gpu:
            return "no-op on cpu: vLLM's CPU worker ignores sleep mode"
        if not self.sleep_mode:
            raise RuntimeError("vllm: sleep needs enable_sleep_mode, which strategy_config "
                               "turned off; remove it or set offload_between_phases: false")
        self.loop.exclusive(lambda: self.llm.sleep(level=1))
        return "vllm sleep(level=1): weights to cpu, kv cache freed"

    def wake(self) -> str:
        if not self.on_gpu:
            return "no-op on cpu: vLLM's CPU worker ignores sleep mode"
        self.loop.exclusive(self._wake_up)
        return "vllm wake_up(): weights and kv cache back"

    def _wake_up(self) -> None:
        self.llm.wake_up()
        self.llm.reset_prefix_cache()  # the KV blocks were dropped with the cache

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        return self.loop.exclusive(lambda: self._forward_logprobs(batch))

    def _forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        if batch.images is not None and any(batch.images.rows):
            raise ValueError("vllm: forward_logprobs takes no image rows (a batch carries "
                             "the processor's tensors, vLLM wants the images): score them "
                             "on hf_train")
        lengths = batch.attention_mask.sum(dim=1).tolist()
        rows = [batch.input_ids[b, :n].tolist() for b, n in enumerate(lengths)]
        params = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=r) for r in rows], params,
                                    use_tqdm=False, lora_request=self.adapters and
                                    self.adapters.current)
        log_probs = torch.zeros(batch.input_ids.shape, dtype=torch.float32)  # [B, L]
        for b, (row, out) in enumerate(zip(rows, outputs)):
            values = [step[tok].logprob for step, tok in zip(out.prompt_logprobs[1:], row[1:])]
            log_probs[b, 1:len(row)] = torch.tensor(values, dtype=torch.float32)
        return log_probs


@dataclasses.dataclass
class _KeptLayerWarnings:
    """Drops what vLLM says of the layers a sync leaves out (`prefixes`), keeps the rest."""

    prefixes: tuple[str, ...]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "%s: Failed to load weights":  # per layer, names no weight
            return False
        if record.msg == "Following weights were not loaded from checkpoint: %s":
            missed = {n for n in record.args[0] if not under(n, list(self.prefixes))}
            record.args = (missed,)
            return bool(missed)  # a weight outside the frozen modules still shows
        return True


@contextlib.contextmanager
def kept_layers_unlogged(prefixes: tuple[str, ...]) -> Iterator[None]:
    """vLLM's in-place reload keeps the weights of a layer it is sent nothing for, warns
    "<layer>: Failed to load weights" for each (its model_loader/reload/layerwise.py) and
    lists every weight not loaded (reload/inplace.py). A sync that leaves a frozen tower
    out (frozen_modules.py) means exactly that, every sync: while it loads, those
    warnings go, and the list keeps only weights outside `prefixes`."""
    if not prefixes:
        yield
        return
    quiet = _KeptLayerWarnings(prefixes)
    loggers = [logging.getLogger(name) for name in RELOAD_LOGGERS]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)
