"""`platform convert --from roll` writes ROLL's defaults that differ from flywheel's and act
in the converted file, and none that would be inert; a key the ROLL file writes that would
do nothing here is dropped with the reason; the converted file always validates
(interop/roll/defaults.py). Config only."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flywheel.pipelines.config import convert_roll, load_config_dict

ROLL_RLVR = Path(__file__).parents[1] / "data" / "configs" / "roll" / "mechanics" / "roll_rlvr.yaml"


def convert(tmp_path: Path, data: dict):
    path = tmp_path / "roll.yaml"
    path.write_text(yaml.safe_dump(data))
    conversion = convert_roll(path)
    assert conversion.missing == []
    return conversion, load_config_dict(conversion.data)  # what convert writes validates


def test_roll_defaults_that_act_are_written_out():
    conversion = convert_roll(ROLL_RLVR)
    cfg = load_config_dict(conversion.data)
    assert cfg.actor_train.training_args.lr_scheduler_type == "linear"  # HF's default
    assert cfg.actor_train.model_args.disable_gradient_checkpointing is False  # hf_train
    assert (cfg.actor_infer.generating_args.temperature, cfg.actor_infer.generating_args.top_p,
            cfg.actor_infer.generating_args.top_k) == (0.95, 0.7, 50)
    assert cfg.actor_infer.model_args.dtype == "bf16"
    assert cfg.actor_train.data_args.response == "solution"  # ROLL's answer column
    assert (cfg.save_steps, cfg.eval_steps, cfg.val_batch_size) == (50, 10, 128)
    assert "eval_steps: unset, ROLL's default 10 written out" in conversion.mapped
    # ROLL's defaults that would do nothing here are not written: lambd (grpo, no gae),
    # pg_clip_high (no clip range), init_kl_coef (no add_token_level_kl), critic-less gae
    for key in ("lambd", "pg_clip_high", "init_kl_coef", "norm_mean_type"):
        assert key not in conversion.data


def test_inert_keys_of_the_file_are_dropped_with_the_reason(tmp_path):
    conversion, cfg = convert(tmp_path, {
        "adv_estimator": "grpo", "lambd": 0.9, "pg_clip_high": 0.3, "max_ckpt_to_keep": 3,
        "init_kl_coef": 0.2, "add_token_level_kl": True,
        "actor_train": {"pg_variant": "cispo", "model_args": {"attn_implementation": "fa2"},
                        "strategy_args": {"strategy_name": "megatron_train"}},
        "actor_infer": {"strategy_args": {"strategy_name": "vllm"}},
        "reference": {"strategy_args": {"strategy_name": "hf_infer"}},
        "rewards": {"math": {"worker_cls": "x.MathRuleRewardWorker", "device_mapping": [0]}}})
    assert "lambd: not read here: acts only with adv_estimator gae (GAE's lambda)" in \
        conversion.dropped
    assert any(d.startswith("pg_clip_high: not read here: acts only with pg_variant ppo")
               for d in conversion.dropped)
    assert any(d.startswith("actor_train.model_args.attn_implementation: not read here")
               for d in conversion.dropped)
    assert any(d.startswith("rewards.math.device_mapping: not read here")
               for d in conversion.dropped)
    assert cfg.save_total_limit == 3  # max_ckpt_to_keep
    assert cfg.init_kl_coef == 0.2 and cfg.reference is not None  # add_token_level_kl: on
    assert cfg.reference.strategy_args.strategy_name == "hf_train"  # never hf_infer
    assert cfg.actor_train.training_args.learning_rate == 5e-5  # ROLL's (HF's) default


def test_agentic_turn_budget_is_the_smaller_of_roll_s_two(tmp_path):
    """ROLL caps a turn at min(max_tokens_per_step, max_new_tokens); flywheel reads the tag's
    max_tokens_per_step alone (max_new_tokens is refused in agentic configs)."""
    envs = {"A": {"env_type": "frozen_lake", "max_tokens_per_step": 8},
            "B": {"env_type": "frozen_lake", "max_tokens_per_step": 4}}
    conversion, cfg = convert(tmp_path, {
        "adv_estimator": "grpo", "rollout_batch_size": 8, "custom_envs": envs,
        "train_env_manager": {"tags": ["A", "B"], "num_env_groups": 2, "group_size": 4,
                              "generating_args": {"max_new_tokens": 6}},
        "val_env_manager": {"tags": ["A"], "num_env_groups": 2}})
    assert cfg.pipeline_type == "agentic"
    assert [cfg.custom_envs[t].max_tokens_per_step for t in "AB"] == [6, 4]
    assert "max_new_tokens" not in conversion.data["actor_infer"]["generating_args"]
    assert cfg.actor_infer.generating_args.temperature == 0.95  # ROLL's sampling default
    assert "prompt_length" not in conversion.data  # ROLL's 1024 would do nothing here


def test_init_kl_coef_without_roll_s_switch_penalises_nothing(tmp_path):
    """ROLL applies init_kl_coef to the rewards only under add_token_level_kl: true; a file
    that writes the coefficient (and an adaptive target) without it trains with no penalty
    there, so the converted file has none either, and says why."""
    conversion, cfg = convert(tmp_path, {
        "adv_estimator": "grpo", "init_kl_coef": 0.2, "target_kl": 0.1,
        "add_token_level_kl": False,
        "reference": {"strategy_args": {"strategy_name": "hf_train"}}})
    assert cfg.init_kl_coef == 0.0 and cfg.target_kl is None
    assert any(d.startswith("init_kl_coef: 0.2 not applied: ROLL penalises rewards with it "
                            "only under add_token_level_kl: true") for d in conversion.dropped)
    assert any(d.startswith("target_kl: not read here") for d in conversion.dropped)
    on, cfg = convert(tmp_path, {"adv_estimator": "grpo", "init_kl_coef": 0.2,
                                 "add_token_level_kl": True,
                                 "reference": {"strategy_args": {"strategy_name": "hf_train"}}})
    assert cfg.init_kl_coef == 0.2


def test_a_kl_loss_without_its_weight_is_dropped_as_roll_adds_nothing_either(tmp_path):
    # ROLL's kl_loss_coef defaults to 0: use_kl_loss alone is inert there, refused here
    conversion, cfg = convert(tmp_path, {
        "adv_estimator": "grpo", "use_kl_loss": True,
        "reference": {"strategy_args": {"strategy_name": "hf_train"}}})
    assert not cfg.use_kl_loss and cfg.reference is None
    assert any(d.startswith("use_kl_loss: true not applied: kl_loss_coef is 0")
               for d in conversion.dropped)


def test_backend_settings_flywheel_would_refuse_are_fitted(tmp_path):
    """megatron's keys that act stay (the distributed optimizer, the overlapped reduce,
    the fused SwiGLU); those it refuses as speed-ups or memory savings with the same
    updates are dropped with the backend's reason (sequence parallelism at TP 1, the
    interleaved schedule, the TE-only RoPE fusion); sglang sampling a top-k / top-p
    truncated distribution becomes vllm, which gives that distribution's log-probs."""
    conversion, cfg = convert(tmp_path, {
        "adv_estimator": "grpo",
        "actor_train": {"strategy_args": {"strategy_name": "megatron_train", "strategy_config": {
            "sequence_parallel": True, "use_distributed_optimizer": True,
            "virtual_pipeline_model_parallel_size": 8, "apply_rope_fusion": True,
            "overlap_grad_reduce": True, "bias_activation_fusion": True,
            "account_for_embedding_in_pipeline_split": True}}},
        "actor_infer": {"generating_args": {"top_k": 100, "top_p": 0.99},
                        "strategy_args": {"strategy_name": "sglang",
                                          "strategy_config": {"mem_fraction_static": 0.8}}}})
    assert cfg.actor_train.strategy_args.strategy_config == {
        "use_distributed_optimizer": True, "overlap_grad_reduce": True,
        "bias_activation_fusion": True}
    assert cfg.actor_infer.strategy_args.strategy_name == "vllm"
    assert cfg.actor_infer.strategy_args.strategy_config == {}
    assert any(d.startswith("actor_train.strategy_args.strategy_config.sequence_parallel: a "
                            "memory saving") and "tensor_model_parallel_size >= 2" in d
               for d in conversion.dropped)
    assert any(d.startswith("actor_train.strategy_args.strategy_config.apply_rope_fusion: a "
                            "speed-up") for d in conversion.dropped)
    # the interleaved schedule and the split keys act across pipeline stages: at PP 1
    # (this file) each would do nothing, and is dropped as such
    for key in ("virtual_pipeline_model_parallel_size",
                "account_for_embedding_in_pipeline_split"):
        assert any(d.startswith(f"actor_train.strategy_args.strategy_config.{key}: ")
                   and "pipeline_model_parallel_size" in d for d in conversion.dropped)
    assert not any(k in d for d in conversion.dropped for k in (
        "use_distributed_optimizer", "overlap_grad_reduce", "bias_activation_fusion"))
    assert any(m.startswith("actor_infer.strategy_args.strategy_name: sglang -> vllm")
               for m in conversion.mapped)


