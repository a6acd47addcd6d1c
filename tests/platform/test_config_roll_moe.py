"""ROLL's MoE-on-Megatron and colocated examples through `platform convert --from roll`.

Fixtures (tests/data/configs/roll/moe/): megatron_moe.yaml is the MoE strategy_config of
qwen3-30BA3B-rlvr_megatron on the small RLVR file (interop/roll/fit/megatron.py);
colocated_fsdp2.yaml the placement of qwen3-30BA3B-rlvr_fsdp2 (both actors on every device, a
two-GPU engine). Each converts and validates; the router keys that change the math act or refuse the
file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flywheel.config.derived import offloads_between_phases
from flywheel.pipelines.config import convert_roll, load_config_dict
from flywheel.platform.config.yaml_source import load_layers

MOE = Path(__file__).parents[1] / "data" / "configs" / "roll" / "moe"
WHERE = "actor_train.strategy_args.strategy_config"


def moe_file(tmp_path: Path, pretrain: str | None = None, accum: int | None = None,
             **megatron) -> Path:
    """megatron_moe.yaml with `megatron` added to (None: removed from) its strategy_config."""
    data = load_layers(MOE / "megatron_moe.yaml").data
    data.pop("hydra", None)
    if accum:
        data["actor_train"]["training_args"]["gradient_accumulation_steps"] = accum
    config = data["actor_train"]["strategy_args"]["strategy_config"]
    for key, value in megatron.items():
        config.pop(key, None) if value is None else config.update({key: value})
    if pretrain:
        data["pretrain"] = pretrain
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_an_moe_actor_on_megatron_trains_on_deepspeed_with_each_key_accounted_for():
    conversion = convert_roll(MOE / "megatron_moe.yaml")
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    train = cfg.actor_train
    assert train.strategy_args.strategy_name == "deepspeed_train"
    assert train.strategy_args.strategy_config == {"zero_stage": 3}  # ep 4, pp 2 split weights
    assert train.model_args.moe_aux_loss_coef == "model"  # Megatron's unset coefficient
    assert not train.model_args.disable_gradient_checkpointing  # moe_layer_recompute
    assert train.model_args.dtype == "bf16"  # strategy_config.bf16
    # Megatron: 8 devices / (pp 2 x cp 2) = 2 data-parallel ranks x 1 x 16; here 8 x 1 x 4
    args = train.training_args
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (1, 4)
    dropped = {d.split(":")[0] for d in conversion.dropped}
    for key in ("moe_token_dispatcher_type", "moe_grouped_gemm", "moe_shared_expert_overlap",
                "moe_permute_fusion", "pipeline_model_parallel_layout",
                "expert_model_parallel_size", "sequence_parallel", "context_parallel_size"):
        assert f"{WHERE}.{key}" in dropped, key
    assert any(m.startswith(f"{WHERE} (moe_layer_recompute: True) -> ") for m in
               conversion.mapped)


def test_a_qwen3_moe_actor_without_context_parallelism_stays_on_megatron(tmp_path):
    """The same file at context_parallel_size 1: the Qwen3-MoE actor stays on
    megatron_train (megatron-core's MoE layers, EP 4, the interleaved schedule); the keys
    megatron_train reads are kept, those it refuses as speed-ups or memory savings are
    dropped with its reason, the load-balancing loss maps, the rest are dropped with theirs."""
    # 8 devices / PP 2 = 4 data-parallel ranks (2 with ROLL's CP 2): 1 x 8 x 4 = 32 samples
    conversion = convert_roll(moe_file(tmp_path, accum=8, context_parallel_size=None))
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    train = cfg.actor_train
    assert train.strategy_args.strategy_name == "megatron_train"
    assert train.strategy_args.strategy_config == {
        "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 2,
        "virtual_pipeline_model_parallel_size": 8, "expert_model_parallel_size": 4,
        "use_distributed_optimizer": True, "moe_token_dispatcher_type": "alltoall"}
    assert train.model_args.moe_aux_loss_coef == "model"
    assert train.training_args.gradient_accumulation_steps == 8  # Megatron's own ranks
    dropped = {d.split(":")[0]: d for d in conversion.dropped}
    for key, why in (("sequence_parallel", "tensor_model_parallel_size >= 2"),
                     ("moe_grouped_gemm", "grouped_gemm"),
                     ("moe_layer_recompute", "recompute_granularity"),
                     ("moe_shared_expert_overlap", "the same numbers"),
                     ("moe_permute_fusion", "the same numbers"),
                     ("pipeline_model_parallel_layout", "splits the layers evenly")):
        assert why in dropped[f"{WHERE}.{key}"], key
    assert any(m.startswith("actor_train: the qwen3_moe model stays on megatron_train")
               for m in conversion.mapped)
    # TP 2 with sequence parallelism (what megatron-core needs for MoE under TP) stays,
    # both kept, and so do the experts sliced over those 2 ranks; experts sliced over
    # ranks that are not the TP ranks (not built) go to deepspeed_train
    for etp in (None, 2):
        conversion = convert_roll(moe_file(tmp_path, accum=16, context_parallel_size=None,
                                           tensor_model_parallel_size=2,
                                           expert_tensor_parallel_size=etp))
        assert conversion.missing == []
        load_config_dict(conversion.data)
        config = conversion.data["actor_train"]["strategy_args"]["strategy_config"]
        assert config["tensor_model_parallel_size"] == 2 and config["sequence_parallel"]
        assert config.get("expert_tensor_parallel_size") == etp
    conversion = convert_roll(moe_file(tmp_path, accum=8, context_parallel_size=None,
                                       expert_tensor_parallel_size=2))
    assert conversion.data["actor_train"]["strategy_args"]["strategy_name"] == (
        "deepspeed_train")
    assert any("expert_tensor_parallel_size 1 or tensor_model_parallel_size (this file: 2 "
               "at tensor_model_parallel_size 1)" in m for m in conversion.mapped)


@pytest.mark.parametrize(("megatron", "coef", "refused"), [
    ({"moe_aux_loss_coeff": 0.01}, 0.01, None),
    ({"moe_aux_loss_coeff": 0.0}, None, None),  # no such loss: nothing to add
    ({"moe_router_load_balancing_type": "none"}, None, None),
    ({"moe_router_load_balancing_type": "sinkhorn"}, None, "load-balancing loss 'sinkhorn'"),
    ({"moe_expert_capacity_factor": 1.25}, None, "moe_expert_capacity_factor = 1.25"),
    ({"moe_z_loss_coeff": 0.001}, None, "moe_z_loss_coeff = 0.001"),
    ({"moe_router_dtype": "fp32"}, None, "moe_router_dtype = 'fp32'"),
    ({"moe_new_knob": 1}, None, "the Megatron setting moe_new_knob"),
])
def test_router_keys_that_change_the_math_act_or_refuse_the_file(megatron, coef, refused,
                                                                 tmp_path):
    conversion = convert_roll(moe_file(tmp_path, **megatron))
    if refused is not None:
        assert [m for m in conversion.missing if refused in m], conversion.missing
        return
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    assert cfg.actor_train.model_args.moe_aux_loss_coef == coef
    if coef is None:
        assert any("no load-balancing loss" in d for d in conversion.dropped)


def test_an_moe_family_transformers_lacks_is_refused(tmp_path):
    conversion = convert_roll(moe_file(tmp_path, pretrain="acme/wide-moe-1T"))
    assert conversion.missing == ["an MoE model on Megatron whose family flywheel cannot "
                                  "train on deepspeed_train (model_name_or_path = "
                                  "acme/wide-moe-1T)"]


def test_the_optimizer_steps_batch_is_kept_or_the_file_refused(tmp_path):
    # tp 2 x pp 2 x cp 2 = 8: Megatron's 1 x 16 on 8 / 8 ranks is 1 x 2 on 8 ZeRO ranks
    conversion = convert_roll(moe_file(tmp_path, tensor_model_parallel_size=2))
    assert conversion.missing == []
    args = conversion.data["actor_train"]["training_args"]
    assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"]) == (1, 2)
    # a factor of 128: 1 x 16 samples per Megatron rank cannot spread over 128x the ranks
    conversion = convert_roll(moe_file(tmp_path, tensor_model_parallel_size=32))
    assert [m for m in conversion.missing if "does not divide by 128" in m]


def test_colocated_actors_with_a_two_gpu_engine_take_turns(tmp_path):
    """ROLL's RLVR workers offload around every step whatever is_offload_states says; the
    converted run takes turns (offload_between_phases auto), which is what lets actor_train
    share the engine's second GPU (checks.check_sibling_devices)."""
    conversion = convert_roll(MOE / "colocated_fsdp2.yaml")
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    assert offloads_between_phases(cfg)
    data = load_layers(MOE / "colocated_fsdp2.yaml").data
    data.pop("hydra", None)
    data["is_offload_states"] = True
    path = tmp_path / "written.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    conversion = convert_roll(path)
    assert conversion.missing == []
    assert [d for d in conversion.dropped if d.startswith("is_offload_states: ROLL's RLVR")]


def test_a_domain_mix_not_summing_to_one_gives_the_last_domain_the_rest(tmp_path):
    """qwen3-235BA22B writes 0.4 + 0.3 + 0.1 + 0.1 (a domain commented out): ROLL gives
    the last domain what the others leave of each batch."""
    data = load_layers(MOE / "colocated_fsdp2.yaml").data
    data.pop("hydra", None)
    data["actor_train"]["data_args"]["domain_interleave_probs"] = {"math_rule": 0.7,
                                                                   "other": 0.1}
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    conversion = convert_roll(path)
    probs = conversion.data["actor_train"]["data_args"]["domain_interleave_probs"]
    assert probs == {"math_rule": 0.7, "other": pytest.approx(0.3)}


def test_a_forward_only_moe_reference_on_megatron_infer_stays_on_megatron(tmp_path):
    """megatron_infer becomes megatron_train with its Megatron layout (the MoE model known
    by its name too, fit/megatron.MOE_FAMILIES): a Qwen3-MoE reference at TP 1 without
    context parallelism stays on megatron_train at its expert parallelism, while the
    actor (CP 2, which megatron_train lacks) goes to deepspeed_train."""
    data = load_layers(MOE / "megatron_moe.yaml").data
    data.pop("hydra", None)
    data["use_kl_loss"], data["kl_loss_coef"] = True, 0.1
    data["reference"] = {"device_mapping": "list(range(0,8))", "strategy_args": {
        "strategy_name": "megatron_infer",
        "strategy_config": {"expert_model_parallel_size": 4, "moe_grouped_gemm": True}}}
    path = tmp_path / "kl.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    conversion = convert_roll(path)
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    assert cfg.reference.strategy_args.strategy_name == "megatron_train"
    # grouped GEMM dropped with megatron_train's reason (a speed-up needing TE)
    assert cfg.reference.strategy_args.strategy_config == {"expert_model_parallel_size": 4}
    assert cfg.actor_train.strategy_args.strategy_name == "deepspeed_train"
    assert cfg.reference.model_args.moe_aux_loss_coef is None  # forward only
