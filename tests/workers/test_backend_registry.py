"""Choosing a backend by name: what happens when its package is missing, and how each
backend checks its strategy_config. No backend engine is started here."""

from __future__ import annotations

import dataclasses
import importlib.util
import re

import pytest

from flywheel.config.schema import StrategyArgs, WorkerConfig
from flywheel.workers.strategies.registry import (
    STRATEGIES,
    BackendMissing,
    strategy_class,
    strategy_spec,
)
from flywheel.workers.strategies.strategy_config import StrategyConfigError, checked_config


def test_process_group_backends_are_built_after_the_rendezvous():
    for name in ("deepspeed_train", "megatron_train"):
        assert strategy_spec(name).process_group  # built after the rendezvous
    assert not strategy_spec("hf_train").process_group


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None,
                    reason="sglang is installed here")
def test_sglang_missing_says_what_to_install():
    with pytest.raises(BackendMissing, match=re.escape(
            "strategy 'sglang' needs the 'sglang' package: pip install 'sglang[all]'")):
        strategy_class("sglang")


def test_a_missing_dotted_package_is_reported_not_crashed(monkeypatch):
    monkeypatch.setitem(STRATEGIES, "fake", dataclasses.replace(
        STRATEGIES["megatron_train"], module="nowhere", cls="Nothing",
        requires="no_such_pkg.core", install_hint="pip install no-such-pkg"))
    with pytest.raises(BackendMissing, match="needs the 'no_such_pkg.core' package: pip"):
        strategy_class("fake")


def test_unknown_strategy_config_keys_name_the_key_and_the_closest_match():
    defaults = {"zero_stage": 2, "offload_optimizer": False}
    assert checked_config("x", {"zero_stage": 3}, defaults) == {
        "zero_stage": 3, "offload_optimizer": False}
    with pytest.raises(StrategyConfigError, match=re.escape(
            "strategy_args.strategy_config.zero_stag: unknown key for x (did you mean "
            "'zero_stage'?); known keys: offload_optimizer, zero_stage")):
        checked_config("x", {"zero_stag": 3}, defaults)


def test_deepspeed_options_are_checked():
    pytest.importorskip("deepspeed")
    from flywheel.workers.strategies.deepspeed_train import deepspeed_config, strategy_options

    def cfg(options):
        return WorkerConfig(strategy_args=StrategyArgs("deepspeed_train", options))

    with pytest.raises(StrategyConfigError, match="zero_stage: expected 0, 1, 2 or 3"):
        strategy_options(cfg({"zero_stage": 4}))
    with pytest.raises(StrategyConfigError, match="offload_param: parameter offload needs"):
        strategy_options(cfg({"zero_stage": 2, "offload_param": True}))
    options = strategy_options(cfg({"zero_stage": 3, "offload_optimizer": True}))
    ds = deepspeed_config(cfg({}), options, trainable=True)
    assert ds["zero_optimization"] == {"stage": 3, "offload_optimizer": {"device": "cpu"}}
    assert ds["optimizer"]["params"]["torch_adam"] is options["torch_adam"]


def test_megatron_refuses_what_it_does_not_implement():
    pytest.importorskip("megatron.core")
    from flywheel.workers.strategies.megatron_train import strategy_options

    def cfg(options):
        return WorkerConfig(strategy_args=StrategyArgs("megatron_train", options))

    acting = {"use_distributed_optimizer": True, "overlap_grad_reduce": True,
              "ddp_bucket_size": 1000, "bias_activation_fusion": True,
              "tensor_model_parallel_size": 2, "sequence_parallel": True,
              "expert_tensor_parallel_size": 2}
    assert all(strategy_options(cfg(acting))[k] == v for k, v in acting.items())
    with pytest.raises(StrategyConfigError, match="sequence_parallel: .* needs "
                                                  "tensor_model_parallel_size >= 2"):
        strategy_options(cfg({"sequence_parallel": True}))
    with pytest.raises(StrategyConfigError, match="context_parallel_size: .* only in "
                                                  "Transformer Engine's attention"):
        strategy_options(cfg({"context_parallel_size": 2}))
    with pytest.raises(StrategyConfigError, match="expert_tensor_parallel_size: the experts "
                                                  "whole .* are not: set 1$"):
        strategy_options(cfg({"expert_tensor_parallel_size": 2}))
    with pytest.raises(StrategyConfigError, match="apply_rope_fusion: .* Transformer Engine"):
        strategy_options(cfg({"apply_rope_fusion": True}))
    with pytest.raises(StrategyConfigError, match="moe_grouped_gemm: .* grouped_gemm package"):
        strategy_options(cfg({"moe_grouped_gemm": True}))
    with pytest.raises(StrategyConfigError, match="ddp_bucket_size: expected a positive"):
        strategy_options(cfg({"ddp_bucket_size": 0}))
    from flywheel.workers.strategies import megatron_options

    with pytest.raises(StrategyConfigError, match="sequence_parallel: not built for the "
                                                  "critic's value head"):
        megatron_options.check("critic", cfg(acting), None)
    with pytest.raises(StrategyConfigError, match="unknown key for megatron_train"):
        strategy_options(cfg({"tensor_parallel_size": 2}))
    assert strategy_options(cfg({"tensor_model_parallel_size": 2}))[
        "tensor_model_parallel_size"] == 2

