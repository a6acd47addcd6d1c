"""ROLL's DPO keys (interop/roll/dpo_keys.py): every DPOConfig field has a rule, and the
DPO part of ROLL's example (`examples/dpo_examples/qwen2.5-3B_dpo_megatron.yaml`: its
loss and data keys) converts to a config flywheel's loader accepts."""

from __future__ import annotations

from flywheel.interop.roll.dpo_keys import DPO_TOP, DPO_TOP_RULES, dpo_top_keys
from flywheel.pipelines.config import load_config_dict

# the top-level DPO keys of ROLL's 3B example, as written there
ROLL_DPO_TOP = {"ipo": False, "beta": 0.1, "label_smoothing": 0.0, "chosen_key": "chosen",
                "rejected_key": "rejected", "global_template": "qwen2_5",
                "is_offload_states": True}


def test_every_dpo_config_field_has_a_rule():
    assert set(DPO_TOP) <= set(DPO_TOP_RULES)


def test_the_examples_dpo_keys_convert_and_load():
    out, lines, missing = dpo_top_keys(ROLL_DPO_TOP)
    assert not missing
    assert out["actor_train"]["data_args"] == {"template": "qwen2_5",
                                               "prompt_key": "instruction"}
    assert any(line.startswith("is_offload_states: dropped") for line in lines)
    out["actor_train"]["data_args"]["file_name"] = ["pairs.jsonl"]
    cfg = load_config_dict(out)
    assert (cfg.pipeline_type, cfg.beta, cfg.chosen_key) == ("dpo", 0.1, "chosen")
    assert cfg.actor_train.data_args.prompt_key == "instruction"


def test_a_set_missing_feature_is_named():
    _, _, missing = dpo_top_keys({"use_sequence_packing": True})
    assert missing == ["use_sequence_packing: sequence packing in ROLL's DPO (ROLL refuses it)"]
