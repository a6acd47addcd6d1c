"""sglang: generation with SGLang's offline `Engine` (its scheduler runs in subprocesses).

UNVERIFIED: SGLang's kernels ship only CUDA builds, so this file has never run on the
machines flywheel is developed on; it is written against the Engine API of sglang 0.5.x
(`generate(input_ids=..., return_logprob=True)`, `update_weights_from_tensor`). Check it
on a GPU machine before relying on it (the vllm backend is the tested one). Choosing it
where sglang is not installed is a `BackendMissing` error naming what to install.

Conventions, as vllm: log-probs are those of the sampled distribution
(algorithms/sampled_distribution.py). SGLang returns log-softmax of logits / temperature
(`SGLANG_RETURN_ORIGINAL_LOGPROB` is set to 0 before the engine starts unless already
set), without its top-k / top-p truncation; with top_k set the request also asks for
the top_k log-probs of each position, and the recorded log-prob is renormalised over the
kept set (sglang_outputs.py; the trainer scores SGLang's joint top-k / top-p rule), while
top_p without top_k is refused rather than recording log-probs of another distribution.
Partial rollout: a stop string that began in an earlier segment is found across the
boundary (sglang's own check sees only this request's output). A stop token is kept
in `token_ids`; `sampling.n` samples per prompt, each with its own
`sampling_seed` derived from (`sampling.seed`, prompt, sample); results in prompt order.

Weights: one `update_weights_from_tensor` per bucket (workers/weight_buckets.py) sends
its tensors to the scheduler processes (CUDA IPC on GPU), which load them in place; the
last one flushes the KV cache. Tied embeddings get `lm_head.weight` explicitly, as for
vllm. Partial rollout needs nothing here: the pipeline cuts responses
into segments of separate `generate` calls and swaps weights between them (rlvr/generation.py).

strategy_config: any field of `sglang.srt.server_args.ServerArgs` (mem_fraction_static,
tp_size, context_length, ...); unknown keys are an error. context_length unset: the run's
(as vllm's max_model_len). Sampling as vllm: repetition_penalty, stop token ids and stop
strings (cut at the completing token, `stops.response_end`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Iterable
from typing import Any

import sglang
import torch
from sglang.srt.server_args import ServerArgs

from flywheel.config.schema import WorkerConfig
from flywheel.platform.liveness import tick
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.base import Generation, InferStrategy, SamplingParams
from flywheel.workers.strategies.engine_options import SGLANG_OWNED, SGLANG_TRUNCATION
from flywheel.workers.strategies.hf_model import load_tokenizer
from flywheel.workers.strategies.sglang_outputs import generation_of, truncates
from flywheel.workers.strategies.strategy_config import checked_config
from flywheel.workers.strategies.vllm_infer import request_seed

SGLANG_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
OWNED_KEYS = SGLANG_OWNED


def engine_kwargs(cfg: WorkerConfig, model_path: str, seed: int,
                  context_length: int | None = None, sleep_mode: bool = False
                  ) -> dict[str, Any]:
    """`sleep_mode` (a colocated run, pipelines/loop/phase_switch.py): `enable_memory_saver`,
    which `release_memory_occupation` needs (it uses the torch_memory_saver package)."""
    fields = {f.name: None for f in dataclasses.fields(ServerArgs)}
    fields["context_length"] = context_length  # the run's, unless strategy_config sets it
    if sleep_mode:
        fields["enable_memory_saver"] = True
    merged = checked_config("sglang", cfg.strategy_args.strategy_config, fields,
                            owned=OWNED_KEYS, known="the fields of sglang ServerArgs")
    kwargs = {k: v for k, v in merged.items() if v is not None}
    kwargs.update(model_path=model_path, dtype=SGLANG_DTYPES[cfg.model_args.dtype],
                  random_seed=seed, skip_tokenizer_init=True)
    return kwargs


def _succeeded(result: Any, what: str) -> None:
    """The Engine's update calls answer (success, message) or an object with .success."""
    success, message = (result[0], result[1]) if isinstance(result, tuple) else (
        getattr(result, "success", True), getattr(result, "message", ""))
    if not success:
        raise RuntimeError(f"sglang {what} failed: {message}")


