"""LoRA keys in a config (config/lora_args.py, derived.reference_from_actor): their
values, what a lora_target names, and the reference that starts no worker. Which keys act
where is tested with the other acts-when rows (test_config_acts_when.py)."""

from __future__ import annotations

import pytest

from flywheel.config.derived import reference_from_actor, served_adapter
from flywheel.config.lora_args import lora_targets
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.roles.roles import Roles, device_roles
from flywheel.platform.config.errors import ConfigError

KL = {"use_kl_loss": True, "kl_loss_coef": 0.1, "reference": {}}


def lora(**args) -> dict:
    return {"actor_train": {"model_args": {"lora_target": "all-linear", **args}}}


@pytest.mark.parametrize("key, value, phrase", [
    ("lora_rank", 0, "at least 1"), ("lora_alpha", -2, "> 0"), ("lora_dropout", 1.0, "[0, 1)"),
    ("lora_target", " , ", "names no module"), ("additional_target", ",", "names no module")])
def test_a_lora_value_out_of_range_is_refused_in_one_line(key, value, phrase):
    with pytest.raises(ConfigError) as info:
        load_config_dict(lora(**{key: value}), source="f.yaml")
    assert str(info.value).startswith(f"f.yaml: actor_train.model_args.{key}: ")
    assert phrase in info.value.message and "\n" not in str(info.value)


def test_lora_rank_without_lora_target_is_refused():
    with pytest.raises(ConfigError) as info:
        load_config_dict({"actor_train": {"model_args": {"lora_rank": 16}}}, source="f.yaml")
    assert info.value.key_path == "actor_train.model_args.lora_rank"
    assert "lora_target" in info.value.message


def test_lora_target_is_names_or_a_regex_or_all_linear():
    assert lora_targets("q_proj, v_proj") == ["q_proj", "v_proj"]
    assert lora_targets("all") == lora_targets("all-linear") == "all-linear"  # ROLL's "all"
    assert lora_targets(r".*\.(q|v)_proj") == r".*\.(q|v)_proj"


def test_a_lora_actor_serves_the_reference_of_its_own_base_model():
    cfg = load_config_dict({**KL, **lora()})
    assert reference_from_actor(cfg)
    assert [r.role for r in device_roles(cfg)] == ["actor_train", "actor_infer"]
    other = load_config_dict({**lora(), "use_kl_loss": True, "kl_loss_coef": 0.1, "reference": {
        "model_args": {"model_name_or_path": "builtin://tiny-qwen2"}}})
    assert not reference_from_actor(other)  # another model: a reference role of its own
    assert "reference" in [r.role for r in device_roles(other)]
    assert not reference_from_actor(load_config_dict(KL))  # no adapter to disable


class _Actor:
    def forward_base_logprobs(self, batch):
        return ("base of", batch)


def test_the_reference_logprobs_are_asked_of_actor_train_with_the_adapter_off():
    roles = Roles(_Actor(), None, None, None, {}, None, reference_in_actor=True)
    assert roles.reference_logprobs("batch") == ("base of", "batch")
    assert Roles(_Actor(), None, None, None, {}, None).reference_logprobs("batch") is None


VLLM = {"actor_infer": {"strategy_args": {"strategy_name": "vllm"}}}


def test_an_adapter_sync_needs_vllm_hf_train_and_no_fully_trained_module():
    served = {**VLLM, **lora(lora_sync="adapter")}
    assert load_config_dict(served).actor_train.model_args.lora_sync == "adapter"
    for other, why in [({}, "vllm alone serves"),  # hf_infer, the default
                       ({**VLLM, **lora(lora_sync="adapter", additional_target="norm")},
                        "additional_target")]:
        with pytest.raises(ConfigError) as info:
            load_config_dict({**lora(lora_sync="adapter"), **other}, source="f.yaml")
        assert info.value.key_path == "actor_train.model_args.lora_sync", why
        assert why in info.value.message
    with pytest.raises(ConfigError) as info:
        load_config_dict({"actor_train": {"model_args": {"lora_sync": "adapter"}}})
    assert "lora_target" in info.value.message  # no adapter at all
    # what actor_infer's worker is started with (roles.py): the adapter's rank and scale
    assert served_adapter(load_config_dict({**VLLM, **lora(lora_sync="adapter",
                                                           lora_rank=4)})) == (4, 8.0)
    assert served_adapter(load_config_dict({**VLLM, **lora()})) is None  # merged


def test_vllm_lora_fields_without_a_served_adapter_are_refused():
    shaped = {"actor_infer": {"strategy_args": {"strategy_name": "vllm",
                                                "strategy_config": {"max_loras": 2}}}}
    with pytest.raises(ConfigError) as info:
        load_config_dict({**shaped, **lora()}, source="f.yaml")  # merged: vllm serves none
    assert info.value.key_path.endswith("strategy_config.max_loras")
    served = {"actor_train": {"model_args": {"lora_target": "all-linear",
                                             "lora_sync": "adapter"}}}
    assert load_config_dict({**shaped, **served})  # shapes the adapters it serves
