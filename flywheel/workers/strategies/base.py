"""What a backend must provide. Two small ABCs; one file per backend implements one.

A training backend (hf_train, deepspeed_train, megatron_train) computes log-probs and
takes optimizer steps with a loss function it is handed; it never knows which RL loss
that is. A generation backend (hf_infer, vllm, sglang) turns prompt token ids into
sampled responses with per-token log-probs and accepts new weights in place.
Adding a backend: one new file here, one line in `registry.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Protocol

import torch

from flywheel.workers.batch import TokenBatch


class LossFn(Protocol):
    """The objective a training backend minimises; built by the pipeline, opaque here.

    `counts` holds the mini-batch's `num_tokens` and `num_seqs` (summed over micro-batches
    and data-parallel ranks) so per-micro-batch losses add up to the mini-batch loss.
    """

    needs_entropy: bool

    def __call__(
        self, log_probs: torch.Tensor, entropy: torch.Tensor | None, micro: TokenBatch,
        counts: dict[str, float],
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


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
    @abstractmethod
    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        """Log-probs [B, L] aligned with batch.input_ids (column 0 is 0); no grad."""

    @abstractmethod
    def train_step(self, batch: TokenBatch, loss_fn: LossFn, ppo_epochs: int = 1) -> dict:
        """Optimizer steps over `batch` (ppo_epochs passes of its mini-batches); metrics."""

    @abstractmethod
    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        """Full (unsharded) weights in Hugging Face names, on CPU, for actor_infer."""

    @abstractmethod
    def save(self, path: str) -> None:
        """Model, optimizer, scheduler and RNG state, so a resume continues exactly."""

    @abstractmethod
    def load(self, path: str) -> None: ...


class InferStrategy(ABC):
    @abstractmethod
    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        """`sampling.n` responses per prompt, grouped by prompt, in prompt order."""

    @abstractmethod
    def update_weights(self, named_tensors: dict[str, torch.Tensor], version: int) -> None:
        """Replace the generation weights in place (no restart)."""

    @abstractmethod
    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        """Log-probs [B, L] of given sequences under the current generation weights."""
