"""What a backend must provide. Two small ABCs; one file per backend implements one.

A training backend (hf_train, deepspeed_train, megatron_train) supplies the hooks of the
one update loop (`train_loop.py`) and never knows which objective it minimises. A
generation backend (hf_infer, vllm, sglang) turns prompt token ids into sampled responses
with per-token log-probs and accepts new weights in place.
Adding a backend: one new file here, one line in `registry.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from flywheel.config.schema import WorkerConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.image_inputs import PromptImages
from flywheel.workers.strategies.model_head import ModelHead
from flywheel.workers.strategies.train_loop import Counts, Objective, OptimizerStep, run_update

if TYPE_CHECKING:
    from peft import PeftModel


@dataclass
class SamplingParams:
    max_new_tokens: int
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    do_sample: bool = True
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int = 0
    repetition_penalty: float = 1.0  # CTRL penalty on prompt + response tokens; 1.0 off
    stop_strings: list[str] = field(default_factory=list)  # end at the completing token
    expand: bool = False  # send n copies of each prompt with n=1 (infer_worker.py)
    # Per prompt, how many of its last ids are the response so far (a partial rollout's
    # next segment: rlvr/generation.py segment_request); empty: none. A stop string may
    # begin there (stops.response_end `before`).
    continued: list[int] = field(default_factory=list)

    def response_so_far(self, prompt: list[int], index: int) -> list[int]:
        """The ids of prompt `index` that an earlier segment sampled (none: [])"""
        k = self.continued[index] if index < len(self.continued) else 0
        return prompt[len(prompt) - k:] if k > 0 else []


@dataclass
class Generation:
    """One sampled response. `log_probs[i]` is the model's log-prob of `token_ids[i]`."""

    prompt_index: int
    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str  # "stop" (eos / stop token), "length", or "abort"
    # Weights version of each token, filled only when a partial rollout continued the
    # response on newer weights; empty: every token is from the version that started it.
    token_versions: list[int] = field(default_factory=list)


