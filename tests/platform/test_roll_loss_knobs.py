"""ROLL's RLVR loss knobs through `platform convert --from roll`: the masks and the warmup
ratio carry over under their own names; importance_sampling, the TOPR coefficients and the
train_infer_correction block become flywheel's pg_variant and infer_is_correction
(interop/roll/fit/loss.py), or are refused with what flywheel lacks. Config only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from flywheel.pipelines.config import convert_roll, load_config_dict

MECHANICS = Path(__file__).parents[1] / "data" / "configs" / "roll" / "mechanics"
ROLL_RLVR = MECHANICS / "roll_rlvr.yaml"
FROZEN_LAKE = MECHANICS / "agentic" / "frozen_lake.yaml"


def convert(tmp_path: Path, extra: dict, base: Path = ROLL_RLVR):
    """The base ROLL file with `extra` merged in (one level deep), converted from a copy of
    the fixtures (so its `defaults:` fragments resolve)."""
    data = yaml.safe_load(base.read_text())
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    copy = tmp_path / "mechanics"
    if not copy.exists():
        shutil.copytree(MECHANICS, copy)
    path = copy / base.relative_to(MECHANICS)
    path.write_text(yaml.safe_dump(data))
    return convert_roll(path)


def converted(tmp_path: Path, extra: dict, base: Path = ROLL_RLVR):
    conversion = convert(tmp_path, extra, base)
    assert conversion.missing == []
    return conversion, load_config_dict(conversion.data)


def test_masks_convert_under_their_own_names(tmp_path):
    _, cfg = converted(tmp_path, {"max_len_mask": True, "difficulty_mask": True,
                                  "difficulty_low_threshold": 0.1,
                                  "difficulty_high_threshold": 0.95,
                                  "error_max_len_clip": False})
    assert (cfg.max_len_mask, cfg.difficulty_mask) == (True, True)
    assert (cfg.difficulty_low_threshold, cfg.difficulty_high_threshold) == (0.1, 0.95)


def test_warmup_ratio_converts_and_a_written_warmup_steps_wins(tmp_path):
    train = yaml.safe_load(ROLL_RLVR.read_text())["actor_train"]
    _, cfg = converted(tmp_path, {"actor_train": {
        **train, "training_args": {**train["training_args"], "warmup_ratio": 0.1}}})
    assert cfg.actor_train.training_args.warmup_ratio == 0.1
    conversion, cfg = converted(tmp_path, {"actor_train": {**train, "training_args": {
        **train["training_args"], "warmup_ratio": 0.1, "warmup_steps": 5}}})
    assert cfg.actor_train.training_args.warmup_steps == 5
    assert any(d.startswith("actor_train.training_args.warmup_ratio: not read here")
               for d in conversion.dropped)


def test_importance_sampling_seq_is_gspo(tmp_path):
    conversion, cfg = converted(tmp_path, {"importance_sampling": "seq"})
    assert cfg.actor_train.pg_variant == "gspo"
    assert any(m.startswith("importance_sampling: seq -> actor_train.pg_variant: gspo")
               for m in conversion.mapped)
    _, cfg = converted(tmp_path, {"importance_sampling": "token"})
    assert cfg.actor_train.pg_variant == "ppo"


def test_importance_sampling_outside_roll_s_ppo_worker(tmp_path):
    train = yaml.safe_load(ROLL_RLVR.read_text())["actor_train"]
    conversion, cfg = converted(tmp_path, {"importance_sampling": "seq", "actor_train": {
        **train, "worker_cls": "roll.pipeline.rlvr.actor_pg_worker.ActorPGWorker",
        "pg_variant": "tis"}})
    assert cfg.actor_train.pg_variant == "tis"  # ROLL's pg worker never reads it
    assert any("read by ROLL's RLVR ActorWorker only" in d for d in conversion.dropped)
    refused = convert(tmp_path, {"importance_sampling": "seq",
                                 "actor_train": {**train, "pg_variant": "cispo"}})
    assert refused.missing == ["sequence-level importance sampling with pg_variant cispo "
                               "(importance_sampling = 'seq')"]


def test_topr_coefficients_without_the_ppo_loss_are_topr(tmp_path):
    _, cfg = converted(tmp_path, {"rl_loss_coef": 0.0, "postive_loss_coef": 0.5,
                                  "use_topr_neg_loss_coef": 0.8})
    train = cfg.actor_train
    assert (train.pg_variant, train.topr_positive_weight, train.topr_negative_weight) == (
        "topr", 0.5, 0.8)


def test_topr_coefficients_beside_the_ppo_loss_are_refused(tmp_path):
    conversion = convert(tmp_path, {"use_topr_neg_loss_coef": 0.8})
    assert conversion.missing[0].startswith("TOPR terms added to the PPO loss")
    assert convert(tmp_path, {"rl_loss_coef": 0.5}).missing == [
        "an RL loss coefficient (rl_loss_coef = 0.5)"]


@pytest.mark.parametrize("block, expected", [
    ({"is_weight": {"enabled": True, "upper_bound": 2.0}},
     {"infer_is_correction": "token-truncate", "infer_is_upper_bound": 2.0}),
    ({"is_weight": {"enabled": True, "weight_type": "sequence", "upper_bound": 3.0}},
     {"infer_is_correction": "seq-truncate", "infer_is_upper_bound": 3.0}),
    ({"is_weight": {"enabled": True, "upper_bound": None},
      "filters": [{"enabled": True, "ratio_low": 0.5, "ratio_high": 2.0}]},
     {"infer_is_correction": "token-mask", "infer_is_lower_bound": 0.5,
      "infer_is_upper_bound": 2.0}),
    ({"is_weight": {"enabled": True, "weight_type": "sequence", "upper_bound": 5.0},
      "filters": [{"enabled": True, "agg_type": "sequence"}, {"enabled": False}]},
     {"infer_is_correction": "seq-mask", "infer_is_lower_bound": 0.8,
      "infer_is_upper_bound": 1.2}),
    ({"is_weight": {"enabled": False}}, {"infer_is_correction": "none"}),
    # ROLL's pg_var_is_correct FrozenLake file: a segment filter on ratio and difference,
    # without the IS weight
    ({"filters": [{"enabled": True, "agg_type": "segment", "diff_enabled": True,
                   "ratio_low": 0.8, "ratio_high": 1.05, "diff_low": -0.1, "diff_high": 0.1}]},
     {"infer_is_correction": "none", "infer_filter_level": "segment",
      "infer_filter_ratio_band": [0.8, 1.05], "infer_filter_diff_band": [-0.1, 0.1]}),
    ({"is_weight": {"enabled": True}, "filters": [{"enabled": True, "diff_enabled": True,
                                                   "ratio_enabled": False}]},
     {"infer_is_correction": "token-truncate", "infer_is_upper_bound": 1.2,
      "infer_filter_level": "token", "infer_filter_ratio_band": None,
      "infer_filter_diff_band": [-0.2, 0.2]}),
    ({"is_weight": {"enabled": True, "upper_bound": 1.1}, "filters": [{"enabled": True}]},
     {"infer_is_correction": "token-truncate", "infer_is_upper_bound": 1.1,
      "infer_filter_level": "token", "infer_filter_ratio_band": [0.8, 1.2]}),
    ({"is_weight": {"enabled": True, "weight_type": "sequence"},
      "filters": [{"enabled": True, "agg_type": "geometric"}]},
     {"infer_is_correction": "seq-truncate", "infer_filter_level": "geometric"}),
])
def test_train_infer_correction_maps_onto_infer_is_correction(tmp_path, block, expected):
    conversion, cfg = converted(tmp_path, {"train_infer_correction": block})
    for key, value in expected.items():
        assert getattr(cfg, key) == value, key
    assert any(m.startswith("train_infer_correction -> ") for m in conversion.mapped)


@pytest.mark.parametrize("block, lacking", [
    ({"is_weight": {"enabled": True, "weight_type": "geometric"}}, "a geometric IS weight"),
    ({"filters": [{"enabled": True}, {"enabled": True, "diff_enabled": True}]},
     "several train/infer filters"),
    ({"is_weight": {"enabled": True, "upper_bound": None},
      "filters": [{"enabled": True, "agg_type": "segment"}]}, "an untruncated IS weight"),
    ({"is_weight": {"enabled": True, "detach": False}}, "an IS weight with a gradient"),
])
def test_train_infer_correction_flywheel_lacks_is_refused(tmp_path, block, lacking):
    conversion = convert(tmp_path, {"train_infer_correction": block})
    assert len(conversion.missing) == 1 and conversion.missing[0].startswith(lacking)


def test_train_infer_correction_converts_in_agentic_files_too(tmp_path):
    _, cfg = converted(tmp_path, {"train_infer_correction": {
        "is_weight": {"enabled": True, "upper_bound": 2.0}}, "adv_estimator": "grpo"},
        base=FROZEN_LAKE)
    assert cfg.pipeline_type == "agentic"
    assert (cfg.infer_is_correction, cfg.infer_is_upper_bound) == ("token-truncate", 2.0)


def test_validation_lengths_convert_when_they_give_trainings_budget(tmp_path):
    """ROLL's val_prompt_length/val_sequence_length only set validation's max_new_tokens
    (their difference); training's budget converts, another is refused."""
    base = yaml.safe_load(ROLL_RLVR.read_text())
    train = int(base.get("response_length") or base["sequence_length"] - base["prompt_length"])
    prompt = 4 * train
    conversion, _ = converted(tmp_path, {"val_prompt_length": prompt,
                                         "val_sequence_length": prompt + train})
    assert any(line.startswith("val_prompt_length") for line in conversion.dropped)
    other = convert(tmp_path, {"val_prompt_length": prompt,
                               "val_sequence_length": prompt + train + 1})
    assert [m for m in other.missing if "validation response budget" in m]
    alone = convert(tmp_path, {"val_prompt_length": prompt})
    assert [m for m in alone.missing if "without val_sequence_length" in m]


def test_non_numeric_topr_coefficients_name_the_values(tmp_path):
    """ROLL's docs_examples/example_topr.yaml writes placeholders (`x_2 # x_2 > 0.0`), which
    ROLL's dacite loader refuses for its float fields: no meaning to convert."""
    conversion = convert(tmp_path, {"rl_loss_coef": 0.0, "use_topr_neg_loss_coef": "x_2"})
    assert [m for m in conversion.missing if "use_topr_neg_loss_coef = 'x_2'" in m
            and "placeholders for a number to write" in m]


def test_tag_to_template_converts_into_actor_train_data_args(tmp_path):
    conversion, cfg = converted(tmp_path, {"tag_to_template": {"math_rule": "qwen2_5"}})
    assert cfg.actor_train.data_args.tag_to_template == {"math_rule": "qwen2_5"}
    unknown = convert(tmp_path, {"tag_to_template": {"math_rule": "qwen9"}})
    assert unknown.missing  # flywheel has no template qwen9: the file does not validate
