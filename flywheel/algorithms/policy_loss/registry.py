"""The pg_variant catalog: name -> `LossSpec`, one line per variant.

A spec names the variant's function by import path: the config checks read this catalog to
validate `actor_train.pg_variant` without importing torch, and the function is imported only
when a loss is computed. The trainer resolves the function where the variant was registered
(the driver) and carries it to the training workers (workers/actor_loss.py), so a variant
registered with `register_policy_loss` trains in every process.

A variant with knobs of its own names their dataclass in `settings` ("package.module:Class",
fields with defaults, `__post_init__` raising ValueError for a bad value): the config gives
them in `actor_train.pg_variant_args`, checked when it loads, and the variant receives that
object as its `params` instead of `PolicyLossParams`. flywheel's variants declare none: their
knobs are ROLL's keys, fields of `PolicyLossParams`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from flywheel.platform.config.catalogs import IMPORT_PATH, import_object

if TYPE_CHECKING:
    from flywheel.algorithms.policy_loss.params import PolicyLossFn


@dataclass(frozen=True)
class LossSpec:
    fn: str  # "package.module:function", a PolicyLossFn (params.py)
    settings: str | None = None  # "package.module:Class", the dataclass of its params


POLICY_LOSSES: dict[str, LossSpec] = {
    "vanilla": LossSpec("flywheel.algorithms.policy_loss.vanilla:vanilla_loss"),
    "ppo": LossSpec("flywheel.algorithms.policy_loss.ppo:ppo_loss"),
    "gspo": LossSpec("flywheel.algorithms.policy_loss.gspo:gspo_loss"),
    "tis": LossSpec("flywheel.algorithms.policy_loss.tis:tis_loss"),
    "topr": LossSpec("flywheel.algorithms.policy_loss.topr:topr_loss"),
    "topr_seq": LossSpec("flywheel.algorithms.policy_loss.topr:topr_seq_loss"),
    "cispo": LossSpec("flywheel.algorithms.policy_loss.cispo:cispo_loss"),
    "kimi15": LossSpec("flywheel.algorithms.policy_loss.kimi15:kimi15_loss"),
    "kimi15_seq": LossSpec("flywheel.algorithms.policy_loss.kimi15:kimi15_seq_loss"),
}


def register_policy_loss(name: str, spec: LossSpec) -> None:
    """Make `name` a `pg_variant` the config checks accept and the trainer runs. The same
    spec again is a no-op; another spec under a taken name is a ValueError."""
    if not (isinstance(spec, LossSpec) and _is_import_path(spec.fn)
            and (spec.settings is None or _is_import_path(spec.settings))):
        raise ValueError(f"pg_variant {name!r}: expected a LossSpec('package.module:function'), "
                         f"got {spec!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a pg_variant name must be a non-empty string, got {name!r}")
    if POLICY_LOSSES.get(name, spec) != spec:
        raise ValueError(f"pg_variant {name!r} is already registered as {POLICY_LOSSES[name]}")
    POLICY_LOSSES[name] = spec


def _is_import_path(path: str) -> bool:
    return isinstance(path, str) and IMPORT_PATH.fullmatch(path) is not None


def policy_loss_spec(pg_variant: str) -> LossSpec:
    """The spec registered as `pg_variant`; ValueError listing the known ones."""
    if pg_variant not in POLICY_LOSSES:
        raise ValueError(
            f"unknown pg_variant {pg_variant!r}; known variants: {sorted(POLICY_LOSSES)}"
        )
    return POLICY_LOSSES[pg_variant]


def get_policy_loss(pg_variant: str) -> PolicyLossFn:
    """The loss function registered as `pg_variant`; ValueError listing the known ones."""
    return load_policy_loss(policy_loss_spec(pg_variant).fn)


@cache
def load_policy_loss(path: str) -> PolicyLossFn:
    """The function a "package.module:function" path names (imported once, by platform's
    one checked import-path loader)."""
    return import_object(path)
