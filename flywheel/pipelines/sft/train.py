"""Supervised fine-tuning on the one update loop: cross-entropy on response tokens only.

Users of this field fine-tune before RL, and the built-in models' warm starts
(`workshop/sft_recipes.py`, `workshop/frozen_lake_warm_start.py`) are such a stage. SFT is
not a loop of its own: each step draws `batch_size` rows (with replacement, from a seeded
generator) and hands them to `TrainStrategy.train_step` with the `CrossEntropy` objective,
so the optimizer, schedule, clipping, micro-batching and global token counts are those RL
trains with (`workers/strategies/train_loop.py`).

Data: prompt/response pairs (`{"prompt", "response"}`, or `"answer"` as the arithmetic
records name it) laid out as the RLVR pipeline lays them out, `<bos> prompt | response
<eos>`; chat messages (`{"messages": [...]}`, the last one the assistant's reply) through
the tokenizer's chat template; or token rows already packed (`TokenBatch`, e.g. agentic
episodes with several response segments). The loss is on `response_mask` tokens only:

    loss = -(sum over response tokens t of log p(x_t | x_<t)) / counts.num_tokens

where `counts.num_tokens` is the mini-batch's response tokens (over its micro-batches and
ranks), so the gradient is the mean token NLL however the batch is cut.

In process: the built-in recipes run on `HFTrainStrategy` in the calling process (a few
MB model on CPU); the same objective runs on any train backend.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from flywheel.config.schema import TrainingArgs, WorkerConfig
from flywheel.workers.batch import TokenBatch, pack_sequences
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.train_loop import Counts

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SFTSettings:
    steps: int  # optimizer steps (an upper bound when `on_step` may stop early)
    lr: float = 1e-3  # AdamW, constant
    weight_decay: float = 0.01  # torch.optim.AdamW's default, which the warm starts used
    batch_size: int = 64  # rows per step, drawn with replacement
    seed: int = 0  # row sampling and the strategy's torch seed
    log_every: int = 100


class CrossEntropy:
    """The SFT `Objective` over the policy head: `outputs` are per-token log-probs [b, L]."""

    needs_entropy = False

    def __call__(self, outputs: torch.Tensor, entropy: torch.Tensor | None,
                 micro: TokenBatch, counts: Counts) -> tuple[torch.Tensor, dict[str, float]]:
        mask = micro.response_mask  # [b, L]
        nll = -(outputs * mask).sum()
        loss = nll / counts.num_tokens
        return loss, {"sft/loss": nll.item() / max(1.0, float(mask.sum()))}


def prompt_response_ids(record: dict, tokenizer: PreTrainedTokenizerBase
                        ) -> tuple[list[int], list[int]]:
    """(prompt ids, response ids) of one record; the response ends with eos."""
    if "messages" in record:
        messages = record["messages"]
        if not messages or messages[-1].get("role") != "assistant":
            raise ValueError("an SFT chat record ends with the assistant's message")
        prompt = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True,
                                               tokenize=False)
        full = tokenizer.apply_chat_template(messages, tokenize=False)
        if not full.startswith(prompt):
            raise ValueError("the chat template does not extend the prompt with the reply")
        return (tokenizer.encode(prompt, add_special_tokens=False),
                tokenizer.encode(full[len(prompt):], add_special_tokens=False))
    response = record["response"] if "response" in record else record["answer"]
    prompt = tokenizer.encode(record["prompt"], add_special_tokens=False)
    if tokenizer.bos_token_id is not None:
        prompt = [tokenizer.bos_token_id] + prompt
    ids = tokenizer.encode(response, add_special_tokens=False) + [tokenizer.eos_token_id]
    return prompt, ids


def encode_records(records: list[dict], tokenizer: PreTrainedTokenizerBase) -> TokenBatch:
    """Right-padded rows `prompt | response`, response_mask on the response."""
    pairs = [prompt_response_ids(r, tokenizer) for r in records]
    return pack_sequences([p for p, _ in pairs], [r for _, r in pairs], tokenizer.pad_token_id)


def sft_worker_config(settings: SFTSettings) -> WorkerConfig:
    """One optimizer step per `train_step` of `batch_size` rows; no clipping (as before)."""
    return WorkerConfig(training_args=TrainingArgs(
        learning_rate=settings.lr, weight_decay=settings.weight_decay,
        per_device_train_batch_size=settings.batch_size, max_grad_norm=0.0))


@contextlib.contextmanager
def capped_threads(max_threads: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, min(previous, max_threads)))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def train_sft(model_dir: str | Path, data: TokenBatch, settings: SFTSettings,
              on_step: Callable[[int, PreTrainedModel], bool | None] | None = None,
              ) -> tuple[PreTrainedModel, list[float]]:
    """Up to `settings.steps` steps of `CrossEntropy` on rows of `data`; the trained model
    and each step's loss. `on_step(step, model)` runs after each step (1-based); True stops.
    """
    strategy = HFTrainStrategy(str(model_dir), sft_worker_config(settings), settings.seed,
                               total_steps=settings.steps)
    generator = torch.Generator().manual_seed(settings.seed)
    objective = CrossEntropy()
    losses: list[float] = []
    start = time.perf_counter()
    for step in range(1, settings.steps + 1):
        rows = torch.randint(len(data), (settings.batch_size,), generator=generator)  # [B]
        metrics = strategy.train_step(data.select(rows), objective)
        losses.append(metrics["sft/loss"])
        if step % settings.log_every == 0 or step == settings.steps:
            rate = step / (time.perf_counter() - start)
            logger.info("sft step %d/%d loss %.4f rate %.1f steps/s eta %.0fs (to step %d)",
                        step, settings.steps, losses[-1], rate,
                        (settings.steps - step) / rate, settings.steps)
        if on_step is not None and on_step(step, strategy.model):
            logger.info("sft stopped at step %d (loss %.4f)", step, losses[-1])
            break
    strategy.model.eval()
    return strategy.model, losses
