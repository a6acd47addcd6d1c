"""The "acts when" table (config/acts_when/table.py): a key the user writes where it
would do nothing is refused with one line naming the key and the condition it needs; the
same key with its condition on loads; a key the user did not write is never refused.
Config only: no Ray, no model."""

from __future__ import annotations

from dataclasses import fields

import pytest
import yaml

from flywheel.algorithms.policy_loss.params import PolicyLossParams
from flywheel.algorithms.policy_loss.registry import POLICY_LOSSES
from flywheel.config import config_to_dict
from flywheel.config.acts_when import table as acts_when_table
from flywheel.config.acts_when.check import matches
from flywheel.config.acts_when.table import LOSS_VARIANT_KEYS
from flywheel.pipelines.config import load_config, load_config_dict
from flywheel.platform.config.errors import ConfigError

GAE = {"adv_estimator": "gae", "critic": {}}
KL = {"use_kl_loss": True, "kl_loss_coef": 0.1, "reference": {}}
AGENTIC = {"pipeline_type": "agentic", "rollout_batch_size": 8,
           "train_env_manager": {"num_env_groups": 2, "group_size": 4},
           "actor_train": {"training_args": {"per_device_train_batch_size": 4}}}
SFT = {"pipeline_type": "sft", "actor_train": {"data_args": {"file_name": ["t.jsonl"]}}}
LORA = {"actor_train": {"model_args": {"lora_target": "q_proj,v_proj"}}}
JUDGE = {"reward_pretrain": "builtin://tiny-qwen2",
         "rewards": {"r": {"reward_type": "llm_judge",
                           "strategy_args": {"strategy_name": "hf_infer"}}}}


def variant(name: str, **train) -> dict:
    return {"actor_train": {"pg_variant": name, **train}}


def merged(*parts: dict) -> dict:
    """Deep merge of config fragments, later ones winning."""
    out: dict = {}
    for part in parts:
        _merge(out, part)
    return out


def _merge(into: dict, part: dict) -> None:
    for key, value in part.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value if not isinstance(value, dict) else merged(value)


def backends(infer: str, train: str) -> dict:
    return {"actor_infer": {"strategy_args": {"strategy_name": infer}},
            "actor_train": {"strategy_args": {"strategy_name": train}}}