def test_interleaved_schedule_and_split_keys_stay_with_pipeline_stages(tmp_path):
    """At PP 2 megatron_train runs the interleaved schedule and the split keys (issue 51):
    a ROLL file setting them keeps them."""
    megatron = {"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2,
                "account_for_embedding_in_pipeline_split": True,
                "account_for_loss_in_pipeline_split": True}
    conversion, cfg = convert(tmp_path, {
        "adv_estimator": "grpo",
        "actor_train": {"device_mapping": "list(range(0,2))",
                        "strategy_args": {"strategy_name": "megatron_train",
                                          "strategy_config": dict(megatron)}}})
    assert cfg.actor_train.strategy_args.strategy_config == megatron
    assert not any(k in d for d in conversion.dropped for k in megatron)


def test_global_template_encodes_every_prompt_in_place_of_actor_train_s(tmp_path):
    """ROLL's global_template wins over actor_train's data_args.template (its RLVR
    pipeline encodes with it), wherever the file writes it."""
    conversion, cfg = convert(tmp_path, {
        "global_template": "qwen2_5", "adv_estimator": "grpo",
        "actor_train": {"data_args": {"template": "native"}}})
    assert cfg.actor_train.data_args.template == "qwen2_5"
    assert any(m.startswith("global_template -> actor_train.data_args.template: qwen2_5")
               for m in conversion.mapped)


