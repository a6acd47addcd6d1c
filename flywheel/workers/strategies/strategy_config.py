"""Checking a backend's `strategy_args.strategy_config`.

Each backend declares its keys as defaults and its refusals in a light module (no torch,
no backend package: `<backend>_options.py`), which `platform validate` runs through the
backend catalog (registry.py `config_check`) and the backend runs again when it starts.
An unknown key is an error that names the key path, the backend, the keys it knows and
the closest match, instead of a typo that silently does nothing. vllm's and sglang's keys
are their engines' own fields, known only where the package is installed: those two
check unknown keys at start.

A backend declares its keys as a dict of defaults (`None` = "unset: the backend decides")
and gets back one merged dict; keys that flywheel sets itself (the model, its dtype, the
seed) are refused with the field to change instead.
"""

from __future__ import annotations

from typing import Any

from flywheel.platform.config.errors import StrategyConfigError, did_you_mean

KEY_PATH = "strategy_args.strategy_config"


def refuse_owned(backend: str, given: dict[str, Any], owned: dict[str, str]) -> None:
    """Refuse the keys flywheel sets itself (the model, its dtype, the seed), naming the
    field to change instead."""
    for key in given:
        if key in owned:
            raise StrategyConfigError("", f"{KEY_PATH}.{key}",
                                      f"{backend} takes it from {owned[key]}; set it there")


def checked_config(backend: str, given: dict[str, Any], defaults: dict[str, Any],
                   owned: dict[str, str] | None = None, known: str | None = None
                   ) -> dict[str, Any]:
    """`defaults` updated with `given`; unknown or flywheel-owned keys raise. `known`
    describes the accepted keys when listing them all would not help."""
    refuse_owned(backend, given, owned or {})
    for key in given:
        if key not in defaults:
            raise StrategyConfigError(
                "", f"{KEY_PATH}.{key}",
                f"unknown key for {backend}{did_you_mean(key, defaults)}; "
                f"known keys: {known or ', '.join(sorted(defaults))}")
    return {**defaults, **given}


def require(condition: bool, key: str, message: str,
            error: type[StrategyConfigError] = StrategyConfigError) -> None:
    """Raise `error` about `key` unless `condition` holds."""
    if not condition:
        raise error("", f"{KEY_PATH}.{key}", message)
