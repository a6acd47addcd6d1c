"""Supervised warm start of the tiny model on FrozenLake (an explicit, cached SFT stage).

Why: the tiny char-level model has never seen a grid or the `<answer>...</answer>` format.
RL from random init would wait a long time for its first parseable, let alone winning,
action. So, as for arithmetic (warm_start.py), a short SFT stage teaches the format and a
little play, then stops early at a modest greedy success rate, leaving RL the room to
improve: the agentic example's target is validation success from <= 0.3 to >= 0.8.

Data: demonstrations of a shortest-path expert (breadth-first search on the map drawn in
the latest observation, avoiding holes; ties broken at random from `seed`), played through
`flywheel.envs.EnvManager` with exactly the env settings and templates of the example
config (`examples/agent_val_frozen_lake_async.yaml`; a test holds them equal). So the SFT
sequences are token for token what RL will see, and the loss is on the model's tokens only
(response_mask), `<answer>Action</answer><eos>` per turn.

Stopping: greedy success on `num_dev` dev maps (their own seed stream, apart from the
demonstrations' and from the pipeline's train and validation seeds) every `check_every`
steps; the first check at or above `stop_at_success` ends SFT. Measured here (2-core CPU,
shared): the format is learnt after ~80 steps, success climbs from 0 to ~0.5 between steps
~80 and ~100 and reaches ~0.85 by step 220, so the stop lands in the first climb.

Dependencies: `flywheel.envs` (a leaf package, like this one: no Ray, nothing above
platform), torch and transformers. Not here: caching and naming (builtin.py).
"""

from __future__ import annotations

import collections
import json
import logging
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from flywheel.envs import EnvManager, EnvManagerConfig, Trajectory, aggregate_metrics
from flywheel.platform.models.tiny_qwen2 import load_causal_lm, save_hf_checkpoint
from flywheel.platform.models.warm_start import (
    IGNORE_INDEX,
    WarmStartConfig,
    capped_threads,
    train_sft,
)

logger = logging.getLogger(__name__)

MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
DEMO_STREAM, DEV_STREAM = 7_001, 7_002  # rollout seeds of demonstrations and dev maps


@dataclass(frozen=True)
class FrozenLakeWarmStartConfig:
    """Every field enters the built-in model's cache key (changing one rebuilds it)."""

    # -- the task, as the example config plays it (custom_envs.FrozenLake) --
    size: int = 3
    p: float = 0.8
    max_steps: int = 6
    max_tokens_per_step: int = 24
    system_template: str = ""
    turn_template: str = "{observation}\n"
    env_instruction: str = ""
    # -- SFT --
    num_demos: int = 1000  # expert episodes (distinct seeds) to learn from
    steps: int = 600  # optimiser steps, an upper bound: the run stops at stop_at_success
    # SFT ends at the first check where the format is learnt (greedy dev replies parse at
    # least this often) or greedy dev success reaches stop_at_success, whichever comes first.
    stop_at_valid: float = 0.95
    stop_at_success: float = 0.2
    check_every: int = 5
    first_check: int = 50  # no checks before: the format alone takes longer (checks cost ~1 s)
    num_dev: int = 64
    lr: float = 1e-3
    batch_size: int = 32
    seed: int = 0
    max_threads: int = 1  # see warm_start.WarmStartConfig.max_threads
    log_every: int = 20

    def env_manager(self, num_groups: int) -> EnvManagerConfig:
        return EnvManagerConfig(
            env_type="frozen_lake", tag="FrozenLake", group_size=1, num_env_groups=num_groups,
            env_config={"size": self.size, "p": self.p, "is_slippery": False,
                        "env_instruction": self.env_instruction},
            max_steps=self.max_steps, max_tokens_per_step=self.max_tokens_per_step,
            system_template=self.system_template, turn_template=self.turn_template)


@dataclass(frozen=True)
class FrozenLakeWarmStartResult:
    steps: int
    final_loss: float
    seconds: float
    dev_success: float  # at the last check
    dev_action_is_valid: float


def expert_action(prompt_text: str, size: int, rng: random.Random) -> str:
    """A shortest-path move for the map at the end of `prompt_text` (its last `size` lines,
    each possibly preceded by the previous turn's reply)."""
    grid = [line[-size:] for line in prompt_text.rstrip("\n").split("\n")[-size:]]
    player = next((r, c) for r in range(size) for c in range(size) if grid[r][c] == "P")
    goal = (size - 1, size - 1)
    dist = {goal: 0}
    queue = collections.deque([goal])
    while queue:  # breadth-first from the goal over cells that are not holes
        r, c = queue.popleft()
        for dr, dc in MOVES.values():
            cell = (r + dr, c + dc)
            if (0 <= cell[0] < size and 0 <= cell[1] < size and cell not in dist
                    and grid[cell[0]][cell[1]] != "O"):
                dist[cell] = dist[(r, c)] + 1
                queue.append(cell)
    here = dist.get(player)
    best = [a for a, (dr, dc) in MOVES.items()
            if here is not None and dist.get((player[0] + dr, player[1] + dc)) == here - 1]
    return rng.choice(best) if best else rng.choice(list(MOVES))


