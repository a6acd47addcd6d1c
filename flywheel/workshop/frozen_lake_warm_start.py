r"""Supervised warm start of the tiny model on FrozenLake (an explicit, cached SFT stage).

Why: the tiny char-level model has never seen a grid or a reply format. RL from random
init would wait a long time for its first parseable, let alone winning, reply. So, as for
arithmetic (workshop/sft_recipes.py), a short SFT stage comes first, and what it teaches is chosen
to leave RL the real work: the agentic example's target is greedy validation success
from <= 0.3 to >= 0.8.

Data: episodes of a *cautious walker*, played through `flywheel.envs.EnvManager` with
exactly the env settings and templates of the example config
(`examples/agent_val_frozen_lake_async.yaml`; a test holds them equal), so the SFT
sequences are token for token what RL will see; the loss is on the model's tokens only
(response_mask). The walker reads the map only to avoid stepping into a hole: it picks
uniformly among the moves that do not (a move into the edge leaves it in place and counts
as safe). It has no plan and no preferred direction: it wanders, bumps into edges and wins
only ~7% of these maps within 6 turns, but never falls in. Imitating it teaches the
model to read the grid around `P`; what RL must add is goal-directed play (head for the
bottom-right goal, and which way round a hole is shorter). Measured: a walker preferring
Right and Down 3:1 made a warm start whose greedy play already won ~60% of maps, leaving
RL too little to show; one that imitated the walker only loosely (stopped early, with 2
attention heads) still fell in holes in 20-30% of episodes and RL then settled on a
fixed staircase (Right, Down, Right, Down) that ignores the map, at ~0.7 success.

The reply is the bare action name (`Right` then eos; action_pattern `(\w+)`): every
character is a token, and `<answer>Right</answer>` would make each turn 4x longer to
generate and its 17 fixed characters a target for RL noise (measured: with Adam, the
format eroded within ~10 RL steps at lr 5e-5 while success was still rising).

Stopping: every `check_every` steps from `first_check`, the model plays `num_dev` dev maps
(a seed stream apart from the demonstrations' and from the pipeline's train and validation
seeds) sampling at temperature 1; SFT ends at the first check where at least
`stop_at_valid` of its replies parse and at most `stop_at_falls` of its episodes end in a
hole: the model then reads the grid well enough to stay out of holes.

Training is the SFT pipeline (`sft.train_sft`, on the shared update loop); the episodes
become token rows whose response_mask marks the model's replies. Not here: the shipped
weights and the recipe registry (workshop/sft_recipes.py).
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from flywheel.envs import EnvManager, EnvManagerConfig, Trajectory, aggregate_metrics
from flywheel.pipelines.sft.train import SFTSettings, capped_threads, train_sft
from flywheel.platform.models.tiny_qwen2 import save_hf_checkpoint
from flywheel.workers.batch import TokenBatch

logger = logging.getLogger(__name__)

MOVES = {"Right": (0, 1), "Down": (1, 0), "Left": (0, -1), "Up": (-1, 0)}
DEMO_STREAM, DEV_STREAM = 7_001, 7_002  # rollout seeds of demonstrations and dev maps


@dataclass(frozen=True)
class FrozenLakeWarmStartConfig:
    """Every field enters the built-in model's cache key (changing one rebuilds it)."""

    # -- the task, as the example config plays it (custom_envs.FrozenLake) --
    size: int = 3
    p: float = 0.8
    max_steps: int = 6
    max_tokens_per_step: int = 8
    action_pattern: str = r"(\w+)"
    system_template: str = ""
    turn_template: str = "{observation}\n"
    env_instruction: str = ""
    # -- SFT --
    num_demos: int = 1000  # walker episodes (distinct seeds) to learn from
    steps: int = 2500  # optimiser steps, an upper bound: see stop_at_*
    stop_at_valid: float = 0.9  # sampled dev replies that parse, and
    stop_at_falls: float = 0.1  # sampled dev episodes ending in a hole: both end SFT
    check_every: int = 20
    first_check: int = 100  # no checks before (each costs a few seconds)
    num_dev: int = 64
    lr: float = 1e-3
    batch_size: int = 32
    seed: int = 0
    max_threads: int = 1  # see sft_recipes.WarmStartConfig.max_threads
    log_every: int = 20

    def env_manager(self, num_groups: int) -> EnvManagerConfig:
        return EnvManagerConfig(
            env_type="frozen_lake", tag="FrozenLake", group_size=1, num_env_groups=num_groups,
            env_config={"size": self.size, "p": self.p, "is_slippery": False,
                        "action_pattern": self.action_pattern,
                        "env_instruction": self.env_instruction},
            max_steps=self.max_steps, max_tokens_per_step=self.max_tokens_per_step,
            system_template=self.system_template, turn_template=self.turn_template)


@dataclass(frozen=True)
class FrozenLakeWarmStartResult:
    steps: int
    final_loss: float
    seconds: float
    dev_sampled_valid: float  # at the last check: sampled replies that parse
    dev_sampled_success: float
    dev_greedy_success: float  # greedy play on the same maps, after SFT