def test_eval_steps_without_validation_data_is_dropped_as_roll_validates_nothing(tmp_path):
    conversion, cfg = convert(tmp_path, {"adv_estimator": "grpo", "eval_steps": 10})
    assert cfg.eval_steps == 0
    assert any(d.startswith("eval_steps: 10: the file has no validation block")
               for d in conversion.dropped)


@pytest.mark.parametrize("flags, dtype", [({"bf16": True}, "bf16"), ({"fp16": False}, "fp32")])
def test_megatrons_precision_flag_becomes_the_roles_dtype(tmp_path, flags, dtype):
    """strategy_config.bf16 / fp16 (Megatron's own arguments) is the precision the role
    trains in: model_args.dtype in flywheel; a false flag adds nothing."""
    conversion, cfg = convert(tmp_path, {
        "adv_estimator": "grpo",
        "actor_train": {"model_args": {"dtype": "fp32"}, "strategy_args": {
            "strategy_name": "megatron_train", "strategy_config": flags}}})
    assert cfg.actor_train.model_args.dtype == dtype
    assert cfg.actor_train.strategy_args.strategy_config == {}
    flag = next(iter(flags))
    key = f"actor_train.strategy_args.strategy_config.{flag}"
    report = conversion.mapped if flags[flag] else conversion.dropped
    expected = f"{key}: true -> actor_train.model_args.dtype: bf16" if flags[flag] else (
        f"{key}: false")
    assert any(line.startswith(expected) for line in report), report


def test_sequence_packing_acts_on_training_roles_whose_backend_packs(tmp_path):
    """ROLL's use_sequence_packing / max_packed_sequence_length_train become
    training_args.sequence_packing / max_packed_sequence_length (sequence_packing.py) on
    hf_train and deepspeed_train; on megatron_train and on the reference, where flywheel
    runs padded (the same numbers), they are dropped with the reason
    (interop/roll/fit/packing.py)."""
    packing = {"use_sequence_packing": True, "sequence_packing_args": {
        "algorithm": "load_balance", "max_packed_sequence_length_train": 2048,
        "max_packed_sequence_length_forward": 2048, "min_num_micro_batches_train": 1}}
    conversion, cfg = convert(tmp_path, {"adv_estimator": "grpo", "init_kl_coef": 0.0,
                                         "use_kl_loss": True, "kl_loss_coef": 0.1,
                                         "actor_train": packing,
                                         "reference": packing})
    args = cfg.actor_train.training_args
    assert (args.sequence_packing, args.max_packed_sequence_length) == (True, 2048)
    assert any(d.startswith("actor_train.sequence_packing_args.algorithm: balances")
               for d in conversion.dropped)
    assert any(d.startswith("reference.use_sequence_packing: only training roles pack")
               for d in conversion.dropped)
    conversion, cfg = convert(tmp_path, {"adv_estimator": "grpo", "actor_train": {
        **packing, "strategy_args": {"strategy_name": "megatron_train"}}})
    assert not cfg.actor_train.training_args.sequence_packing
    assert any(d.startswith("actor_train.use_sequence_packing: megatron_train runs padded")
               for d in conversion.dropped)


def test_dynamic_batching_keys_act_where_the_backend_cuts_by_tokens(tmp_path):
    """ROLL's use_dynamic_batching_in_train / max_tokens_per_microbatch_in_train become
    training_args.dynamic_batching / max_tokens_per_micro_batch (train_loop.py); on
    megatron_train, which cuts by rows, they are dropped with the reason."""
    roll = {"use_dynamic_batching_in_train": True, "max_tokens_per_microbatch_in_train": 2048}
    conversion, cfg = convert(tmp_path, {"adv_estimator": "grpo", "actor_train": roll})
    args = cfg.actor_train.training_args
    assert (args.dynamic_batching, args.max_tokens_per_micro_batch) == (True, 2048)
    conversion, cfg = convert(tmp_path, {"adv_estimator": "grpo", "actor_train": {
        **roll, "strategy_args": {"strategy_name": "megatron_train"}}})
    assert not cfg.actor_train.training_args.dynamic_batching
    assert any(d.startswith("actor_train.training_args.dynamic_batching: not read here")
               for d in conversion.dropped)
