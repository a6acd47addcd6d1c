"""Cross-field rules in checks.py: each one fails, and its boundary passes."""

import re

import pytest

from flywheel.config.checks.config import role_backends
from flywheel.config.derived import data_parallel_size
from flywheel.config.schema import PipelineConfig, StrategyArgs, WorkerConfig
from flywheel.pipelines.config import CATALOGS, check_config, load_config, load_config_dict
from flywheel.platform.config.errors import ConfigError


def error_for(data):
    with pytest.raises(ConfigError) as info:
        load_config_dict(data, source="f.yaml")
    return info.value


def batch(rollout, group, per_device, accumulation, devices="[0]", **actor_train):
    return {"rollout_batch_size": rollout, "num_return_sequences_in_group": group,
            "actor_train": {"training_args": {"per_device_train_batch_size": per_device,
                                              "gradient_accumulation_steps": accumulation},
                            "device_mapping": devices, **actor_train}}


def test_checks_are_pure_functions_on_the_dataclass():
    cfg = PipelineConfig(async_generation_ratio=-1.0)
    with pytest.raises(ConfigError) as info:
        check_config(cfg)
    assert info.value.file == ""  # the loader adds the file
    assert info.value.key_path == "async_generation_ratio"


def test_batch_sizes_that_divide_pass():
    # 8 prompts x 4 samples = 32 = 2 per device x 4 accumulation x 4 data-parallel ranks
    load_config_dict(batch(8, 4, 2, 4, "list(range(0,4))"))


def test_batch_sizes_that_do_not_divide():
    error = error_for(batch(8, 4, 2, 4, "list(range(0,3))"))  # global batch 24
    assert error.key_path == "rollout_batch_size"
    assert "8 x 4 = 32 samples per step is not a multiple of actor_train's global batch" in (
        error.message)
    assert "2 x 4 x 3 = 24" in error.message


def test_num_gpus_per_worker_reduces_data_parallelism():
    # 4 devices, 2 per worker -> dp 2 -> global batch 2 x 4 x 2 = 16 divides 32
    load_config_dict(batch(8, 4, 2, 4, "list(range(0,4))", num_gpus_per_worker=2))


def test_devices_must_split_into_workers():
    error = error_for(batch(8, 4, 1, 1, "list(range(0,3))", num_gpus_per_worker=2))
    assert error.key_path == "actor_train.device_mapping"
    assert "3 devices do not split into workers of num_gpus_per_worker=2" in error.message


