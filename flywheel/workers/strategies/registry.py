"""Backends by `strategy_args.strategy_name`.

Each entry names the module and class, whether it trains or generates, and the Python
package it needs. Modules are imported only when chosen, so a machine without vLLM can
still run hf_infer; choosing a backend whose package is missing is a `BackendMissing`
error that says what to install. To add a backend: one file in this folder, one line here.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class BackendSpec:
    kind: Literal["train", "infer"]
    module: str
    cls: str
    requires: str | None  # top-level package that must be importable
    install_hint: str = ""


STRATEGIES: dict[str, BackendSpec] = {
    "hf_train": BackendSpec("train", "flywheel.workers.strategies.hf_train", "HFTrainStrategy",
                            None),
    "hf_infer": BackendSpec("infer", "flywheel.workers.strategies.hf_infer", "HFInferStrategy",
                            None),
}


class BackendMissing(RuntimeError):
    pass


def strategy_class(name: str) -> type:
    if name not in STRATEGIES:
        known = ", ".join(sorted(STRATEGIES))
        raise BackendMissing(f"strategy '{name}' is not available here (known: {known})")
    spec = STRATEGIES[name]
    if spec.requires and importlib.util.find_spec(spec.requires) is None:
        raise BackendMissing(
            f"strategy '{name}' needs the '{spec.requires}' package: {spec.install_hint}"
        )
    return getattr(importlib.import_module(spec.module), spec.cls)