# (the key as the error names it, a config writing it where it is off, a fragment turning
# its condition on, a phrase the message must hold)
CASES = [
    ("pg_clip_high", merged(variant("cispo"), {"pg_clip_high": 0.28}),
     merged(variant("ppo"), {"use_pg_clip_range": True}),
     "with cispo write actor_train.cispo_epsilon_high"),
    ("pg_clip_high", {"pg_clip_high": 0.3}, {"use_pg_clip_range": True},
     "with use_pg_clip_range: true"),
    ("pg_clip_low", {"pg_clip_low": 0.2}, {"use_pg_clip_range": True}, "use_pg_clip_range"),
    ("pg_clip", {"use_pg_clip_range": True, "pg_clip": 0.2}, {"use_pg_clip_range": False},
     "use_pg_clip_range: false"),
    ("use_pg_clip_range", merged(variant("tis"), {"use_pg_clip_range": False}),
     variant("ppo"), "with pg_variant ppo"),
    ("dual_clip_loss", merged(variant("vanilla"), {"dual_clip_loss": True}), variant("ppo"),
     "set actor_train.pg_variant: ppo"),
    ("dual_clip_c", {"dual_clip_c": 3.0}, {"dual_clip_loss": True}, "dual_clip_loss: true"),
    # gspo reads ppo's clip keys (its sequence ratio goes through ppo's clip)
    ("pg_clip", merged(variant("tis"), {"pg_clip": 0.1}), variant("gspo"),
     "with pg_variant ppo or gspo"),
    ("dual_clip_loss", merged(variant("cispo"), {"dual_clip_loss": True}), variant("gspo"),
     "set actor_train.pg_variant: ppo or gspo"),
    # RLVR loss masks (issue 25 item 4)
    ("max_len_mask", merged(AGENTIC, {"max_len_mask": True}), None,
     "ROLL's agentic max_len_mask masks nothing either"),
    ("difficulty_mask", merged(AGENTIC, {"difficulty_mask": True}), None,
     "not masked by difficulty"),
    ("difficulty_mask", {"difficulty_mask": True}, {"num_return_sequences_in_group": 4},
     "with num_return_sequences_in_group > 1"),
    ("difficulty_high_threshold", {"difficulty_high_threshold": 0.9},
     {"difficulty_mask": True, "num_return_sequences_in_group": 4},
     "with difficulty_mask: true"),
    ("actor_train.training_args.warmup_ratio",
     {"actor_train": {"training_args": {"warmup_ratio": 0.1, "warmup_steps": 3}}},
     {"actor_train": {"training_args": {"warmup_steps": 0}}}, "warmup_steps is written"),
    ("actor_train.tis_upper_bound", variant("ppo", tis_upper_bound=1.0), variant("tis"),
     "with pg_variant tis"),
    ("actor_train.topr_negative_weight", variant("cispo", topr_negative_weight=0.5),
     variant("topr"), "with pg_variant topr"),
    ("actor_train.cispo_epsilon_high", variant("ppo", cispo_epsilon_high=0.2),
     variant("cispo"), "with ppo write use_pg_clip_range: true with pg_clip_high"),
    ("actor_train.kimi15_tau", variant("tis", kimi15_tau=0.1), variant("kimi15"),
     "with pg_variant kimi15"),
    ("lambd", {"lambd": 0.95}, GAE, "with adv_estimator gae"),
    ("value_clip", {"value_clip": 0.2}, GAE, "with adv_estimator gae"),
    ("critic", {"critic": {}}, {"adv_estimator": "gae"}, "with adv_estimator gae"),
    ("gamma", {"gamma": 0.99}, GAE, "gae, agentic"),
    ("kl_penalty", {"kl_penalty": "k3"}, {"init_kl_coef": 0.1, "reference": {}},
     "with init_kl_coef > 0"),
    ("target_kl", {"target_kl": 0.1}, {"init_kl_coef": 0.1, "reference": {}},
     "with init_kl_coef > 0"),
    ("kl_horizon", {"init_kl_coef": 0.1, "reference": {}, "kl_horizon": 100},
     {"target_kl": 0.1}, "with target_kl set"),
    ("kl_loss_coef", {"kl_loss_coef": 0.1}, KL, "with use_kl_loss: true"),
    ("kl_loss_type", {"kl_loss_type": "k1"}, KL, "with use_kl_loss: true"),
    ("reference", {"reference": {}}, {"use_kl_loss": True, "kl_loss_coef": 0.1},
     "use_kl_loss: true or init_kl_coef > 0"),
    ("adv_estimator", merged(AGENTIC, {"turn_level_returns": True, "adv_estimator": "grpo"}),
     {"turn_level_returns": False}, "turn_level_returns"),
    ("reward_clip", merged(AGENTIC, {"step_level_samples": True, "reward_clip": 1.0}),
     {"step_level_samples": False}, "step_level_samples"),
    ("norm_mean_type", {"norm_mean_type": "group"}, {"adv_estimator": "reinforce"},
     "with adv_estimator reinforce"),
    ("norm_std_type", {"adv_estimator": "gae", "critic": {}, "norm_std_type": "batch"},
     {"adv_estimator": "reinforce", "critic": None}, "with adv_estimator reinforce"),
    ("infer_is_upper_bound", {"infer_is_upper_bound": 2.0},
     {"infer_is_correction": "token-truncate"}, "infer_is_correction other than none"),
    ("infer_is_lower_bound", {"infer_is_correction": "seq-truncate",
                              "infer_is_lower_bound": 0.5},
     {"infer_is_correction": "seq-mask"}, "token-mask or seq-mask"),
    ("validation", {"validation": {"data_args": {"file_name": ["v.jsonl"]}}},
     {"eval_steps": 5}, "with eval_steps > 0"),
    ("partial_rollout_segment_tokens", {"partial_rollout_segment_tokens": 2},
     {"partial_rollout": True, "async_generation_ratio": 1,
      "actor_infer": {"device_mapping": [1]}}, "with partial_rollout: true"),
    ("max_num_gen_batches", {"max_num_gen_batches": 4}, {"drop_uniform_groups": True},
     "with a group filter"),
    ("tracking.mlflow", {"tracking": {"backends": ["mlflow"], "mlflow": False}},
     {"tracking": {"backends": None}}, "tracking.backends lists mlflow"),
    ("track_with", {"track_with": "jsonl", "tracking": {"backends": ["jsonl"]}},
     {"tracking": {"backends": None}}, "tracking.backends wins"),
    ("tracking.mlflow_uri", {"tracking": {"backends": ["jsonl"], "mlflow_uri": "file:/x"}},
     {"tracking": {"backends": ["mlflow"]}}, "mlflow is a tracking backend"),
    ("actor_train.generating_args", {"actor_train": {"generating_args": {"temperature": 1}}},
     None, "on actor_infer and validation"),
    ("reference.generating_args", merged(KL, {"reference": {"generating_args": {}}}),
     None, "on actor_infer and validation"),
    ("critic.generating_args", merged(GAE, {"critic": {"generating_args": {}}}),
     None, "on actor_infer and validation"),
    ("actor_infer.training_args", {"actor_infer": {"training_args": {"learning_rate": 1}}},
     None, "on actor_train and critic"),
    ("reference.training_args", merged(KL, {"reference": {"training_args": {}}}),
     None, "on actor_train and critic"),
    ("rewards.math_rule.device_mapping", {"rewards": {"math_rule": {"device_mapping": [0]}}},
     None, "on a local llm_judge or a reward_model reward"),
    ("rewards.math_rule.num_threads", {"rewards": {"math_rule": {"num_threads": 2}}},
     None, "on a local llm_judge or a reward_model reward"),
    ("actor_infer.model_args.attn_implementation",
     {"actor_infer": {"model_args": {"attn_implementation": "sdpa"},
                      "strategy_args": {"strategy_name": "vllm"}}},
     {"actor_infer": {"strategy_args": {"strategy_name": "hf_infer"}}},
     "on hf_train, deepspeed_train and hf_infer"),
    ("critic.model_args.attn_implementation",
     merged(GAE, {"critic": {"model_args": {"attn_implementation": "sdpa"}}}), None,
     "the critic's value model"),
    ("actor_train.model_args.disable_gradient_checkpointing",
     {"actor_train": {"model_args": {"disable_gradient_checkpointing": False},
                      "strategy_args": {"strategy_name": "megatron_train"}}},
     {"actor_train": {"strategy_args": {"strategy_name": "hf_train"}}},
     "recompute_granularity"),
    ("actor_infer.model_args.disable_gradient_checkpointing",
     {"actor_infer": {"model_args": {"disable_gradient_checkpointing": True}}}, None,
     "acts only on actor_train"),
    ("actor_train.training_args.dynamic_batching",
     {"actor_train": {"training_args": {"dynamic_batching": True},
                      "strategy_args": {"strategy_name": "megatron_train"}}},
     {"actor_train": {"strategy_args": {"strategy_name": "hf_train"}}},
     "megatron_train cuts micro-batches of per_device_train_batch_size rows"),
    ("actor_train.training_args.max_tokens_per_micro_batch",
     {"actor_train": {"training_args": {"max_tokens_per_micro_batch": 512}}},
     {"actor_train": {"training_args": {"dynamic_batching": True}}},
     "with training_args.dynamic_batching: true"),
    ("actor_train.training_args.sequence_packing",
     {"actor_train": {"training_args": {"sequence_packing": True},
                      "strategy_args": {"strategy_name": "megatron_train"}}},
     {"actor_train": {"strategy_args": {"strategy_name": "hf_train"}}},
     "megatron_train runs padded micro-batches of one shape"),
    ("critic.training_args.max_packed_sequence_length",
     merged(GAE, {"critic": {"training_args": {"max_packed_sequence_length": 512}}}),
     {"critic": {"training_args": {"sequence_packing": True}}},
     "with training_args.sequence_packing: true"),
    ("reward_pretrain", merged(AGENTIC, {"reward_pretrain": "x"}), None,
     "with pipeline_type rlvr"),
    ("rewards", merged(AGENTIC, {"rewards": {"math_rule": {}}}), None,
     "scored by their envs"),
    ("prompt_length", merged(AGENTIC, {"prompt_length": 64}), None,
     "rlvr, sft, evaluate, dpo, online_dpo, reward_model or distill"),
    ("response_length", merged(AGENTIC, {"response_length": 64}), None,
     "custom_envs.<tag>.max_tokens_per_step"),
    ("validation.data_args", merged(AGENTIC, {"eval_steps": 2, "validation": {
        "data_args": {"file_name": ["v.jsonl"]}}}), None, "val_env_manager"),
    ("custom_envs", {"custom_envs": {"FrozenLake": {"env_type": "frozen_lake"}}},
     AGENTIC, "with pipeline_type agentic"),
    ("train_env_manager", {"train_env_manager": {"num_env_groups": 2, "group_size": 4}},
     {"pipeline_type": "agentic", "rollout_batch_size": 8}, "set pipeline_type: agentic"),
    ("ray", merged(SFT, {"ray": {"num_cpus": 2}}), {"pipeline_type": "rlvr"},
     "SFT runs in this process, without Ray"),
    ("actor_train.device_mapping", merged(SFT, {"actor_train": {"device_mapping": [0]}}),
     {"pipeline_type": "rlvr"}, "one device"),
    # SFT on deepspeed_train trains as Ray ranks: there ray and devices act
    ("timeouts", merged(SFT, {"timeouts": {"call_s": 60}}),
     {"actor_train": {"strategy_args": {"strategy_name": "deepspeed_train"}}},
     "or train on deepspeed_train"),
    ("actor_train.data_args.query", {"actor_train": {"data_args": {"query": "input"}}},
     {"pipeline_type": "sft", "actor_train": {"data_args": {"file_name": ["x.jsonl"]}}},
     "with pipeline_type sft"),
    ("actor_train.training_args.num_train_epochs",
     {"actor_train": {"training_args": {"num_train_epochs": 1}}},
     {"pipeline_type": "sft", "actor_train": {"data_args": {"file_name": ["x.jsonl"]}}},
     "RL runs count train steps"),
    ("actor_train.pg_variant", merged(SFT, variant("ppo")), {"pipeline_type": "rlvr"},
     "SFT trains with cross-entropy"),
    # LoRA (schema.ModelArgs lora_*): on actor_train, on hf_train, with lora_target
    ("actor_train.model_args.lora_rank", {"actor_train": {"model_args": {"lora_rank": 16}}},
     LORA, "with actor_train.model_args.lora_target set"),
    ("actor_train.model_args.adapter_name_or_path",
     {"actor_train": {"model_args": {"adapter_name_or_path": "adapter/"}}}, LORA,
     "write lora_target to turn LoRA on"),
    ("actor_train.model_args.lora_target",
     merged(LORA, {"actor_train": {"strategy_args": {"strategy_name": "megatron_train"}}}),
     {"actor_train": {"strategy_args": {"strategy_name": "deepspeed_train"}}},
     "megatron_train trains no LoRA adapter yet: use deepspeed_train"),
    ("actor_infer.model_args.lora_target",
     merged(LORA, {"actor_infer": {"model_args": {"lora_target": "q_proj,v_proj"}}}), None,
     "with the adapter merged in"),
    ("reference.model_args.lora_rank",
     merged(KL, LORA, {"reference": {"model_args": {"lora_rank": 8}}}), None,
     "actor_train's model with the adapter disabled"),
    ("reference.device_mapping", merged(KL, LORA, {"reference": {"device_mapping": [0]}}),
     {"reference": {"model_args": {"model_name_or_path": "builtin://tiny-qwen2"}}},
     "no reference worker"),
    # issue 29: images reach hf_infer's and hf_train's models only
    ("actor_train.data_args.image_max_pixels",
     merged(backends("sglang", "hf_train"), {"actor_train": {"data_args": {
         "image_max_pixels": 4096}}}),
     backends("hf_infer", "hf_train"), "sglang, megatron_train"),
    ("validation.data_args.bad_images",
     merged(backends("hf_infer", "megatron_train"), {
         "eval_steps": 5, "validation": {"data_args": {"bad_images": "skip"}}}),
     backends("hf_infer", "hf_train"), "switch backends"),
    ("actor_train.data_args.image_folder",
     merged(backends("hf_infer", "hf_train"), GAE, {"actor_train": {"data_args": {
         "image_folder": "imgs"}}}), None, "and no critic"),
    ("actor_train.model_args.freeze_module_prefix",
     merged(backends("hf_infer", "megatron_train"), {"actor_train": {"model_args": {
         "freeze_module_prefix": "vision_model"}}}),
     backends("hf_infer", "deepspeed_train"), "only a full fine-tune on hf_train or "
     "deepspeed_train freezes modules"),
    ("reference.model_args.freeze_module_prefix",
     merged(KL, {"reference": {"model_args": {"freeze_module_prefix": "vision_model"}}}),
     None, "this role never trains"),
]
IDS = [f"{key}-{i}" for i, (key, *_) in enumerate(CASES)]


