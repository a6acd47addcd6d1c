"""Supervised warm start of the tiny model on the arithmetic task (an explicit SFT stage).

Why a warm start at all: RL with an exact-match reward only learns from samples that are
sometimes right. A randomly initialised model is never right, so RL would have no signal.
Why a *short* one: the point of the built-in `tiny-qwen2-arith` model is to leave RL room to
improve. BACKENDS.md saw that from ~11% greedy accuracy GRPO did not improve and from ~31% it
reached ~83% in 300 steps, so we want a model in the 15-35% band.

Why stop on accuracy rather than after a fixed number of steps: measured here (263-token
vocab, 1 thread, 2-core CPU), greedy accuracy sits below 10% for a few hundred steps, then
climbs to ~90% within ~200 more, and *when* it climbs varies wildly with the seed: at step 500
three seeds gave 11%, 64% and 15% on val, and the default build (seed 0) reached 25% only at
step 990. A different CPU (other BLAS kernels, other rounding) is effectively a different seed,
so a fixed step count tuned to 25% on one machine may give 5% or 80% on another. Instead the
loop checks greedy exact match on `num_dev` train-split examples held out of SFT every
`check_every` steps and stops at the first check that reaches `stop_at_accuracy`. The val
split is never used for the decision, only reported. On one machine the result is still
deterministic (same settings, same weights).

This is a real training stage, not a hidden trick: plain PyTorch, AdamW at a constant lr,
loss on the response tokens only (answer characters + `<eos>`, the same tokens RL will
score), a fixed seed, and at most `max_threads` threads so that the same settings give the
same weights on the same machine. Sequences are laid out exactly as the pipeline lays out
prompt + response (see data/arithmetic.py): `<bos> prompt answer <eos>`.

Not here: caching and naming (`builtin.py`); the accuracy yardstick (`greedy_eval.py`, used
by the stopping rule, to report val accuracy, and by tests).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from flywheel.platform.data.arithmetic import make_arithmetic_dataset
from flywheel.platform.models.greedy_eval import accuracy_of, greedy_accuracy
from flywheel.platform.models.tiny_qwen2 import load_causal_lm, save_hf_checkpoint

__all__ = [
    "WarmStartConfig",
    "WarmStartResult",
    "capped_threads",
    "encode_sft",
    "greedy_accuracy",  # re-exported: the yardstick lives in greedy_eval.py
    "train_sft",
    "warm_start",
]

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100


@dataclass(frozen=True)
class WarmStartConfig:
    """Every field enters the built-in model's cache key (changing one rebuilds it)."""

    steps: int = 3000  # optimiser steps, an upper bound when `stop_at_accuracy` is set
    # Stop at the first check whose greedy exact match on the dev records reaches this; the run
    # fails loudly if `steps` pass first. None: run exactly `steps` steps (tests, experiments).
    stop_at_accuracy: float | None = 0.30
    check_every: int = 10  # steps between accuracy checks (~0.2 s each on 500 records)
    num_dev: int = 500  # train-split records held out of SFT for the stopping check
    lr: float = 1e-3  # AdamW, constant; 3e-3 stalled in BACKENDS.md
    batch_size: int = 64  # sequences per step, drawn with replacement from the train split
    seed: int = 0  # batch sampling (and the train split's order)
    # torch intra-op threads during the build (results depend on it: it is part of the key).
    # 1, not 2: on a 2-core machine shared with Ray actors, 2 OpenMP threads spin-wait and
    # training fell from 13.8 to 0.9 steps/s (measured); 1 thread degrades gracefully.
    max_threads: int = 1
    log_every: int = 100  # steps between progress lines


@dataclass(frozen=True)
class WarmStartResult:
    steps: int
    first_loss: float
    final_loss: float  # mean of the last min(steps, 20) step losses
    seconds: float
    dev_accuracy: float | None  # at the last check (None when `stop_at_accuracy` is None)
    val_accuracy: float | None  # greedy exact match on the val records, if any were given


def encode_sft(
    records: list[dict], tokenizer: PreTrainedTokenizerBase
) -> tuple[torch.Tensor, torch.Tensor]:
    """`<bos> prompt answer <eos>` ids and labels that are IGNORE_INDEX on `<bos> prompt`.

    All records must encode to the same length (true for the fixed-width arithmetic task), so
    no padding is needed. Returns `(input_ids [N, T], labels [N, T])`.
    """
    if tokenizer.bos_token_id is None or tokenizer.eos_token_id is None:
        raise ValueError("the warm start needs a tokenizer with bos and eos tokens")
    rows, labels = [], []
    for r in records:
        prompt = [tokenizer.bos_token_id] + tokenizer.encode(r["prompt"], add_special_tokens=False)
        response = tokenizer.encode(r["answer"], add_special_tokens=False)
        response.append(tokenizer.eos_token_id)
        rows.append(prompt + response)
        labels.append([IGNORE_INDEX] * len(prompt) + response)
    if len({len(row) for row in rows}) > 1:
        raise ValueError("encode_sft expects fixed-width records (all sequences one length)")
    return torch.tensor(rows), torch.tensor(labels)


