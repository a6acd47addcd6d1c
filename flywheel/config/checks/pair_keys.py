"""The top-level keys the pair pipelines read (their `keys` in config/kinds.py): kept apart
from their checks so that the kinds catalog reads them without importing the checks."""

from __future__ import annotations

from dataclasses import fields

from flywheel.config.checks.sft import SFT_KEYS
from flywheel.config.schema.preference import PreferenceKeys

PREFERENCE_KEYS = frozenset(f.name for f in fields(PreferenceKeys))
PAIR_DATA_KEYS = frozenset({"chosen_key", "rejected_key", "overlong_pairs", "equal_pairs"})
# in this process, as SFT: the ray block is refused as such
_IN_PROCESS = SFT_KEYS - {"ray"}
DPO_KEYS = _IN_PROCESS | (PREFERENCE_KEYS - {"margin_key"}) | {"sequence_length",
                                                                 "reference"}
# reward-model training reads the pairs, not the DPO loss (pipelines/reward_model/run.py)
REWARD_MODEL_KEYS = _IN_PROCESS | PAIR_DATA_KEYS | {"sequence_length", "margin_key"}
