"""The typed shape of a flywheel YAML file: `PipelineConfig`, every top-level key.

Key names follow ROLL's so that a ROLL config loads as written (see
`shared/seeds/002_*`): top-level run settings, then one block per role (`actor_train`,
`actor_infer`, `reference`, `critic`, `rewards`, `validation`). The keys are declared by
concern in the modules beside this one (schema/__init__.py lists them), each documented once
beside its definition; `platform show-config` prints the resolved values.

Some keys act only under a condition (a loss variant, a feature, a role, a backend or a
pipeline type); `acts_when/table.py` lists each with why, and a key written where its
condition is off is refused.

The schema only declares. Loading (YAML, `defaults:`, `${...}`, overrides, strict
conversion) lives in `config/loader.py`; cross-field rules live in `config/checks/`.
Nothing here does I/O or fills one field from another: values derived from others (the
output directory, a role's model path) are resolved at run time by the code that needs
them, so the file you wrote and the config you see stay the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass

from flywheel.algorithms.policy_loss.params import PPOClipKnobs, VariantKnobs
from flywheel.config.schema.agent import AgentKeys
from flywheel.config.schema.agentic import AgenticKeys
from flywheel.config.schema.algorithm import AlgorithmKeys
from flywheel.config.schema.asynchrony import AsyncKeys
from flywheel.config.schema.data import BatchKeys
from flywheel.config.schema.distill import DistillKeys
from flywheel.config.schema.offline_distill import OfflineDistillKeys
from flywheel.config.schema.preference import PreferenceKeys
from flywheel.config.schema.rewards import RewardKeys
from flywheel.config.schema.roles import ModelKeys, RoleKeys, ValidationKeys
from flywheel.config.schema.run import InfraKeys, RunKeys, StepKeys


# The key groups are listed last-first: a dataclass lists its bases' fields from the last
# base to the first, so the keys keep the order they are written in (and shown by
# `platform show-config`): RunKeys first, InfraKeys last.
@dataclass
class PipelineConfig(InfraKeys, AgentKeys, PreferenceKeys, AgenticKeys, ValidationKeys,
                     OfflineDistillKeys, DistillKeys, RewardKeys, RoleKeys, PPOClipKnobs,
                     AlgorithmKeys, AsyncKeys, StepKeys, BatchKeys, ModelKeys, RunKeys):
    """A whole run. ROLL's top-level keys, plus flywheel's `pipeline_type`."""


# The dataclasses PipelineConfig is composed of: their keys are top-level keys (the
# configuration reference documents them as PipelineConfig's, reference.py).
KEY_GROUPS: tuple[type, ...] = PipelineConfig.__bases__
# Every group whose keys belong to the block that composes it, PipelineConfig's and the
# loss knobs actor_train composes (declared beside the losses, not in this package).
FIELD_GROUPS: tuple[type, ...] = (*KEY_GROUPS, VariantKnobs)
