"""hf_infer: generation with transformers' `generate` (KV cache), one process.

Prompts are left-padded into micro-batches of `infer_batch_size` prompts; each prompt is
sampled `n` times. The log-prob returned per token is that of the distribution sampled
from (temperature, top-k, top-p: algorithms/sampled_distribution.py), computed after
generation by the trainer's own function (`hf_model.sequence_logprobs`) in one forward
pass over prompt + response, chunked over positions. Asking `generate` for its scores
instead would keep a [batch, vocab] tensor per generated token: at SmolLM2's 49k
vocabulary, 64 x 256 tokens would be 3.2 GB. A repetition penalty changes what is sampled
but is not part of this log-prob (nor of the trainer's); the offpolicy metrics show it.

Sampling is exactly what the config says, as in vllm: every `GenerationConfig` field that
shapes the distribution is set on each call, and the model's own `generation_config.json`
is replaced at load by a blank one, because transformers 5 fills any field left `None`
from that file and then from its global defaults (top_k=50!). The ignored file settings
are logged once. Stops: eos, `stop_token_ids`, and `stop_strings` (`stops.response_end`).

Sampling is seeded per call (`SamplingParams.seed`), so the same seed and weights give the
same responses: this is what makes a synchronous run reproducible bit for bit.
Partial rollout asks nothing of this backend: the pipeline cuts long responses into
segments of separate `generate` calls (rlvr/generation.py), and weights change between calls.

Image prompts (issue 29): `generate`'s `images` carries each prompt's processor tensors;
they go to `generate` collated for the micro-batch (left padding moves no image token
out of its prompt) and to the log-prob pass, one copy per sample.

strategy_config: hf_infer has no keys; any key is an error (it would do nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

from flywheel.algorithms.sampled_distribution import RAW, SampledDistribution
from flywheel.config.schema import WorkerConfig
from flywheel.platform.liveness import tick
from flywheel.workers.batch import TokenBatch, pack_sequences
from flywheel.workers.image_inputs import PromptImages, RowImages, token_types
from flywheel.workers.strategies.base import Generation, InferStrategy, SamplingParams
from flywheel.workers.strategies.frozen_modules import under
from flywheel.workers.strategies.hf_model import (
    batched_logprobs,
    image_tokens_as_text,
    load_causal_lm,
    load_tokenizer,
    pick_device,
)
from flywheel.workers.strategies.stops import response_end
from flywheel.workers.strategies.strategy_config import checked_config, require

log = logging.getLogger(__name__)
# generation_config.json fields that would change what is sampled, reported when ignored
SAMPLING_FIELDS = ("do_sample", "temperature", "top_p", "top_k", "repetition_penalty",
                   "min_p", "typical_p", "no_repeat_ngram_size", "max_new_tokens", "max_length")


class HFInferStrategy(InferStrategy):
    def __init__(self, model_path: str, cfg: WorkerConfig, seed: int,
                 context_length: int | None = None, sleep_mode: bool = False):
        # sleep_mode: nothing to prepare at start; `sleep` moves the model when on CUDA
        checked_config("hf_infer", cfg.strategy_args.strategy_config, {})
        self.cfg = cfg
        self.context_length = context_length  # prompt + response tokens allowed, if bounded
        self.device = pick_device()
        self.model = load_causal_lm(model_path, cfg.model_args, self.device).eval()
        self.model.requires_grad_(False)
        ignored = {k: v for k, v in self.model.generation_config.to_diff_dict().items()
                   if k in SAMPLING_FIELDS}
        if ignored:
            log.warning("hf_infer: ignoring %s's generation_config.json sampling settings %s "
                        "(only generating_args apply, as in vllm)", model_path, ignored)
        self.model.generation_config = GenerationConfig()
        self.tokenizer = load_tokenizer(model_path)
        self.pad_id = (self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                       else 0)
        self.eos_id = self.tokenizer.eos_token_id
        self.version = 0

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], sampling: SamplingParams,
                 images: list[PromptImages | None] | None = None) -> list[Generation]:
        """`images` (image prompts, issue 29): per prompt, its processor's image tensors
        (workers/image_inputs.py), in context for sampling and for the returned log-probs;
        the prompt's ids hold its image tokens expanded."""
        rows = RowImages.of(images) if images is not None else None
        if self.context_length is not None:
            longest = max(len(p) for p in prompts) + sampling.max_new_tokens
            require(longest <= self.context_length, "context_length",
                    f"a prompt of {longest - sampling.max_new_tokens} tokens plus "
                    f"max_new_tokens={sampling.max_new_tokens} exceeds the run's context "
                    f"length {self.context_length}")
        # where each prompt's own ids end: past it, a partial rollout's response so far
        prompt_ends = [i.expanded_length if i is not None else len(p)
                       for p, i in zip(prompts, images)] if images is not None else None
        out: list[Generation] = []
        size = self.cfg.infer_batch_size
        for start in range(0, len(prompts), size):
            torch.manual_seed(sampling.seed + start)
            chunk_images = rows[start:start + size] if rows is not None else None
            out.extend(self._generate_chunk(prompts[start:start + size], start, sampling,
                                            chunk_images, prompt_ends[start:start + size]
                                            if prompt_ends else None))
        return out

    def generation_config(self, sampling: SamplingParams, stop_ids: list[int]
                          ) -> GenerationConfig:
        """Every field that shapes sampling, explicit (None would mean the model file's)."""
        sample = sampling.do_sample
        return GenerationConfig(
            max_new_tokens=sampling.max_new_tokens, num_return_sequences=sampling.n,
            do_sample=sample, num_beams=1,
            temperature=sampling.temperature if sample else 1.0,
            top_p=sampling.top_p if sample else 1.0,
            top_k=sampling.top_k if sample and sampling.top_k > 0 else 0,  # 0: off
            repetition_penalty=sampling.repetition_penalty,
            stop_strings=sampling.stop_strings or None,
            eos_token_id=stop_ids, pad_token_id=self.pad_id,
            return_dict_in_generate=True,
        )

    def _generate_chunk(self, prompts: list[list[int]], offset: int,
                        sampling: SamplingParams, images: RowImages | None = None,
                        prompt_ends: list[int] | None = None) -> list[Generation]:
        """`prompt_ends`: with images, where each prompt's own ids end; the ids after it (a
        partial rollout's response so far) are read as text, as they were sampled."""
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        continued = torch.zeros_like(input_ids, dtype=torch.bool)
        for i, p in enumerate(prompts):  # left padding keeps every prompt's end aligned
            input_ids[i, width - len(p):] = torch.tensor(p)
            attention[i, width - len(p):] = 1
            if prompt_ends is not None:
                continued[i, width - len(p) + prompt_ends[i]:] = True
        stop_ids = [self.eos_id, *sampling.stop_token_ids]
        input_ids = input_ids.to(self.device)
        with image_tokens_as_text(self.model, input_ids,
                                  continued.to(self.device) if images is not None else None
                                  ) as model_ids:
            result = self.model.generate(
                input_ids=model_ids, attention_mask=attention.to(self.device),
                generation_config=self.generation_config(sampling, stop_ids),
                tokenizer=self.tokenizer,  # stop_strings need it
                stopping_criteria=StoppingCriteriaList([TickPerToken()]),
                **(images.model_inputs(self.device) | token_types(self.model, model_ids)
                   if images is not None else {}),
            )
        new_tokens = result.sequences[:, width:].cpu()  # [B*n, T]
        rows, ends = [], []
        for row in range(new_tokens.shape[0]):
            ids = new_tokens[row].tolist()
            i = row // sampling.n  # a stop string may start in the response so far
            before = sampling.response_so_far(prompts[i], offset + i)
            end = response_end(ids, set(stop_ids), sampling.stop_strings, self.tokenizer.decode,
                               before)
            rows.append(ids[:end])
            ends.append(end)
        # the log-prob pass scores the response so far and the new tokens as one response
        # (text past the prompt's own ids: hf_model.generated_image_tokens_as_text); the
        # new tokens' log-probs are kept
        cut = [prompt_ends[row // sampling.n] if prompt_ends else len(prompts[row // sampling.n])
               for row in range(len(rows))]
        row_prompts = [prompts[row // sampling.n] for row in range(len(rows))]
        log_probs = self._sampled_logprobs(
            [p[:c] for p, c in zip(row_prompts, cut)],
            [p[c:] + ids for p, c, ids in zip(row_prompts, cut, rows)], sampling,
            images.repeat(sampling.n) if images is not None else None)
        log_probs = [lp[len(p) - c:] for lp, p, c in zip(log_probs, row_prompts, cut)]
        return [Generation(prompt_index=offset + row // sampling.n, token_ids=ids,
                           log_probs=log_probs[row],
                           finish_reason="length" if ends[row] is None else "stop")
                for row, ids in enumerate(rows)]

    def _sampled_logprobs(self, prompts: list[list[int]], responses: list[list[int]],
                          sampling: SamplingParams,
                          images: RowImages | None = None) -> list[list[float]]:
        """Each response token's log-prob under the distribution it was sampled from (with
        the row's images in context: the trainer's own function, hf_model.py)."""
        distribution = (SampledDistribution(sampling.temperature, sampling.top_k,
                                            sampling.top_p) if sampling.do_sample else RAW)
        batch = pack_sequences(prompts, responses, self.pad_id, images=images)
        values = batched_logprobs(self.model, batch, len(batch), distribution)  # [B, L]
        return [values[row, len(p):len(p) + len(r)].tolist()
                for row, (p, r) in enumerate(zip(prompts, responses))]

    def update_weights(self, named_tensors: dict[str, torch.Tensor], version: int) -> None:
        self.update_weights_from_buckets([named_tensors], version)

    @torch.no_grad()
    def update_weights_from_buckets(self, buckets: Iterable[dict[str, torch.Tensor]],
                                    version: int) -> None:
        """Each bucket copied into the parameters in place as it arrives (what
        `load_state_dict` does, a bucket at a time); a tied head follows its embedding.
        Names under `unsynced` (actor_train's frozen modules) may be missing: they keep
        their loaded values."""
        targets = self.model.state_dict(keep_vars=True)
        missing, unexpected = set(targets), []
        for bucket in buckets:
            for name, tensor in bucket.items():
                target = targets.get(name)
                if target is None or target.shape != tensor.shape:
                    unexpected.append(name)
                    continue
                target.copy_(tensor)
                missing.discard(name)
        missing = {m for m in missing if not under(m, list(self.unsynced))}
        if unexpected or [m for m in missing if not m.endswith("lm_head.weight")]:
            raise ValueError(f"weight sync mismatch: missing={sorted(missing)} "
                             f"unexpected={unexpected}")
        self.model.tie_weights()
        self.version = version

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        return batched_logprobs(self.model, batch, self.cfg.infer_batch_size)

    # ---- phase switch (pipelines/loop/phase_switch.py; bench/gpu_checks.py on a GPU) -----------
    def sleep(self) -> str:
        """The model to the CPU (transformers keeps no KV cache between calls)."""
        if self.device.type == "cpu":
            return "no-op on cpu: nothing on an accelerator to free"
        self.model.to("cpu")
        torch.cuda.empty_cache()
        return "model to cpu"

    def wake(self) -> str:
        if self.device.type == "cpu":
            return "no-op on cpu: nothing on an accelerator to free"
        self.model.to(self.device)
        return f"model to {self.device}"


class TickPerToken(StoppingCriteria):
    """Stops nothing: reports each decoding step as progress, so a long `generate` that
    keeps producing tokens is told apart from a stalled one (platform/liveness.py)."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        tick()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