def error_for(data: dict, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config_dict(data, source="f.yaml", **kwargs)
    return info.value


@pytest.mark.parametrize("key, off, on, phrase", CASES, ids=IDS)
def test_a_written_key_that_would_do_nothing_is_refused(key, off, on, phrase):
    error = error_for(off)
    assert error.key_path == key, str(error)
    assert str(error).startswith(f"f.yaml: {key}: acts only ")
    assert phrase in error.message and "\n" not in str(error)
    if on is not None:  # the same key with its condition on acts, and loads
        load_config_dict(merged(off, on))


@pytest.mark.parametrize("key, off, on, phrase", CASES, ids=IDS)
def test_each_refusal_comes_from_its_table_row(monkeypatch, key, off, on, phrase):
    """Without the rows of that key (and of the blocks above it), the config loads: the
    refusal is the table's, not some other rule's."""
    path = tuple(key.split("."))
    kept = [row for row in acts_when_table.ROWS
            if not any(matches(row.pattern, path[:n]) for n in range(1, len(path) + 1))]
    monkeypatch.setattr(acts_when_table, "ROWS", kept)
    load_config_dict(off)


def test_the_local_judge_reads_devices_and_threads():
    cfg = load_config_dict(merged(JUDGE, {"rewards": {"r": {"device_mapping": [0],
                                                            "num_threads": 2}}}))
    assert cfg.rewards["r"].num_threads == 2


def test_keys_not_written_stay_silent_whatever_their_default():
    cfg = load_config_dict(variant("cispo"))  # pg_clip_high etc. keep schema defaults
    assert cfg.pg_clip_high == 0.28 and cfg.lambd == 1.0
    assert "pg_clip_high" not in config_to_dict(cfg)  # nor are they shown or saved


def test_the_error_names_the_layer_that_wrote_the_key(tmp_path):
    (tmp_path / "base.yaml").write_text("lambd: 0.95\n")
    (tmp_path / "run.yaml").write_text("defaults: [base.yaml]\nmax_steps: 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "run.yaml")
    assert str(info.value).startswith(f"{tmp_path / 'base.yaml'}: lambd: acts only")
    (tmp_path / "plain.yaml").write_text("max_steps: 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "plain.yaml", ["kl_loss_type=k2"])
    assert str(info.value).startswith("command line: kl_loss_type: acts only")


def test_a_block_written_through_a_reference_counts_as_written(tmp_path):
    data = {"shared": {"temperature": 0.5},
            "actor_train": {"generating_args": "${shared}"}}
    assert error_for(data).key_path == "actor_train.generating_args"


def test_a_null_block_declares_nothing():
    cfg = load_config_dict({"reference": None, "critic": None, "validation": None})
    assert cfg.reference is None and cfg.critic is None and cfg.validation is None


def test_rlvr_eval_steps_needs_a_validation_block():
    """Item 9: it used to stop at step 0 with ZeroDivisionError, after every role started."""
    error = error_for({"eval_steps": 5})
    assert error.key_path == "eval_steps" and "no validation block" in error.message
    load_config_dict(merged({"eval_steps": 5}, {"validation": {"data_args": {
        "file_name": ["v.jsonl"]}}}))
    load_config_dict(merged(AGENTIC, {"eval_steps": 5}))  # agentic validates on val envs


def test_loss_variant_rows_match_the_losses():
    """Every policy-loss parameter belongs to some variant's keys (ppo's clip keys to ppo
    and gspo), and every built-in variant has its entry: a new knob or variant needs its
    row."""
    listed = {key.rsplit(".", 1)[-1] for keys in LOSS_VARIANT_KEYS.values() for key in keys}
    assert sorted(listed) == sorted(f.name for f in fields(PolicyLossParams))
    built_in = {name for name, spec in POLICY_LOSSES.items()
                if spec.fn.startswith("flywheel.algorithms.")}
    assert set(LOSS_VARIANT_KEYS) == built_in


def test_a_registered_variant_may_read_any_loss_key(monkeypatch):
    """A user's variant gets every PolicyLossParams field; which it reads is unknown, so
    no loss key is refused under it."""
    from flywheel.algorithms.policy_loss.registry import LossSpec

    monkeypatch.setitem(POLICY_LOSSES, "mine", LossSpec("my_losses:mine"))
    cfg = load_config_dict(variant("mine", cispo_epsilon_high=0.3) | {"pg_clip_high": 0.3})
    assert cfg.pg_clip_high == 0.3


def test_saved_configs_hold_only_keys_that_act_and_load_back(tmp_path):
    """config_to_dict (show-config, a run's config.yaml) leaves inert keys out, so the
    saved file of any loaded config loads back to it."""
    for data in (merged(GAE, KL, variant("cispo")), merged(AGENTIC, {"turn_level_returns":
                                                                      True}), SFT):
        cfg = load_config_dict(data)
        saved = tmp_path / "config.yaml"
        saved.write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
        assert load_config(saved) == cfg