class SGLangInferStrategy(InferStrategy):
    def __init__(self, model_path: str, cfg: WorkerConfig, seed: int,
                 context_length: int | None = None, sleep_mode: bool = False):
        for name in ("SGLANG_RETURN_ORIGINAL_LOGPROB", "RETURN_ORIGINAL_LOGPROB"):
            os.environ.setdefault(name, "0")  # the name moved between 0.4 and 0.5
        self.cfg = cfg
        self.engine = sglang.Engine(**engine_kwargs(cfg, model_path, seed, context_length,
                                                    sleep_mode))
        self.torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16,
                            "fp16": torch.float16}[cfg.model_args.dtype]
        self.tokenizer = load_tokenizer(model_path)
        self.eos_id = self.tokenizer.eos_token_id
        self.version = 0

    async def _generate_ticking(self, requests: list[list[int]], params: list[dict],
                                top_logprobs: int | None = None) -> list[dict]:
        """All requests at once (SGLang batches them), each a progress tick as it finishes
        (platform/liveness.py), so a long call that keeps finishing samples is not a stall.
        `top_logprobs`: how many of each position's most likely log-probs to return."""
        extra = {"top_logprobs_num": top_logprobs} if top_logprobs else {}

        async def one(ids: list[int], p: dict) -> dict:
            out = await self.engine.async_generate(input_ids=ids, sampling_params=p,
                                                   return_logprob=True, **extra)
            tick()
            return out

        return list(await asyncio.gather(*(one(r, p) for r, p in zip(requests, params,
                                                                     strict=True))))

    def generate(self, prompts: list[list[int]], sampling: SamplingParams,
                 images: list | None = None) -> list[Generation]:
        if images is not None and any(images):
            raise ValueError("sglang: takes no image inputs (image prompts run on hf_infer)")
        if sampling.do_sample and sampling.top_k <= 0 and sampling.top_p < 1.0:
            raise ValueError(f"sglang: generating_args.top_p: {SGLANG_TRUNCATION}")
        stop = [*sampling.stop_token_ids, *([self.eos_id] if self.eos_id is not None else [])]
        sample = sampling.do_sample
        requests, params = [], []
        for i, prompt in enumerate(prompts):
            for j in range(sampling.n):
                requests.append(prompt)
                params.append({
                    "max_new_tokens": sampling.max_new_tokens, "stop_token_ids": stop,
                    "temperature": sampling.temperature if sample else 0.0,
                    "top_p": sampling.top_p if sample else 1.0,
                    "top_k": sampling.top_k if sample and sampling.top_k > 0 else -1,
                    "repetition_penalty": sampling.repetition_penalty,
                    "stop": list(sampling.stop_strings) or None,
                    "sampling_seed": request_seed(sampling.seed, i * sampling.n + j),
                })
        top = sampling.top_k if truncates(sampling) else None  # renormalised over them
        outputs = asyncio.get_event_loop().run_until_complete(
            self._generate_ticking(requests, params, top))
        return [generation_of(out, index, sampling, prompts[index // sampling.n],
                              self.tokenizer.decode) for index, out in enumerate(outputs)]

    def update_weights(self, named_tensors: dict[str, torch.Tensor], version: int) -> None:
        self.update_weights_from_buckets([named_tensors], version)

    def update_weights_from_buckets(self, buckets: Iterable[dict[str, torch.Tensor]],
                                    version: int) -> None:
        """One `update_weights_from_tensor` call per bucket; the KV cache is flushed with
        the last one, which also carries a tied head (the embedding, copied: a bucket's
        views may be overwritten two buckets later, workers/weight_broadcast.py)."""
        embed, head_sent, held = None, False, None
        for bucket in buckets:
            tensors = [(k, v.detach().to(self.torch_dtype)) for k, v in bucket.items()]
            if "model.embed_tokens.weight" in bucket:
                embed = dict(tensors)["model.embed_tokens.weight"].clone()
            head_sent |= "lm_head.weight" in bucket
            if held is not None:
                self._send(held, flush_cache=False)
            held = tensors
        if not head_sent and embed is not None:  # a tied checkpoint: the head is the embedding
            held = (held or []) + [("lm_head.weight", embed)]
        self._send(held or [], flush_cache=True)
        self.version = version

    def _send(self, tensors: list[tuple[str, torch.Tensor]], flush_cache: bool) -> None:
        _succeeded(self.engine.update_weights_from_tensor(
            named_tensors=tensors, flush_cache=flush_cache), "update_weights_from_tensor")

    # ---- phase switch (pipelines/loop/phase_switch.py; UNVERIFIED, like this whole file) --
    def sleep(self) -> str:
        """SGLang's memory release: weights and KV cache off the GPU (Engine 0.5.x,
        `release_memory_occupation()`; needs `enable_memory_saver`, set at start)."""
        self.engine.release_memory_occupation()
        return "sglang release_memory_occupation()"

    def wake(self) -> str:
        self.engine.resume_memory_occupation()
        return "sglang resume_memory_occupation()"

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        lengths = batch.attention_mask.sum(dim=1).tolist()
        rows = [batch.input_ids[b, :n].tolist() for b, n in enumerate(lengths)]
        outputs = self.engine.generate(input_ids=rows, sampling_params={"max_new_tokens": 1},
                                       return_logprob=True, logprob_start_len=0)
        log_probs = torch.zeros(batch.input_ids.shape, dtype=torch.float32)  # [B, L]
        for b, (row, out) in enumerate(zip(rows, outputs)):
            pairs = out["meta_info"]["input_token_logprobs"][1:len(row)]  # first is None
            log_probs[b, 1:len(row)] = torch.tensor([float(p[0]) for p in pairs])
        return log_probs
