"""The ROLL seed's RLVR example: what flywheel's backends would refuse at start is refused
by the loader (no Megatron key any more: megatron_train runs its sequence parallelism and
distributed optimizer; its sglang with top_k 100 / top_p 0.99 is renormalised over sglang's
top-k log-probs, and top_p alone is refused); as written it loads, and what this machine
lacks is only warned about."""

from pathlib import Path

import pytest

from flywheel.config.checks.environment import cuda_device_count, is_importable
from flywheel.pipelines.config import check_environment, load_config
from flywheel.platform.config.errors import ConfigError

ROLL = Path(__file__).parents[1] / "data" / "configs" / "roll"


MEGATRON = "actor_train.strategy_args.strategy_config."
FITS: list[str] = []
# (overrides, the refusal the loader reports then), one at a time
REFUSALS = [
    (["actor_infer.generating_args.top_k=-1"],  # top_p alone has no top-k bound
     "actor_infer.generating_args.top_p: SGLang's log-probs leave out its top-p truncation"),
]


def test_roll_rlvr_async_example_is_refused_for_what_its_backends_cannot_do():
    """sglang's log-probs of a top-p truncated distribution: refused by the loader, not at
    start."""
    for overrides, refusal in REFUSALS:
        with pytest.raises(ConfigError) as e:
            load_config(ROLL / "rlvr_config_async.yaml", overrides)
        assert str(e.value).startswith(f"{ROLL / 'rlvr_config_async.yaml'}: {refusal}") or \
            str(e.value).startswith(f"command line: {refusal}"), str(e.value)


def test_roll_rlvr_async_example_loads_with_those_settings_changed():
    cfg = load_config(ROLL / "rlvr_config_async.yaml", FITS)
    assert cfg.pipeline_type == "rlvr"
    assert cfg.async_generation_ratio == 1.0
    assert cfg.adv_estimator == "reinforce"
    assert cfg.actor_train.training_args.learning_rate == 1.0e-6
    assert cfg.actor_train.training_args.weight_decay == 0.0
    assert type(cfg.actor_train.training_args.weight_decay) is float  # written as `0`
    assert cfg.actor_train.strategy_args.strategy_name == "megatron_train"
    megatron = cfg.actor_train.strategy_args.strategy_config
    assert megatron["tensor_model_parallel_size"] == 2
    assert megatron["sequence_parallel"] and megatron["use_distributed_optimizer"]
    assert cfg.actor_train.device_mapping == list(range(16))
    assert cfg.actor_infer.device_mapping == list(range(16, 24))
    assert cfg.actor_infer.strategy_args.strategy_name == "sglang"
    gen = cfg.actor_infer.generating_args  # sampled as written: renormalised over top_k
    assert (gen.top_k, gen.top_p) == (100, 0.99)
    # ${response_length} and ${num_return_sequences_in_group} keep their int type
    assert cfg.actor_infer.generating_args.max_new_tokens == 8192
    assert cfg.actor_infer.generating_args.num_return_sequences == 8
    assert cfg.actor_train.data_args.file_name == ["data/math_deepmath_deal.jsonl"]


def test_roll_rlvr_async_example_only_warns_about_this_machine(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # so the relative data file is surely absent
    cfg = load_config(ROLL / "rlvr_config_async.yaml", FITS)
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