class TrainStrategy(ABC):
    """A training backend: a model under one head (`model_head.py`: the policy's log-probs
    or the critic's values), its optimizer and schedule when the role trains (the
    reference does not), and the hooks the update loop (`train_loop.py`) runs. The loop
    itself is not a backend's business: `train_step` is the same for every backend.

    Subclasses set `cfg`, `head`, `optimizer` (None for a forward-only role) and
    `scheduler` in their constructor, whose signature is
    `(model_path, cfg, seed, total_steps, trainable=True, head=POLICY)`; `total_steps` is
    the schedule's horizon in optimizer steps. A backend that trains a LoRA adapter
    (`model_args.lora_target`, lora.py) sets `adapter` too.
    """

    cfg: WorkerConfig
    head: ModelHead
    optimizer: object | None
    scheduler: object | None
    adapter: PeftModel | None = None  # the PEFT wrapper of a LoRA backend's model
    # the schedule's horizon counts train steps, and it steps once per train step (set by
    # the TrainWorker: agentic step-level samples, roles.py `schedule_per_train_step`)
    schedule_per_train_step: bool = False

    @abstractmethod
    def forward(self, batch: TokenBatch) -> torch.Tensor:
        """The head's outputs [B, L] aligned with batch.input_ids (column 0 is 0); no grad."""

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        self._require_head("policy", "log-probs")
        return self.forward(batch)

    def forward_values(self, batch: TokenBatch) -> torch.Tensor:
        self._require_head("value", "values")
        return self.forward(batch)

    def forward_base_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        """Log-probs of the policy the LoRA run started from, the reference policy of a
        LoRA run (config/derived.py `reference_from_actor`): the frozen base with
        the adapter disabled, or base + the starting adapter when the run loaded one
        (`adapter_name_or_path`; lora.py keeps a frozen copy of it).
        """
        if self.adapter is None:
            raise RuntimeError(f"forward_base_logprobs: {type(self).__name__} trains no LoRA "
                               f"adapter")
        from flywheel.workers.strategies.lora import (
            has_reference_adapter,
            reference_adapter_active,
        )
        # the reference's distribution: untruncated (model_head.ModelHead.for_reference)
        head, self.head = self.head, self.head.for_reference()
        try:
            if has_reference_adapter(self.adapter):
                with reference_adapter_active(self.adapter):
                    return self.forward_logprobs(batch)
            with self.adapter.disable_adapter():
                return self.forward_logprobs(batch)
        finally:
            self.head = head

    def train_step(self, batch: TokenBatch, loss_fn: Objective, ppo_epochs: int = 1) -> dict:
        """Optimizer steps over `batch` (ppo_epochs passes of its mini-batches); metrics."""
        if self.optimizer is None:
            raise RuntimeError("train_step on a forward-only role (the reference never trains)")
        return run_update(self, batch, loss_fn, self.cfg.training_args, ppo_epochs,
                          self.scheduler, self.head.metric_prefix,
                          self.schedule_per_train_step)

    def fuses_old_logprobs(self, rows: int, ppo_epochs: int) -> bool:
        """Whether a train step of `rows` rows on this rank may take the old log-probs from
        its own training forwards instead of a separate pass first (fused_old_logprobs.py).
        No by default: a backend says yes when its objective sees every row of the rank
        with outputs exactly those of `forward`, and the step is one optimizer step."""
        return False

    def _require_head(self, kind: str, what: str) -> None:
        if self.head.kind != kind:
            raise RuntimeError(f"this model has a {self.head.kind} head: it computes no {what}")

    # ---- the update loop's hooks (see train_loop.UpdateHooks) ---------------------------
    @abstractmethod
    def set_training(self, training: bool) -> None: ...

    @abstractmethod
    def global_counts(self, mini: TokenBatch) -> Counts: ...

    @abstractmethod
    def forward_backward(self, micros: list[TokenBatch], objective: Objective,
                         counts: Counts) -> list[dict[str, float]]: ...

    @abstractmethod
    def optimizer_step(self, max_grad_norm: float) -> OptimizerStep: ...

    def shared_loss_metrics(self, sums: dict[str, float], micro_steps: int
                            ) -> tuple[dict[str, float], int]:
        return sums, micro_steps

    def agreed_micro_batches(self, n: int) -> int:
        return n  # one rank (data-parallel backends agree over their ranks)

    # ---- the phase switch of a colocated run (pipelines/loop/phase_switch.py) --------------
    @abstractmethod
    def offload(self, part: str) -> str:
        """Move `part` (offload.OPTIMIZER or offload.MODEL) off the device so the engine
        sharing it can generate; what happened, in words (on CPU: a no-op, said so)."""

    @abstractmethod
    def onload(self) -> str:
        """Everything `offload` moved, back onto the device before training."""

    # ---- weights and checkpoints --------------------------------------------------------
    @abstractmethod
    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        """Full (unsharded) weights in Hugging Face names, on CPU, for actor_infer."""

    def weights_for_sync(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The same weights one tensor at a time, for a weight sync in buckets
        (weight_buckets.py): each is read before the next is asked for, and before the
        next train step. Every rank iterates (gathering may be a collective). This
        default builds the full state dict first; a backend that can hand out its
        tensors one by one without a full copy overrides it."""
        yield from self.state_dict_for_sync().items()

    @abstractmethod
    def save(self, path: str) -> None:
        """Model, optimizer, scheduler and RNG state, so a resume continues exactly."""

    @abstractmethod
    def load(self, path: str) -> None: ...


class InferStrategy(ABC):
    """A generation backend. One that streams (vllm) also sets `streams = True` and
    provides `generate_versioned(prompts, sampling, min_version) -> (version, started,
    generations)`, callable from many threads at once, and `capacity` (sequences its
    engine decodes at once): workers/infer_worker.py's generate_stream."""

    streams = False
    # Module prefixes a weight sync leaves out: actor_train's frozen modules, which keep
    # the values this engine loaded (frozen_modules.py). Set by the worker at start.
    unsynced: tuple[str, ...] = ()

    @abstractmethod
    def generate(self, prompts: list[list[int]], sampling: SamplingParams,
                 images: list[PromptImages | None] | None = None) -> list[Generation]:
        """`sampling.n` responses per prompt, grouped by prompt, in prompt order.
        `images`: per prompt its image inputs or None (image prompts, issue 29; a backend
        that takes none refuses them)."""

    @abstractmethod
    def update_weights(self, named_tensors: dict[str, torch.Tensor], version: int) -> None:
        """Replace the generation weights in place (no restart)."""

    def update_weights_from_buckets(self, buckets: Iterable[dict[str, torch.Tensor]],
                                    version: int) -> None:
        """`update_weights` with the weights arriving in buckets (weight_buckets.py),
        together the whole model; a backend loads each one as it arrives and lets it go.
        A bucket's tensors are views that may be overwritten two buckets later (a
        collective sync reuses its receive buffers: weight_broadcast.py), so this default
        copies them while it collects the whole model."""
        self.update_weights({k: v.clone() for bucket in buckets for k, v in bucket.items()},
                            version)

    @abstractmethod
    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        """Log-probs [B, L] of given sequences under the current generation weights."""

    # ---- the phase switch of a colocated run (pipelines/loop/phase_switch.py) --------------
    def sleep(self) -> str:
        """Free the device memory the engine holds (weights, KV cache) while actor_train
        trains on the same devices; what happened, in words. This default is for a
        backend that holds none."""
        return f"no-op: {type(self).__name__} holds no accelerator memory"

    def wake(self) -> str:
        """Take the memory back before the weight sync and generation."""
        return f"no-op: {type(self).__name__} holds no accelerator memory"
