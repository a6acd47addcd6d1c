"""`max_new_tokens` defaults to `response_length` (RLVR), and the two never disagree.

Why at the data level, before interpolation: whether a key was written is only visible in
the merged YAML data, not in the dataclasses (a default and a written 128 look alike).
`fill_max_new_tokens` writes `${response_length}` into actor_infer's and validation's
generating_args where max_new_tokens is unset, so `show-config` shows the value that
runs; `check_max_new_tokens` then refuses a written max_new_tokens that differs from a
written response_length. Agentic runs read neither as a response budget: a turn's
budget is custom_envs.<tag>.max_tokens_per_step, which a written actor_infer
max_new_tokens caps (turn_budget.py); the "acts when" table refuses response_length there.

A run's saved config.yaml writes every key, so a run whose max_new_tokens differ from
response_length (possible only when response_length was left unset) would be refused when
it is loaded back (`platform run --resume RUN_DIR`): `loadable_config_data` leaves such a
response_length out, to be filled in again by its default.
"""

from __future__ import annotations

from typing import Any

from flywheel.config.kinds import kind_named
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.errors import ConfigError

BLOCKS = ("actor_infer", "validation")
REFERENCE = "${response_length}"


def fill_max_new_tokens(data: dict[str, Any]) -> list[str]:
    """Fill unset max_new_tokens with `${response_length}` where the kind samples responses
    (kinds.py); the blocks that wrote their own."""
    if not _samples_responses(data):
        return []
    written = []
    for block in BLOCKS:
        role = data.get(block)
        if block == "validation" and not isinstance(role, dict):
            continue  # no validation block: nothing validates
        if role is None:
            role = data[block] = {}
        if not isinstance(role, dict):
            continue  # conversion reports the wrong type
        gen = role.setdefault("generating_args", {})
        if not isinstance(gen, dict):
            continue
        if "max_new_tokens" in gen:
            written.append(block)
        else:
            gen["max_new_tokens"] = REFERENCE
    return written


def check_max_new_tokens(cfg: PipelineConfig, written: list[str],
                         response_written: bool) -> None:
    """A written max_new_tokens must equal a written response_length."""
    if not response_written:
        return
    for block in written:
        args = getattr(cfg, block).generating_args
        if args.max_new_tokens != cfg.response_length:
            raise ConfigError("", f"{block}.generating_args.max_new_tokens",
                              f"is {args.max_new_tokens} but response_length is "
                              f"{cfg.response_length}; it defaults to response_length: "
                              f"write one of them, or the same value")


def loadable_config_data(data: dict[str, Any]) -> dict[str, Any]:
    """A loaded config's plain data (config_to_dict) as a file that loads back to it: without
    response_length when a max_new_tokens differs from it (it was unset, hence its default,
    and written beside the differing max_new_tokens it would be refused)."""
    if not _samples_responses(data):
        return data
    lengths = [(data.get(block) or {}).get("generating_args", {}).get("max_new_tokens")
               for block in BLOCKS]
    if all(n in (None, data.get("response_length")) for n in lengths):
        return data
    return {k: v for k, v in data.items() if k != "response_length"}


def _samples_responses(data: dict[str, Any]) -> bool:
    """Whether the raw config's kind samples responses budgeted by response_length (an
    unknown name: no; the conversion reports it)."""
    kind = kind_named(data.get("pipeline_type", PipelineConfig.pipeline_type))
    return kind is not None and kind.responses
