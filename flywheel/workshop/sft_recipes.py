"""The built-in models' warm starts: SFT recipes whose results ship with the package.

`tiny-qwen2-arith` (arithmetic, here) and `tiny-qwen2-frozenlake`
(`workshop/frozen_lake_warm_start.py`) are a base model plus a short SFT stage
(`pipelines/sft/train.py`, on the shared update loop). Their weights ship as package data
(`flywheel/platform/models/shipped/<name>/`), so every machine starts RL from the same
numbers; `python -m flywheel.workshop.sft_recipes --write-shipped` rebuilds them, and
`warm_start.json` beside them records the settings and the accuracies measured here (tests
hold the shipped weights to them).

## The arithmetic warm start

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

The stage is the SFT pipeline (`sft.train_sft`: AdamW at a constant lr through
`HFTrainStrategy.train_step`), loss on the response tokens only (answer characters +
`<eos>`, the same tokens RL will score), a fixed seed, and at most `max_threads` threads
so that the same settings give the same weights on the same machine. Sequences are laid
out exactly as the pipeline lays out prompt + response (see data/arithmetic_data.py):
`<bos> prompt answer <eos>`.

Not here: the accuracy yardstick (`sft/greedy_eval.py`, used by the stopping rule, to report
val accuracy, and by tests); resolving `builtin://` names (`platform/models/builtin.py`).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedModel

from flywheel.pipelines.data.arithmetic_data import make_arithmetic_dataset
from flywheel.pipelines.sft.greedy_eval import accuracy_of
from flywheel.pipelines.sft.train import SFTSettings, capped_threads, encode_records, train_sft
from flywheel.platform.models.builtin import SHIPPED_DIR, resolve_pretrain
from flywheel.platform.models.tiny_qwen2 import save_hf_checkpoint
from flywheel.workshop.frozen_lake_warm_start import (
    FrozenLakeWarmStartConfig,
    warm_start_frozen_lake,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmStartConfig:
    """Every field is recorded in the shipped `warm_start.json` (a test holds them equal)."""

    steps: int = 3000  # optimiser steps, an upper bound when `stop_at_accuracy` is set
    # Stop at the first check whose greedy exact match on the dev records reaches this; the run
    # fails loudly if `steps` pass first. None: run exactly `steps` steps (tests, experiments).
    stop_at_accuracy: float | None = 0.30
    check_every: int = 10  # steps between accuracy checks (~0.2 s each on 500 records)
    num_dev: int = 500  # train-split records held out of SFT for the stopping check
    lr: float = 1e-3  # AdamW, constant; 3e-3 stalled in BACKENDS.md
    batch_size: int = 64  # sequences per step, drawn with replacement from the train split
    seed: int = 0  # batch sampling (and the train split's order)
    # torch intra-op threads during the build (results depend on it).
    # 1, not 2: on a 2-core machine shared with Ray actors, 2 OpenMP threads spin-wait and
    # training fell from 13.8 to 0.9 steps/s (measured); 1 thread degrades gracefully.
    max_threads: int = 1
    log_every: int = 100  # steps between progress lines

    def sft(self) -> SFTSettings:
        return SFTSettings(steps=self.steps, lr=self.lr, batch_size=self.batch_size,
                           seed=self.seed, log_every=self.log_every)


@dataclass(frozen=True)
class WarmStartResult:
    steps: int
    first_loss: float
    final_loss: float  # mean of the last min(steps, 20) step losses
    seconds: float
    dev_accuracy: float | None  # at the last check (None when `stop_at_accuracy` is None)
    val_accuracy: float | None  # greedy exact match on the val records, if any were given


def warm_start(
    base_dir: str | Path,
    out_dir: str | Path,
    config: WarmStartConfig = WarmStartConfig(),
    val_records: list[dict] | None = None,
) -> WarmStartResult:
    """SFT the checkpoint in `base_dir` on the arithmetic train split; save it to `out_dir`
    with `warm_start.json` (config and result) beside the weights."""
    out_dir = Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    train = make_arithmetic_dataset(split="train", seed=config.seed)
    dev = train[: config.num_dev] if config.stop_at_accuracy is not None else []
    data = encode_records(train[len(dev):], tokenizer)
    logger.info("warm start: up to %d steps of SFT on %d arithmetic examples (base %s)",
                config.steps, len(data), base_dir)
    dev_accuracy: list[float] = []

    def reached_target(step: int, model: PreTrainedModel) -> bool:
        if config.stop_at_accuracy is None or step % config.check_every:
            return False
        dev_accuracy.append(accuracy_of(model, tokenizer, dev))
        if step % config.log_every == 0:
            logger.info("warm-start step %d dev accuracy %.3f (stops at >= %.3f)",
                        step, dev_accuracy[-1], config.stop_at_accuracy)
        return dev_accuracy[-1] >= config.stop_at_accuracy

    start = time.perf_counter()
    with capped_threads(config.max_threads), torch.random.fork_rng(devices=[]):
        model, losses = train_sft(base_dir, data, config.sft(), reached_target)
        target = config.stop_at_accuracy
        if target is not None and not (dev_accuracy and dev_accuracy[-1] >= target):
            raise RuntimeError(
                f"warm start did not reach dev accuracy {target} within {config.steps} steps "
                f"(last check: {_fmt(dev_accuracy[-1] if dev_accuracy else None)}); "
                "raise `steps` or lower `stop_at_accuracy`"
            )
        accuracy = accuracy_of(model, tokenizer, val_records) if val_records else None
    tail = losses[-20:]
    result = WarmStartResult(
        steps=len(losses),
        first_loss=losses[0] if losses else float("nan"),
        final_loss=sum(tail) / len(tail) if tail else float("nan"),
        seconds=time.perf_counter() - start,
        dev_accuracy=dev_accuracy[-1] if dev_accuracy else None,
        val_accuracy=accuracy,
    )
    save_hf_checkpoint(model.cpu(), tokenizer, out_dir)
    (out_dir / "warm_start.json").write_text(
        json.dumps({"config": asdict(config), "result": asdict(result)}, indent=2) + "\n")
    logger.info("warm start done: %d steps in %.1fs, final loss %.4f, dev accuracy %s, "
                "val accuracy %s", result.steps, result.seconds, result.final_loss,
                _fmt(result.dev_accuracy), _fmt(accuracy))
    return result


def _fmt(accuracy: float | None) -> str:
    return "n/a" if accuracy is None else f"{accuracy:.3f}"


# ---- the shipped recipes ---------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """A built-in model made by SFT: `base` (a `builtin://` name) plus a warm start."""

    base: str
    warm_start: WarmStartConfig | FrozenLakeWarmStartConfig


RECIPES: dict[str, Recipe] = {
    "tiny-qwen2-arith": Recipe("tiny-qwen2", WarmStartConfig()),
    "tiny-qwen2-frozenlake": Recipe("tiny-qwen2-h4", FrozenLakeWarmStartConfig()),
}


def build_recipe(name: str, out_dir: str | Path,
                 config: WarmStartConfig | FrozenLakeWarmStartConfig | None = None):
    """Run recipe `name` (with its own settings, or `config`) into `out_dir`; its result."""
    recipe = RECIPES[name]
    config = config or recipe.warm_start
    base_dir = resolve_pretrain(f"builtin://{recipe.base}")
    if isinstance(config, FrozenLakeWarmStartConfig):
        return warm_start_frozen_lake(base_dir, out_dir, config)
    return warm_start(base_dir, out_dir, config,
                      val_records=make_arithmetic_dataset(split="val"))


def write_shipped(names: list[str]) -> None:
    """Rebuild the shipped folders of `names` (each replaced only once it is complete)."""
    for name in names:
        final = SHIPPED_DIR / name
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=final.parent))
        try:
            result = build_recipe(name, tmp)
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"{name}: {result}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write-shipped", action="store_true",
                        help=f"rebuild the shipped weights under {SHIPPED_DIR}")
    parser.add_argument("names", nargs="*", default=sorted(RECIPES),
                        choices=sorted(RECIPES), metavar="NAME")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if not args.write_shipped:
        parser.error("nothing to do: pass --write-shipped")
    write_shipped(args.names)


if __name__ == "__main__":
    main()