class _Codec:
    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def demonstrations(config: FrozenLakeWarmStartConfig,
                   tokenizer: PreTrainedTokenizerBase) -> list[Trajectory]:
    codec, rng = _Codec(tokenizer), random.Random(config.seed)

    def expert(prompts: list[list[int]], max_tokens: int) -> list[tuple[list[int], list[float]]]:
        out = []
        for prompt in prompts:
            action = expert_action(codec.decode(prompt), config.size, rng)
            ids = codec.encode(f"<answer>{action}</answer>") + [tokenizer.eos_token_id]
            out.append((ids, [0.0] * len(ids)))
        return out

    manager = EnvManager(config.env_manager(config.num_demos))
    return manager.rollout(expert, codec, seed=DEMO_STREAM + config.seed)


def encode_trajectories(trajectories: list[Trajectory],
                        pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [N, T] and labels [N, T] (IGNORE_INDEX off the model's tokens)."""
    width = max(len(t.input_ids) for t in trajectories)
    input_ids = torch.full((len(trajectories), width), pad_id)  # [N, T]
    labels = torch.full((len(trajectories), width), IGNORE_INDEX)  # [N, T]
    for i, t in enumerate(trajectories):
        ids = torch.tensor(t.input_ids)
        input_ids[i, :len(ids)] = ids
        labels[i, :len(ids)] = torch.where(torch.tensor(t.response_mask) == 1, ids, IGNORE_INDEX)
    return input_ids, labels


@torch.no_grad()
def greedy_play(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                config: FrozenLakeWarmStartConfig, num_maps: int, seed: int) -> dict[str, float]:
    """Episode metrics of greedy play on `num_maps` maps of rollout seed `seed`."""
    was_training = model.training
    model.eval()

    def generate(prompts: list[list[int]], max_tokens: int) -> list[tuple[list[int],
                                                                          list[float]]]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), tokenizer.pad_token_id)  # [B, W] left-padded
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens,
                             do_sample=False, eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id)[:, width:].tolist()
        replies = []
        for row in out:
            if tokenizer.eos_token_id in row:
                row = row[:row.index(tokenizer.eos_token_id) + 1]
            replies.append((row, [0.0] * len(row)))
        return replies

    episodes = EnvManager(config.env_manager(num_maps)).rollout(
        generate, _Codec(tokenizer), seed=seed)
    model.train(was_training)
    return aggregate_metrics(episodes)


def sft_settings(config: FrozenLakeWarmStartConfig) -> WarmStartConfig:
    """The knobs `train_sft` reads (its stopping rule is ours, passed as `on_step`)."""
    return WarmStartConfig(steps=config.steps, stop_at_accuracy=None, lr=config.lr,
                           batch_size=config.batch_size, seed=config.seed,
                           max_threads=config.max_threads, log_every=config.log_every)


def warm_start_frozen_lake(base_dir: str | Path, out_dir: str | Path,
                           config: FrozenLakeWarmStartConfig = FrozenLakeWarmStartConfig()
                           ) -> FrozenLakeWarmStartResult:
    """SFT the checkpoint in `base_dir` on expert FrozenLake play; save it to `out_dir`
    with `warm_start.json` (settings and result) beside the weights."""
    out_dir = Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    input_ids, labels = encode_trajectories(demonstrations(config, tokenizer),
                                            tokenizer.pad_token_id)
    checks: list[dict[str, float]] = []

    def reached_target(step: int, model: PreTrainedModel) -> bool:
        if step < config.first_check or step % config.check_every:
            return False
        checks.append(greedy_play(model, tokenizer, config, config.num_dev,
                                  DEV_STREAM + config.seed))
        logger.info("frozen-lake warm start step %d: dev success %.3f, valid actions %.3f",
                    step, checks[-1]["success"], checks[-1]["action_is_valid"])
        return (checks[-1]["action_is_valid"] >= config.stop_at_valid
                or checks[-1]["success"] >= config.stop_at_success)

    start = time.perf_counter()
    with capped_threads(config.max_threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = load_causal_lm(base_dir)
        losses = train_sft(model, input_ids, labels, sft_settings(config), reached_target)
    if not checks or (checks[-1]["action_is_valid"] < config.stop_at_valid
                      and checks[-1]["success"] < config.stop_at_success):
        raise RuntimeError(f"FrozenLake warm start learnt neither the reply format nor any "
                           f"play within {config.steps} steps; raise `steps`")
    tail = losses[-20:]
    result = FrozenLakeWarmStartResult(
        steps=len(losses), final_loss=sum(tail) / len(tail),
        seconds=time.perf_counter() - start, dev_success=checks[-1]["success"],
        dev_action_is_valid=checks[-1]["action_is_valid"])
    save_hf_checkpoint(model, tokenizer, out_dir)
    (out_dir / "warm_start.json").write_text(
        json.dumps({"config": asdict(config), "result": asdict(result)}, indent=2) + "\n")
    logger.info("frozen-lake warm start done: %s", result)
    return result
