"""Agentic: `actor_infer.generating_args.max_new_tokens` caps every turn, as in ROLL.

ROLL generates an agentic turn with at most min(custom_envs.<tag>.max_tokens_per_step,
actor_infer.generating_args.max_new_tokens) new tokens (its env managers; their
generating_args are actor_infer's), so where both are set the smaller wins. flywheel's env
managers read the tag's budget alone; a written max_new_tokens is folded into it when the
config loads: it is taken out of the data (`take_turn_cap`), and once the dataclasses are
built each tag's max_tokens_per_step becomes the smaller of the two (`apply_turn_cap`), the
tags of the schema's default `custom_envs` included. `show-config` and a run's saved
config.yaml then show the budgets that run, and max_new_tokens stays at its (unread)
default. The train and the validation pool play the same tags, so both are capped.

Unset, max_new_tokens caps nothing (its RLVR default, response_length, is not read by
agentic runs).
"""

from __future__ import annotations

from typing import Any

from flywheel.config.kinds import kind_named
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.errors import ConfigError, KeyPath

MAX_NEW_TOKENS: KeyPath = ("actor_infer", "generating_args", "max_new_tokens")


def take_turn_cap(data: dict[str, Any]) -> int | None:
    """Agentic: the written max_new_tokens, taken out of the resolved `data`; else None."""
    actor_infer = data.get("actor_infer")
    gen = actor_infer.get("generating_args") if isinstance(actor_infer, dict) else None
    kind = kind_named(data.get("pipeline_type", PipelineConfig.pipeline_type))
    if kind is None or not kind.envs or not isinstance(gen, dict) or \
            "max_new_tokens" not in gen:
        return None
    most = gen.pop("max_new_tokens")
    if type(most) is not int or most < 1:
        raise ConfigError("", ".".join(MAX_NEW_TOKENS), f"expected an int >= 1 (the most "
                                                        f"tokens of a turn), got {most!r}")
    return most


def apply_turn_cap(cfg: PipelineConfig, most: int | None) -> set[KeyPath]:
    """Each tag's max_tokens_per_step lowered to `most`; the key paths that acted."""
    if most is None:
        return set()
    for env in cfg.custom_envs.values():
        env.max_tokens_per_step = min(env.max_tokens_per_step, most)
    return {MAX_NEW_TOKENS}