def test_megatron_model_parallelism_reduces_data_parallelism():
    megatron = {"strategy_args": {"strategy_name": "megatron_train", "strategy_config": {
        "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2}}}
    cfg = load_config_dict(batch(4, 1, 1, 2, "list(range(0,8))", **megatron))  # dp = 8/4 = 2
    assert data_parallel_size(cfg.actor_train) == 2


def test_megatron_parallel_sizes_must_be_positive_ints():
    error = error_for(batch(4, 1, 1, 1, "[0]", strategy_args={
        "strategy_name": "megatron_train", "strategy_config": {"tensor_model_parallel_size": "2"}}))
    assert error.key_path == "actor_train.strategy_args.strategy_config.tensor_model_parallel_size"


def test_critic_batch_is_checked_too():
    error = error_for({**batch(4, 1, 4, 1), "adv_estimator": "gae",
                       "critic": {"training_args": {"per_device_train_batch_size": 3}}})
    assert "critic's global batch" in error.message


@pytest.mark.parametrize("role", ["actor_train", "critic"])
@pytest.mark.parametrize("name", ["hf_infer", "vllm", "sglang"])
def test_training_roles_refuse_generation_backends(role, name):
    error = error_for({role: {"strategy_args": {"strategy_name": name}}})
    assert error.key_path == f"{role}.strategy_args.strategy_name"
    assert f"'{name}' is a generation backend and cannot run {role}" in error.message


@pytest.mark.parametrize("name", ["hf_train", "deepspeed_train", "megatron_train"])
def test_actor_infer_refuses_training_backends(name):
    error = error_for({"actor_infer": {"strategy_args": {"strategy_name": name}}})
    assert "accepts hf_infer, vllm, sglang" in error.message


def test_reference_accepts_training_backends_only():
    """A reference scores the sampled distribution (temperature, top-k/p) through a
    training backend's forward; hf_infer has no such head, so it is refused (issue 24)."""
    reference = role_backends(CATALOGS.backends, "reference")
    assert reference == ["hf_train", "deepspeed_train", "megatron_train", "sim_train"]
    for name in reference:
        load_config_dict({"use_kl_loss": True, "kl_loss_coef": 0.1,
                          "reference": {"strategy_args": {"strategy_name": name}}})
    for name in ("hf_infer", "vllm"):
        error = error_for({"use_kl_loss": True, "kl_loss_coef": 0.1,
                           "reference": {"strategy_args": {"strategy_name": name}}})
        assert error.key_path == "reference.strategy_args.strategy_name"
        assert f"'{name}' is a generation backend and cannot run reference" in error.message


def test_unknown_strategy_suggests():
    error = error_for({"actor_train": {"strategy_args": {"strategy_name": "deepspeed"}}})
    assert "unknown strategy 'deepspeed' (did you mean 'deepspeed_train'?)" in error.message


def test_unknown_pg_variant_lists_the_loss_catalog():
    error = error_for({"actor_train": {"pg_variant": "ppo2"}})
    assert error.key_path == "actor_train.pg_variant"
    assert error.message == ("unknown pg_variant 'ppo2' (did you mean 'ppo'?); known: vanilla, "
                             "ppo, gspo, tis, topr, topr_seq, cispo, kimi15, kimi15_seq")


@pytest.mark.parametrize("data, key_path, message", [
    ({"dual_clip_loss": True, "dual_clip_c": 0.5}, "dual_clip_c",
     "must be > 1 (Ye et al. 2020), got 0.5"),
    ({"use_pg_clip_range": True, "pg_clip_high": -0.1}, "pg_clip_high", "must be >= 0, got -0.1"),
    ({"actor_train": {"pg_variant": "tis", "tis_lower_bound": 2.0}}, "actor_train.tis_lower_bound",
     "must be <= tis_upper_bound (1.0), got 2.0"),
])
def test_a_loss_knob_the_losses_cannot_use_is_refused_under_its_key(data, key_path, message):
    # the losses' own checks (PolicyLossParams), run when the config loads, not at step 1
    error = error_for(data)
    assert (error.key_path, error.message) == (key_path, message)


def test_unknown_reward_type_suggests():
    error = error_for({"rewards": {"m": {"reward_type": "math"}}})
    assert error.key_path == "rewards.m.reward_type"
    assert "did you mean 'math_rule'" in error.message


def test_async_needs_disjoint_train_and_infer_devices():
    error = error_for({"async_generation_ratio": 2, "actor_train": {"device_mapping": "[0, 1]"},
                       "actor_infer": {"device_mapping": "[1, 2]"}})
    assert error.key_path == "actor_infer.device_mapping"
    assert "generation and training at the same time" in error.message
    assert "cannot share devices, but both use [1]" in error.message


def test_async_with_unset_mappings_shares_slot_zero():
    assert "an unset device_mapping means [0]" in error_for({"async_generation_ratio": 1}).message


def test_async_with_disjoint_devices_and_sync_with_shared_devices_pass():
    load_config_dict({"async_generation_ratio": 1, "actor_infer": {"device_mapping": [1]}})
    load_config_dict({"async_generation_ratio": 0, "actor_infer": {"device_mapping": [0]}})


def test_negative_async_ratio():
    assert "must be >= 0" in error_for({"async_generation_ratio": -0.5}).message


ASYNC = {"async_generation_ratio": 1, "partial_rollout": True,
         "actor_infer": {"device_mapping": [1], "generating_args": {"max_new_tokens": 8}}}


@pytest.mark.parametrize("change, key_path, message", [
    ({"async_generation_ratio": 0}, "partial_rollout", "has no effect with async_generation"),
    ({"partial_rollout_segment_tokens": 0}, "partial_rollout_segment_tokens",
     "must be in 1..actor_infer.generating_args.max_new_tokens=8, got 0"),
    ({"partial_rollout_segment_tokens": 9}, "partial_rollout_segment_tokens", "got 9"),
    ({"pipeline_type": "agentic", "rollout_batch_size": 8}, "partial_rollout", "RLVR only"),
    ({"partial_rollout_segment_tokens": 2,
      "actor_infer": {**ASYNC["actor_infer"], "strategy_args": {"strategy_name": "vllm"}}},
     "partial_rollout_segment_tokens", "has no effect on vllm"),
])
def test_partial_rollout_mistakes(change, key_path, message):
    error = error_for({**ASYNC, **change})
    assert error.key_path == key_path and message in error.message


def test_partial_rollout_with_async_generation_passes():
    assert load_config_dict(ASYNC).partial_rollout_segment_tokens is None  # quarter of 8
    load_config_dict({**ASYNC, "partial_rollout_segment_tokens": 8})


def test_num_return_sequences_must_agree_with_the_group_size():
    data = {**batch(8, 4, 8, 1), "actor_infer": {"generating_args": {"num_return_sequences": 2}}}
    error = error_for(data)
    assert error.key_path == "actor_infer.generating_args.num_return_sequences"
    assert "is 2 but num_return_sequences_in_group is 4" in error.message
    data["actor_infer"]["generating_args"]["num_return_sequences"] = 4
    load_config_dict(data)


def test_gae_needs_a_critic():
    assert "add a critic" in error_for({"adv_estimator": "gae"}).message
    load_config_dict({"adv_estimator": "gae", "critic": {}})


def test_kl_needs_a_reference():
    assert error_for({"use_kl_loss": True, "kl_loss_coef": 0.1}).key_path == "use_kl_loss"
    assert error_for({"init_kl_coef": 0.1}).key_path == "init_kl_coef"
    load_config_dict({"use_kl_loss": True, "kl_loss_coef": 0.1, "init_kl_coef": 0.1,
                      "reference": {}})


def test_a_kl_switch_whose_weight_leaves_it_inert_is_refused():
    # kl_loss_coef's default 0: the reference would run every step for nothing
    error = error_for({"use_kl_loss": True, "reference": {}})
    assert error.key_path == "use_kl_loss" and "kl_loss_coef 0 adds nothing" in error.message
    for key in ("kl_loss_coef", "init_kl_coef"):
        error = error_for({"use_kl_loss": True, "kl_loss_coef": 0.1, key: -0.1,
                           "reference": {}})
        assert error.key_path == key and "is a KL weight, >= 0" in error.message


@pytest.mark.parametrize("data, key_path", [
    ({"rollout_batch_size": 0}, "rollout_batch_size"),
    ({"ppo_epochs": 0}, "ppo_epochs"),
    ({"max_steps": -1}, "max_steps"),
    ({"actor_train": {"num_gpus_per_worker": 0}}, "actor_train.num_gpus_per_worker"),
    ({"actor_infer": {"infer_batch_size": 0}}, "actor_infer.infer_batch_size"),
    ({"rewards": {"m": {"world_size": 0}}}, "rewards.m.world_size"),
])
def test_counts_must_be_positive(data, key_path):
    assert error_for(data).key_path == key_path


def test_check_error_names_the_file_that_set_the_key(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("adv_estimator: gae\n")
    top = tmp_path / "top.yaml"
    top.write_text("defaults: [base.yaml]\nseed: 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(top)
    assert info.value.file == str(base)


def test_data_parallel_size_of_an_unset_mapping_is_one():
    assert data_parallel_size(WorkerConfig(strategy_args=StrategyArgs("hf_train"))) == 1


def test_zero3_with_torch_adam_cannot_free_memory_between_phases():
    """DeepSpeed's ZeRO-3 offload_states needs its FusedAdam (bench/gpu_checks.py on an
    H100); colocated sync runs switch phases, async ones and stages 1-2 do not need it."""
    def zero(stage, **top):
        return {"actor_train": {"strategy_args": {"strategy_name": "deepspeed_train",
                                                  "strategy_config": {"zero_stage": stage,
                                                                      "torch_adam": True}}},
                **top}

    error = error_for(zero(3))
    assert error.key_path == "actor_train.strategy_args.strategy_config.torch_adam"
    assert "FusedAdam" in error.message and "offload_between_phases: false" in error.message
    load_config_dict(zero(3, offload_between_phases=False))
    load_config_dict(zero(2))


@pytest.mark.parametrize(("role", "strategy", "extra", "refusal"), [
    ("actor_train", "deepspeed_train", {"zero_stage": 5},
     "actor_train.strategy_args.strategy_config.zero_stage: expected 0, 1, 2 or 3, got 5"),
    ("critic", "deepspeed_train", {"zero_stage": 2, "offload_param": True},
     "critic.strategy_args.strategy_config.offload_param: parameter offload needs zero_stage: 3"),
    ("actor_train", "megatron_train", {"context_parallel_size": 2},
     "actor_train.strategy_args.strategy_config.context_parallel_size: megatron-core 0.16 "
     "splits the sequence over context-parallel ranks only in Transformer Engine's attention"),
    ("actor_train", "megatron_train", {"apply_rope_fusion": True},
     "actor_train.strategy_args.strategy_config.apply_rope_fusion: a speed-up"),
    ("actor_infer", "vllm", {"seed": 3},
     "actor_infer.strategy_args.strategy_config.seed: vllm takes it from the top-level seed"),
    ("actor_infer", "sglang", {"random_seed": 3},
     "actor_infer.strategy_args.strategy_config.random_seed: sglang takes it from the top-level"),
])
def test_what_a_backend_refuses_at_start_is_refused_at_load(role, strategy, extra, refusal):
    """Each backend's light config_check (workers/strategies/registry.py) runs in the
    loader, so `platform validate` refuses what the backend would refuse when it starts."""
    data = {role: {"strategy_args": {"strategy_name": strategy, "strategy_config": extra}}}
    if role == "critic":
        data["adv_estimator"] = "gae"
    with pytest.raises(ConfigError) as e:
        load_config_dict(data)
    assert str(e.value).startswith(f"<dict>: {refusal}"), str(e.value)


def test_sglang_sampling_a_truncated_distribution_is_refused_at_load():
    with pytest.raises(ConfigError, match="^<dict>: validation.generating_args.top_p: SGLang"):
        load_config_dict({
            "actor_infer": {"strategy_args": {"strategy_name": "sglang"}},
            "validation": {"data_args": {"file_name": ["v.jsonl"]},
                           "generating_args": {"do_sample": True, "top_p": 0.9}},
            "eval_steps": 1})


@pytest.mark.parametrize(("extra", "refusal"), [
    ({"model_update_frequency": 2}, "a broadcast keeps no copy"),
    ({"actor_infer": {"device_mapping": [0]}, "async_generation_ratio": 0},
     "share device(s) [0]"),
])
def test_a_collective_carrier_is_refused_where_a_broadcast_cannot_serve(extra, refusal):
    base = {"weight_sync_carrier": "collective", "actor_train": {"device_mapping": [0]},
            "actor_infer": {"device_mapping": [1]}, "async_generation_ratio": 1}
    with pytest.raises(ConfigError, match=f"^<dict>: weight_sync_carrier: collective.*"
                                          f"{re.escape(refusal)}"):
        load_config_dict({**base, **extra})
    load_config_dict(base)  # devices of their own, every sync loaded: fine


def test_engine_memory_fraction_leaves_a_colocated_trainer_its_memory():
    from flywheel.config.derived import engine_memory_fraction

    gib = 1 << 30
    assert engine_memory_fraction(79 * gib, 80 * gib) == 0.9  # a GPU of its own: vLLM's
    assert engine_memory_fraction(60 * gib, 80 * gib) == 0.7  # 20 GiB held by actor_train
    assert engine_memory_fraction(2 * gib, 80 * gib) == 0.05  # never below 5 %


def test_a_role_on_the_sibling_device_of_a_multi_gpu_engine_is_refused():
    with pytest.raises(ConfigError, match=r"^<dict>: actor_train.device_mapping: device 3 runs "
                                          r"part of the engine of a worker of actor_infer "
                                          r"\(num_gpus_per_worker 2\)"):
        load_config_dict({"async_generation_ratio": 1,
                          "actor_infer": {"device_mapping": [2, 3], "num_gpus_per_worker": 2},
                          "actor_train": {"device_mapping": [0, 1, 3, 4]}})


def test_warmup_ratio_is_a_fraction():
    error = error_for({"actor_train": {"training_args": {"warmup_ratio": 1.5}}})
    assert error.key_path == "actor_train.training_args.warmup_ratio"
    assert "in [0, 1]" in error.message


def test_difficulty_bounds_must_leave_room():
    error = error_for({"difficulty_mask": True, "num_return_sequences_in_group": 4,
                       "difficulty_low_threshold": 0.9, "difficulty_high_threshold": 0.9})
    assert error.key_path == "difficulty_low_threshold"
    assert "every group would be masked" in error.message


def test_roll_rlvr_loss_knobs_load():
    cfg = load_config_dict({"max_len_mask": True, "difficulty_mask": True,
                            "num_return_sequences_in_group": 4,
                            "difficulty_low_threshold": 0.1, "difficulty_high_threshold": 0.95,
                            "actor_train": {"pg_variant": "gspo",
                                            "training_args": {"warmup_ratio": 0.1}}})
    assert (cfg.max_len_mask, cfg.difficulty_mask, cfg.actor_train.pg_variant) == (
        True, True, "gspo")


def test_actors_taking_turns_may_share_the_sibling_devices_of_a_multi_gpu_engine():
    """ROLL's colocated layout (qwen3-30BA3B-rlvr_fsdp2): both actors on every device, the
    engine over two of them. Synchronous, they take turns and the sleeping engine frees its
    sibling devices too; with generation running ahead they would not, and are refused."""
    both = {"actor_infer": {"device_mapping": [0, 1, 2, 3], "num_gpus_per_worker": 2},
            "actor_train": {"device_mapping": [0, 1, 2, 3]}}
    load_config_dict({**both, "async_generation_ratio": 0})
    with pytest.raises(ConfigError, match=r"actor_train.device_mapping: device 1 runs part .*"
                                          r"take turns on shared devices \(async_generation"):
        load_config_dict({**both, "async_generation_ratio": 1})


def test_a_reference_may_share_a_sleeping_engines_siblings_but_a_reward_model_may_not():
    """ROLL's VL megatron files (qwen3-vl-32B-rlvr_megatron) put the reference on every
    device beside a two-GPU engine: its log-probs run in the training phase, with the
    engine asleep. A reward model scores during generation, with the engine awake."""
    both = {"actor_infer": {"device_mapping": [0, 1, 2, 3], "num_gpus_per_worker": 2},
            "actor_train": {"device_mapping": [0, 1, 2, 3]}}
    load_config_dict({**both, "use_kl_loss": True, "kl_loss_coef": 0.1,
                      "reference": {"device_mapping": [0, 1, 2, 3]}})
    apart = {"use_kl_loss": True, "kl_loss_coef": 0.1,
             "actor_infer": {"device_mapping": [0, 1], "num_gpus_per_worker": 2},
             "actor_train": {"device_mapping": [2, 3]}, "reference": {"device_mapping": [1]}}
    with pytest.raises(ConfigError, match=r"reference.device_mapping: device 1 runs part "
                                          r".*take turns on shared devices"):
        load_config_dict(apart)  # no shared device: the engine never sleeps
    judge = {"reward_type": "reward_model", "device_mapping": [1],
             "model_args": {"model_name_or_path": "builtin://tiny-reward"}}
    with pytest.raises(ConfigError, match=r"rewards.judge.device_mapping: device 1 runs part"):
        load_config_dict({**both, "rewards": {"judge": judge}})


def test_a_frozen_tower_is_left_out_of_the_sync_only_when_the_engine_loads_the_same_model():
    frozen = {"pretrain": "builtin://tiny-idefics3-shapes",
              "actor_train": {"model_args": {"freeze_module_prefix": "vision_model"}}}
    load_config_dict({**frozen, "actor_infer": {"model_args": {
        "model_name_or_path": "builtin://tiny-idefics3-shapes"}}})
    with pytest.raises(ConfigError, match=r"actor_infer.model_args.model_name_or_path: "
                                          r"other, but actor_train loads builtin://tiny-"
                                          r"idefics3-shapes: with freeze_module_prefix"):
        load_config_dict({**frozen, "actor_infer": {"model_args": {
            "model_name_or_path": "other"}}})
