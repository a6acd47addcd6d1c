"""The ROLL seed's RLVR example loads as written; what this machine lacks is only warned about."""

from pathlib import Path

from flywheel.pipelines.config import check_environment, load_config
from flywheel.platform.config.environment_checks import cuda_device_count, is_importable

ROLL = Path(__file__).parents[1] / "data" / "configs" / "roll"


def test_roll_rlvr_async_example_loads_as_written():
    cfg = load_config(ROLL / "rlvr_config_async.yaml")
    assert cfg.pipeline_type == "rlvr"
    assert cfg.async_generation_ratio == 1.0
    assert cfg.adv_estimator == "reinforce"
    assert cfg.actor_train.training_args.learning_rate == 1.0e-6
    assert cfg.actor_train.training_args.weight_decay == 0.0
    assert type(cfg.actor_train.training_args.weight_decay) is float  # written as `0`
    assert cfg.actor_train.strategy_args.strategy_name == "megatron_train"
    assert cfg.actor_train.strategy_args.strategy_config["tensor_model_parallel_size"] == 2
    assert cfg.actor_train.device_mapping == list(range(16))
    assert cfg.actor_infer.device_mapping == list(range(16, 24))
    assert cfg.actor_infer.strategy_args.strategy_name == "sglang"
    # ${response_length} and ${num_return_sequences_in_group} keep their int type
    assert cfg.actor_infer.generating_args.max_new_tokens == 8192
    assert cfg.actor_infer.generating_args.num_return_sequences == 8
    assert cfg.actor_train.data_args.file_name == ["data/math_deepmath_deal.jsonl"]


def test_roll_rlvr_async_example_only_warns_about_this_machine(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # so the relative data file is surely absent
    cfg = load_config(ROLL / "rlvr_config_async.yaml")
    warnings = check_environment(cfg)
    joined = "\n".join(warnings)
    assert "model '/data/cpfs_0/common/models/Qwen2.5-7B' not found" in joined
    assert "pretrain, reward_pretrain:" in joined  # one warning for the shared path
    assert "data file 'data/math_deepmath_deal.jsonl' does not exist" in joined
    # megatron-core and sglang need CUDA and their packages: warned about unless both are here
    for strategy, module in (("megatron_train", "megatron.core"), ("sglang", "sglang")):
        ready = is_importable(module) and cuda_device_count() > 0
        assert any(strategy in w for w in warnings) != ready
    assert not any(w.startswith("error") for w in warnings)
