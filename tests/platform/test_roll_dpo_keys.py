"""ROLL's DPO keys (interop/roll/dpo_keys.py): every DPOConfig field has a rule, the
DPO part of ROLL's example (`examples/dpo_examples/qwen2.5-3B_dpo_megatron.yaml`: its
loss and data keys) converts to a config flywheel's loader accepts, and the whole file's
shape converts through the pipeline seam (interop/roll/pipelines/dpo.py) to a valid
flywheel DPO config with every key mapped or reported."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from flywheel.config.derived import data_parallel_size
from flywheel.interop.roll.dpo_keys import DPO_TOP, DPO_TOP_RULES, dpo_top_keys
from flywheel.pipelines.config import convert_roll, load_config_dict
from flywheel.pipelines.dpo.run import frozen_roles
from flywheel.pipelines.sft.trainers import on_ranks

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
                                               "prompt": "instruction"}
    assert any(line.startswith("is_offload_states: dropped") for line in lines)
    out["actor_train"]["data_args"]["file_name"] = ["pairs.jsonl"]
    cfg = load_config_dict(out)
    assert (cfg.pipeline_type, cfg.beta, cfg.chosen_key) == ("dpo", 0.1, "chosen")
    assert cfg.actor_train.data_args.prompt == "instruction"


def test_a_set_missing_feature_is_named():
    _, _, missing = dpo_top_keys({"use_sequence_packing": True})
    assert missing == ["use_sequence_packing: sequence packing in ROLL's DPO (ROLL refuses it)"]


PIPELINES = Path(__file__).parents[1] / "data" / "configs" / "roll" / "pipelines"


def leaves(node, path=()):
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, (*path, key))
        else:
            yield (*path, key)


def test_rolls_dpo_file_converts_to_dpo_on_deepspeed_ranks_every_key_accounted():
    """The shape of ROLL's 3B DPO example: flywheel's dpo, the megatron_train actor on
    deepspeed_train ranks, the reference reported key by key (only its model would act),
    ROLL's fixed prompt column, and no default written for a key ROLL's DPO never reads."""
    source = PIPELINES / "dpo_megatron.yaml"
    conversion = convert_roll(source)
    assert (conversion.roll_pipeline, conversion.pipeline_type) == ("dpo", "dpo")
    assert not conversion.missing and not conversion.typos and not conversion.needs_pipeline
    data = conversion.data
    assert data["actor_train"]["strategy_args"]["strategy_name"] == "deepspeed_train"
    assert data["actor_train"]["data_args"]["prompt"] == "instruction"
    assert "reference" not in data  # no model of its own: the run's pretrain, frozen
    for key in ("val_batch_size", "prompt_length"):
        assert key not in data, key
    assert "response" not in data["actor_train"]["data_args"]
    said = "\n".join(conversion.mapped + conversion.dropped + conversion.ignored)
    for path in leaves(yaml.safe_load(source.read_text())):
        node = data
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        assert node is not None or ".".join(path) in said, path
    for key in ("strategy_args.strategy_name", "device_mapping", "model_args.dtype"):
        assert any(d.startswith(f"reference.{key}: ") for d in conversion.dropped), key
    cfg = load_config_dict(data)
    assert on_ranks(cfg) and data_parallel_size(cfg.actor_train) == 8
    assert frozen_roles(cfg, "m") == {"reference": "m"}  # started beside actor_train
    assert frozen_roles(dataclasses.replace(cfg, dpo_loss_type="simpo"), "m") == {}
