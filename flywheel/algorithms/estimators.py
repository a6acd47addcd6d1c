"""The adv_estimator catalog: name -> `EstimatorSpec`, one line per estimator.

A spec says what the config checks and the acts-when rules need to know of an estimator
without importing torch: which rows it credits, what it needs (a critic), which of the
normalisation keys it reads, and where its function is (by import path, imported only when
advantages are computed). `adv_estimator` in the schema is a name checked against this
catalog (config/checks/keys.py); an unknown one is refused with the known names.

    rows "sample"  one advantage per sample from its score (an RLVR response, an agentic
                   episode): `fn(scores [N], group_size, norm_mean_type=, norm_std_type=)
                   -> [N]` (advantages.py's `compute_advantages` form)
    rows "token"   per-token advantages from a value model (gae: gae.py, with a critic)
    rows "turn"    one row per agentic turn (step_level_samples): the agentic rollout
                   computes them (algorithms/step_credit.py); `fn` is None

A new estimator is its function in a file here and one line in `ESTIMATORS`, or
`register_estimator(name, EstimatorSpec(...))` from a user's module (the same spec again is
a no-op, another spec under a taken name a ValueError). The docs' recipe:
docs_site/docs/extending/pipeline-kinds.md.

Importing this module imports no torch: the config (flywheel/config) reads the catalog
directly, as pure data below it (it imports only platform/).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Literal

from flywheel.platform.config.catalogs import check_import_path, import_object, register_entry

if TYPE_CHECKING:  # annotations only: the config checks read this catalog without torch
    from torch import Tensor


@dataclass(frozen=True)
class EstimatorSpec:
    rows: Literal["sample", "token", "turn"]  # what it credits (module note)
    # "package.module:function" of a "sample" estimator; None for the others
    fn: str | None = None
    needs_critic: bool = False  # gae: a critic's values
    # which norm_mean_type / norm_std_type it reads: "configurable" (the keys act), "group"
    # (always the group's mean and std: grpo refuses other values), None (it reads neither)
    normalisation: Literal["configurable", "group"] | None = None
    # gigpo: groups turns by the env state they were played from (anchor states), which a
    # user's agent behind the endpoint does not have (pipeline_type agent refuses it)
    needs_anchors: bool = False
    doc: str = ""

    def __post_init__(self) -> None:
        if (self.fn is not None) != (self.rows == "sample"):
            raise ValueError("an estimator names fn exactly when it credits rows 'sample'")
        if self.fn is not None:
            check_import_path(self.fn, "estimator")

    @property
    def per_turn(self) -> bool:
        """It credits each agentic turn on its own row (needs step_level_samples)."""
        return self.rows == "turn"


def grpo_advantages(scores: Tensor, group_size: int, *, norm_mean_type: str = "group",
                    norm_std_type: str = "group") -> Tensor:
    from flywheel.algorithms.advantages import compute_advantages  # torch maths, on use

    return compute_advantages("grpo", scores, group_size, norm_mean_type=norm_mean_type,
                              norm_std_type=norm_std_type)


def reinforce_advantages(scores: Tensor, group_size: int, *, norm_mean_type: str = "group",
                         norm_std_type: str = "group") -> Tensor:
    from flywheel.algorithms.advantages import compute_advantages

    return compute_advantages("reinforce", scores, group_size, norm_mean_type=norm_mean_type,
                              norm_std_type=norm_std_type)


_HERE = "flywheel.algorithms.estimators"
ESTIMATORS: dict[str, EstimatorSpec] = {
    "grpo": EstimatorSpec("sample", f"{_HERE}:grpo_advantages", normalisation="group",
                          doc="group mean and std (Shao et al. 2024)"),
    "reinforce": EstimatorSpec("sample", f"{_HERE}:reinforce_advantages",
                               normalisation="configurable",
                               doc="REINFORCE / REINFORCE++ / Dr. GRPO baselines"),
    "gae": EstimatorSpec("token", needs_critic=True, doc="GAE on a critic's values"),
    "step_reinforce": EstimatorSpec("turn", normalisation="configurable",
                                    doc="each turn's discounted return (step_credit.py)"),
    "gigpo": EstimatorSpec("turn", normalisation="configurable", needs_anchors=True,
                           doc="GiGPO: episode and anchor-state advantages"),
}


def register_estimator(name: str, spec: EstimatorSpec) -> None:
    """Make `name` an adv_estimator the config checks accept and the rollouts run."""
    register_entry(ESTIMATORS, "adv_estimator", name, spec, EstimatorSpec)


def estimator_spec(name: str) -> EstimatorSpec:
    """The spec registered as `name`; ValueError listing the known ones."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown adv_estimator {name!r}; known: {', '.join(ESTIMATORS)}")
    return ESTIMATORS[name]


def estimators_where(question) -> list[str]:
    """Names of the estimators for which `question(spec)` holds, in catalog order."""
    return [name for name, spec in ESTIMATORS.items() if question(spec)]


@cache
def sample_estimator(path: str):
    """The function of a "sample" estimator (imported once per process)."""
    return import_object(path)