@contextlib.contextmanager
def capped_threads(max_threads: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, min(previous, max_threads)))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def train_sft(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    config: WarmStartConfig,
    on_step: Callable[[int, PreTrainedModel], bool | None] | None = None,
) -> list[float]:
    """Run up to `config.steps` AdamW steps of next-token cross-entropy; return step losses.

    loss = mean over labelled positions t of -log p(x_t | x_<t)   (labels shifted by one)
    `on_step(step, model)` runs after each step (1-based); returning True stops the loop.
    """
    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    model.train()
    losses: list[float] = []
    start = time.perf_counter()
    for step in range(1, config.steps + 1):
        idx = torch.randint(len(input_ids), (config.batch_size,), generator=generator)  # [B]
        ids, tgt = input_ids[idx], labels[idx]  # [B, T]
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1]  # [B, T-1, V]
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1), ignore_index=IGNORE_INDEX
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % config.log_every == 0 or step == config.steps:
            elapsed = time.perf_counter() - start
            rate = step / elapsed
            logger.info(
                "warm-start step %d/%d loss %.4f rate %.1f steps/s eta %.0fs (to step %d)",
                step,
                config.steps,
                losses[-1],
                rate,
                (config.steps - step) / rate,
                config.steps,
            )
        if on_step is not None and on_step(step, model):
            logger.info("warm-start stopped at step %d (loss %.4f)", step, losses[-1])
            break
    model.eval()
    return losses


def warm_start(
    base_dir: str | Path,
    out_dir: str | Path,
    config: WarmStartConfig = WarmStartConfig(),
    val_records: list[dict] | None = None,
) -> WarmStartResult:
    """SFT the checkpoint in `base_dir` on the arithmetic train split; save it to `out_dir`.

    Writes a complete HF checkpoint plus `warm_start.json` (config and result) so the origin of
    the weights is on disk beside them. `out_dir` is written in place: callers that need an
    atomic result (the cache) pass a temporary directory and rename it.
    """
    out_dir = Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    train = make_arithmetic_dataset(split="train", seed=config.seed)
    dev = train[: config.num_dev] if config.stop_at_accuracy is not None else []
    input_ids, labels = encode_sft(train[len(dev) :], tokenizer)
    logger.info(
        "warm start: up to %d steps of SFT on %d arithmetic examples (base %s)",
        config.steps,
        len(input_ids),
        base_dir,
    )
    dev_accuracy: list[float] = []

    def reached_target(step: int, model: PreTrainedModel) -> bool:
        if config.stop_at_accuracy is None or step % config.check_every:
            return False
        dev_accuracy.append(accuracy_of(model, tokenizer, dev))
        if step % config.log_every == 0:
            logger.info(
                "warm-start step %d dev accuracy %.3f (stops at >= %.3f)",
                step,
                dev_accuracy[-1],
                config.stop_at_accuracy,
            )
        return dev_accuracy[-1] >= config.stop_at_accuracy

    start = time.perf_counter()
    with capped_threads(config.max_threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = load_causal_lm(base_dir)
        losses = train_sft(model, input_ids, labels, config, reached_target)
        target = config.stop_at_accuracy
        if target is not None and not (dev_accuracy and dev_accuracy[-1] >= target):
            raise RuntimeError(
                f"warm start did not reach dev accuracy {target} within {config.steps} steps "
                f"(last check: {_fmt(dev_accuracy[-1] if dev_accuracy else None)}); "
                "raise `steps` or lower `stop_at_accuracy`"
            )
        accuracy = accuracy_of(model, tokenizer, val_records) if val_records else None
    seconds = time.perf_counter() - start
    tail = losses[-20:]
    result = WarmStartResult(
        steps=len(losses),
        first_loss=losses[0] if losses else float("nan"),
        final_loss=sum(tail) / len(tail) if tail else float("nan"),
        seconds=seconds,
        dev_accuracy=dev_accuracy[-1] if dev_accuracy else None,
        val_accuracy=accuracy,
    )
    save_hf_checkpoint(model, tokenizer, out_dir)
    (out_dir / "warm_start.json").write_text(
        json.dumps({"config": asdict(config), "result": asdict(result)}, indent=2) + "\n"
    )
    logger.info(
        "warm start done: %d steps in %.1fs, final loss %.4f, dev accuracy %s, val accuracy %s",
        result.steps,
        seconds,
        result.final_loss,
        _fmt(result.dev_accuracy),
        _fmt(accuracy),
    )
    return result


def _fmt(accuracy: float | None) -> str:
    return "n/a" if accuracy is None else f"{accuracy:.3f}"
