"""The top-level keys the pair pipelines read (their `keys` in config/kinds.py): kept apart
from their checks so that the kinds catalog reads them without importing the checks."""

from __future__ import annotations

from dataclasses import fields

from flywheel.config.checks.sft import SFT_KEYS
from flywheel.config.schema.asynchrony import AsyncKeys
from flywheel.config.schema.data import BatchKeys
from flywheel.config.schema.preference import PreferenceKeys
from flywheel.config.schema.rewards import RewardKeys
from flywheel.config.schema.roles import ModelKeys, ValidationKeys
from flywheel.config.schema.run import InfraKeys, RunKeys, StepKeys

PREFERENCE_KEYS = frozenset(f.name for f in fields(PreferenceKeys))
PAIR_DATA_KEYS = frozenset({"chosen_key", "rejected_key", "overlong_pairs", "equal_pairs"})
# in this process, as SFT: the ray block is refused as such
_IN_PROCESS = SFT_KEYS - {"ray"}
DPO_KEYS = _IN_PROCESS | (PREFERENCE_KEYS - {"margin_key"}) | {"sequence_length",
                                                                 "reference"}
# reward-model training reads the pairs, not the DPO loss (pipelines/reward_model/run.py)
REWARD_MODEL_KEYS = _IN_PROCESS | PAIR_DATA_KEYS | {"sequence_length", "margin_key"}
# online DPO reads, as an allowlist (a key group added to the schema later is not read by
# it until it says so here): RLVR's groups for prompts, generation, rewards, async, weight
# sync, validation, steps and the run; its roles; the group filter's and epochs' keys of the
# algorithm group; the pair loss's knobs. Not the policy-gradient loss's, advantages', KL
# terms', critic's, the train/infer correction's, a teacher's, the envs' or agents' keys,
# nor the pair data's (its pairs come from its own groups).
_ONLINE_DPO_GROUPS = (InfraKeys, ValidationKeys, RewardKeys, AsyncKeys, StepKeys, BatchKeys,
                      ModelKeys, RunKeys)
_ONLINE_DPO_ALGORITHM = frozenset({
    "drop_uniform_groups", "group_filter_mean_range", "group_filter_min_std",
    "max_num_gen_batches", "num_return_sequences_in_group", "is_num_return_sequences_expand",
    "ppo_epochs"})
ONLINE_DPO_KEYS = (frozenset(f.name for group in _ONLINE_DPO_GROUPS for f in fields(group))
                   | {"actor_train", "actor_infer", "reference", "import_allowlist"}
                   | _ONLINE_DPO_ALGORITHM
                   | (PREFERENCE_KEYS - PAIR_DATA_KEYS - {"margin_key"}))
