"""`data_args.reasoning_gym`: the checks that need no reasoning-gym import.

Pure and loud, like every config check: the block's shape (at least one task, positive
weights and size), the keys a generated record cannot honour (file_name, the column keys,
max_samples: they name files, columns and rows), and validation prompts that would be the
training prompts. Which task names exist, and whether a task's `config` keys and values
suit it, only reasoning-gym knows: pipelines/data/reasoning_gym_data.py refuses those when
the data loads, before any worker starts (importing reasoning-gym takes seconds, which
`platform validate` of every other config should not pay).
"""

from __future__ import annotations

import math

from flywheel.config.schema import DataArgs, PipelineConfig, ReasoningGymArgs
from flywheel.platform.config.errors import ConfigError

# set by the block for all its tasks (reasoning-gym's composite derives each task's seed)
BLOCK_KEYS = ("seed", "size")
# DataArgs keys that name file rows or columns: a generated record has fixed fields
FILE_KEYS = ("file_name", "max_samples", "prompt_key", "answer_key", "tag_key", "prompt",
             "messages", "response", "id", "tag")


def check_reasoning_gym(cfg: PipelineConfig) -> None:
    blocks = [("actor_train.data_args", cfg.actor_train.data_args)]
    if cfg.validation is not None:
        blocks.append(("validation.data_args", cfg.validation.data_args))
    for key, args in blocks:
        if args.reasoning_gym is not None:
            check_block(args, f"{key}.reasoning_gym")
    train = cfg.actor_train.data_args.reasoning_gym
    if cfg.validation is not None and train is not None and (
            cfg.validation.data_args.reasoning_gym == train):
        raise ConfigError("", "validation.data_args.reasoning_gym",
                          "generates the training prompts (same tasks, size and seed); give "
                          "validation another seed")


def check_block(args: DataArgs, key: str) -> None:
    block: ReasoningGymArgs = args.reasoning_gym
    defaults = DataArgs()
    for name in FILE_KEYS:
        if getattr(args, name) != getattr(defaults, name):
            raise ConfigError("", f"{key.rsplit('.', 1)[0]}.{name}",
                              "names data-file rows or columns, but prompts come from "
                              "reasoning_gym (its size sets how many): remove one of the two")
    if not block.tasks:
        raise ConfigError("", f"{key}.tasks", "names no task; write e.g. "
                                              "{basic_arithmetic: {}}")
    if block.size < 1:
        raise ConfigError("", f"{key}.size", f"must be >= 1, got {block.size}")
    for name, task in block.tasks.items():
        if not (math.isfinite(task.weight) and task.weight > 0):
            raise ConfigError("", f"{key}.tasks.{name}.weight",
                              f"must be a finite number > 0, got {task.weight}")
        for own in BLOCK_KEYS:
            if own in task.config:
                raise ConfigError("", f"{key}.tasks.{name}.config.{own}",
                                  f"is set for every task by {key}.{own}: remove it here")