def walker_action(prompt_text: str, size: int, rng: random.Random) -> str:
    """The cautious walker's move on the map at the end of `prompt_text` (its last `size`
    lines, the first possibly preceded by the previous reply)."""
    grid = [line[-size:] for line in prompt_text.rstrip("\n").split("\n")[-size:]]
    row, col = next((r, c) for r in range(size) for c in range(size) if grid[r][c] == "P")
    safe = [a for a, (dr, dc) in MOVES.items()
            if grid[min(max(row + dr, 0), size - 1)][min(max(col + dc, 0), size - 1)] != "O"]
    return rng.choice(safe)


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

    def walker(prompts: list[list[int]], max_tokens: int) -> list[tuple[list[int],
                                                                         list[float]]]:
        out = []
        for prompt in prompts:
            ids = codec.encode(walker_action(codec.decode(prompt), config.size, rng))
            ids.append(tokenizer.eos_token_id)
            out.append((ids, [0.0] * len(ids)))
        return out

    manager = EnvManager(config.env_manager(config.num_demos))
    return manager.rollout(walker, codec, seed=DEMO_STREAM + config.seed)


def encode_trajectories(trajectories: list[Trajectory], pad_id: int) -> TokenBatch:
    """Right-padded episode rows [N, T]; response_mask on the model's tokens."""
    width = max(len(t.input_ids) for t in trajectories)
    input_ids = torch.full((len(trajectories), width), pad_id)  # [N, T]
    attention_mask = torch.zeros_like(input_ids)  # [N, T]
    response_mask = torch.zeros(len(trajectories), width)  # [N, T]
    for i, t in enumerate(trajectories):
        input_ids[i, :len(t.input_ids)] = torch.tensor(t.input_ids)
        attention_mask[i, :len(t.input_ids)] = 1
        response_mask[i, :len(t.input_ids)] = torch.tensor(t.response_mask, dtype=torch.float)
    return TokenBatch(input_ids, attention_mask, response_mask)


@torch.no_grad()
def play(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
         config: FrozenLakeWarmStartConfig, num_maps: int, seed: int,
         do_sample: bool) -> dict[str, float]:
    """Episode metrics of greedy or sampled (temperature 1) play on `num_maps` maps of
    rollout seed `seed`."""
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
        sampling = dict(temperature=1.0, top_k=0, top_p=1.0) if do_sample else {}
        out = model.generate(input_ids=ids.to(model.device),
                             attention_mask=mask.to(model.device), max_new_tokens=max_tokens,
                             do_sample=do_sample, eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id,
                             **sampling)[:, width:].tolist()
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


def falls(metrics: dict[str, float]) -> float:
    """Episodes that ended in a hole: neither won, nor cut off by max_steps, nor failed."""
    return 1.0 - metrics["success"] - metrics["truncated"] - metrics["failed"]


def sft_settings(config: FrozenLakeWarmStartConfig) -> SFTSettings:
    """The knobs `train_sft` reads (its stopping rule is ours, passed as `on_step`)."""
    return SFTSettings(steps=config.steps, lr=config.lr, batch_size=config.batch_size,
                       seed=config.seed, log_every=config.log_every)


def warm_start_frozen_lake(base_dir: str | Path, out_dir: str | Path,
                           config: FrozenLakeWarmStartConfig = FrozenLakeWarmStartConfig()
                           ) -> FrozenLakeWarmStartResult:
    """SFT the checkpoint in `base_dir` on the walker's FrozenLake play; save it to
    `out_dir` with `warm_start.json` (settings and result) beside the weights."""
    out_dir = Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    data = encode_trajectories(demonstrations(config, tokenizer), tokenizer.pad_token_id)
    checks: list[dict[str, float]] = []

    def reached_target(step: int, model: PreTrainedModel) -> bool:
        if step < config.first_check or step % config.check_every:
            return False
        checks.append(play(model, tokenizer, config, config.num_dev,
                           DEV_STREAM + config.seed, do_sample=True))
        logger.info("frozen-lake warm start step %d: sampled dev replies parse %.3f, "
                    "win %.3f, fall in a hole %.3f", step, checks[-1]["action_is_valid"],
                    checks[-1]["success"], falls(checks[-1]))
        return done(checks[-1])

    def done(check: dict[str, float]) -> bool:
        return (check["action_is_valid"] >= config.stop_at_valid
                and falls(check) <= config.stop_at_falls)

    start = time.perf_counter()
    with capped_threads(config.max_threads), torch.random.fork_rng(devices=[]):
        model, losses = train_sft(base_dir, data, sft_settings(config), reached_target)
        greedy = play(model, tokenizer, config, config.num_dev, DEV_STREAM + config.seed,
                      do_sample=False)
    if not checks or not done(checks[-1]):
        raise RuntimeError(f"FrozenLake warm start: sampled play did not reach "
                           f"{config.stop_at_valid:.0%} valid replies and at most "
                           f"{config.stop_at_falls:.0%} falls within {config.steps} steps; "
                           f"raise `steps`")
    tail = losses[-20:]
    result = FrozenLakeWarmStartResult(
        steps=len(losses), final_loss=sum(tail) / len(tail),
        seconds=time.perf_counter() - start, dev_sampled_valid=checks[-1]["action_is_valid"],
        dev_sampled_success=checks[-1]["success"], dev_greedy_success=greedy["success"])
    save_hf_checkpoint(model.cpu(), tokenizer, out_dir)
    (out_dir / "warm_start.json").write_text(
        json.dumps({"config": asdict(config), "result": asdict(result)}, indent=2) + "\n")
    logger.info("frozen-lake warm start done: %s", result)
    return result
