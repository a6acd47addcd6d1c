"""ROLL's MoE roles on Megatron, and the roles flywheel's megatron_train cannot train.

flywheel's megatron_train builds a megatron-core GPTModel from Hugging Face Qwen2 / Llama
weights, and Qwen2-MoE / Qwen3-MoE on megatron-core's MoE layers with expert parallelism
(experts whole or sliced over the TP ranks; under TP with sequence parallelism; no context
parallelism). A ROLL MoE role of those families at such a layout stays on megatron_train
(`keep_moe_on_megatron`):
the keys megatron_train reads are kept (validate then drops, with its reason, any it
refuses as a speed-up or memory saving), the router keys act as below, and every other
key is dropped with its reason or reported missing.
The rest goes to deepspeed_train: LoRA adapters (fit/lora.py sends those files here), other
MoE families or layouts; its ZeRO stage shards what Megatron's layout shards
(`zero_stage_for`): the same update on the same model, the tensors placed otherwise.

Every key of the Megatron strategy_config is accounted for, never dropped in a heap:

- LAYOUT keys only place the computation or speed it up (parallel sizes, the pipeline
  layout, the distributed optimizer, overlaps, fused kernels, grouped GEMM, the token
  dispatcher): dropped, each with its reason, and replaced by the zero_stage.
- RECOMPUTE keys (recompute_granularity, moe_layer_recompute, recompute_modules) trade
  compute for memory: they become gradient checkpointing (`disable_gradient_checkpointing:
  false`); Megatron recomputes a subset, HF checkpoints whole layers, the gradients match.
- ROUTER keys change what an MoE layer computes (the load-balancing and z losses, token
  dropping, the router's dtype and top-k): each acts here or the file is refused.
  transformers' MoE block drops no token and keeps the router in the model's dtype, so
  those keys convert only at their neutral values. The load-balancing loss acts:
  `moe_aux_loss_coeff` becomes `model_args.moe_aux_loss_coef` (workers/strategies/
  router_loss.py, Megatron's form and scale); unset, ROLL's Megatron takes the checkpoint's
  own `router_aux_loss_coef` (mcore_adapter's templates map it for every MoE family, with
  `aux_loss` balancing), which `moe_aux_loss_coef: model` reads at start. 0, or balancing
  `none`, is no such loss; Megatron's other balancing types are refused.
- `bf16` / `fp16` were made `model_args.dtype` before (roll_backends.megatron_precision).
- Any other key is refused: the conversion cannot vouch for what it does.

MoE families: the model must be one transformers builds as a causal LM, or Qwen3-Omni,
whose thinker flywheel loads (MOE_FAMILIES, whose modeling module this transformers must
have), judged from the pretrain name: the
checkpoint's config is not read offline. A family it lacks is refused.
"""

from __future__ import annotations

import importlib.util
import math
import re
from typing import TYPE_CHECKING, Any

from flywheel.interop.roll import keys as keys
from flywheel.workers.strategies import megatron_options  # light: no torch, no megatron

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

# Megatron's parallel sizes that split the parameters (and their gradients and optimizer
# state) across devices; context parallelism splits the sequence, not the weights.
MODEL_PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                  "expert_model_parallel_size")
_PLACE = "where Megatron places the tensors; deepspeed_train places them by its zero_stage"
_SPEED = "a Megatron speed-up (fused kernel or overlap); the same numbers without it"
_MOE_SPEED = ("how Megatron runs the experts (grouped GEMM, token dispatch, overlap); "
              "the same routing and the same expert outputs in transformers' MoE block")
LAYOUT: dict[str, str] = {
    **dict.fromkeys(("tensor_model_parallel_size", "pipeline_model_parallel_size",
                     "virtual_pipeline_model_parallel_size", "expert_model_parallel_size",
                     "expert_tensor_parallel_size", "context_parallel_size",
                     "sequence_parallel", "use_distributed_optimizer",
                     "distrib_optim_fully_reshardable", "pipeline_model_parallel_layout",
                     "account_for_loss_in_pipeline_split",
                     "account_for_embedding_in_pipeline_split"), _PLACE),
    **dict.fromkeys(("overlap_grad_reduce", "overlap_param_gather", "bias_activation_fusion",
                     "apply_rope_fusion", "cross_entropy_loss_fusion", "masked_softmax_fusion",
                     "gradient_accumulation_fusion"), _SPEED),
    **dict.fromkeys(("moe_grouped_gemm", "moe_token_dispatcher_type",
                     "moe_shared_expert_overlap", "moe_permute_fusion", "moe_router_fusion"),
                    _MOE_SPEED),
}
RECOMPUTE = ("recompute_granularity", "moe_layer_recompute", "recompute_modules",
             "recompute_method", "recompute_num_layers")
# Router keys, and the value at which each computes what transformers' MoE block does
# (no router loss, no token dropped); None: only unset does.
ROUTER_NEUTRAL: dict[str, Any] = {
    "moe_z_loss_coeff": 0.0, "moe_expert_capacity_factor": None,
    "moe_input_jitter_eps": None, "moe_router_dtype": None, "moe_router_topk": None,
    "moe_router_score_function": None, "moe_router_pre_softmax": None,
    "moe_enable_routing_replay": False,
}
# Act only with a capacity factor (token dropping), which ROUTER_NEUTRAL refuses.
WITH_CAPACITY = ("moe_pad_expert_input_to_capacity", "moe_token_drop_policy")
AUX = "moe_aux_loss_coeff"
BALANCING = "moe_router_load_balancing_type"
# pretrain name pattern -> transformers model_type (checked against transformers' causal-LM
# mapping); the first match wins, so the more specific patterns come first.
MOE_FAMILIES: tuple[tuple[str, str], ...] = (
    # before qwen3-*-a3b: Qwen3-Omni-30B-A3B is qwen3_omni_moe, whose thinker flywheel
    # trains (workers/strategies/omni_thinker.py)
    (r"qwen3[-_.]?omni", "qwen3_omni_moe"),
    (r"qwen3[-_.]?next", "qwen3_next"), (r"qwen3\.5-.*-a\d+b", "qwen3_5_moe"),
    (r"qwen3-.*-a\d+b", "qwen3_moe"), (r"qwen2-.*-a\d+b|qwen1\.5-moe", "qwen2_moe"),
    (r"mixtral", "mixtral"),
)


def zero_stage_for(megatron: dict[str, Any]) -> tuple[int, str]:
    """The ZeRO stage that shards what a Megatron strategy_config shards, and why."""
    split = {k: megatron[k] for k in MODEL_PARALLEL if (megatron.get(k) or 1) > 1}
    if split:
        sizes = ", ".join(f"{k} {v}" for k, v in split.items())
        return 3, f"Megatron splits the parameters across devices ({sizes}): ZeRO-3 does"
    if megatron.get("use_distributed_optimizer"):
        return 1, ("Megatron's distributed optimizer shards the optimizer state over the "
                   "data-parallel ranks: ZeRO-1 does")
    return 0, "Megatron replicates everything over the data-parallel ranks: ZeRO-0 does"


def is_moe(role: dict[str, Any]) -> bool:
    """A Megatron role whose strategy_config sets MoE keys or splits experts."""
    config = (role.get("strategy_args") or {}).get("strategy_config") or {}
    return any(str(k).startswith("moe_") for k in _flat(config)) or (
        config.get("expert_model_parallel_size") or 1) > 1


def fit_moe(out: Conversion) -> None:
    """Every megatron_train role holding an MoE model (by its strategy_config, or by its
    model's name: a forward-only megatron_infer role arrives without its strategy_config)
    stays on megatron_train if it builds that model at that layout, else goes to
    deepspeed_train. LoRA actors went already (roll_lora.fit_lora)."""
    for name in ("actor_train", "reference", "critic"):
        role = out.data.get(name)
        if not isinstance(role, dict) or (
                (role.get("strategy_args") or {}).get("strategy_name") != "megatron_train"):
            continue
        if not (is_moe(role) or _named_family(_model_name(role, out))):
            continue
        family = moe_family(role, out)
        if family is None:
            continue
        why = _not_on_megatron(family, _flat((role.get("strategy_args") or {}).get(
            "strategy_config") or {}))
        if why is None and out.vl:
            why = f"flywheel's megatron_train takes no images; transformers builds {family}"
        if why is None:
            keep_moe_on_megatron(out, name, family)
        else:
            megatron_to_deepspeed(out, name, why)


def _not_on_megatron(family: str, config: dict[str, Any]) -> str | None:
    """Why megatron_train cannot build this MoE role, or None."""
    if family not in megatron_options.MOE_MODEL_TYPES:
        return (f"flywheel's megatron_train builds "
                f"{' and '.join(megatron_options.MOE_MODEL_TYPES)} MoE models; "
                f"transformers builds {family}")
    etp, tp = (config.get("expert_tensor_parallel_size") or 1,
               config.get("tensor_model_parallel_size") or 1)
    if etp not in (1, tp):
        return (f"flywheel's megatron_train builds MoE models at expert_tensor_parallel_size "
                f"1 or tensor_model_parallel_size (this file: {etp} at tensor_model_parallel_"
                f"size {tp}); transformers builds {family}")
    if (config.get("tensor_model_parallel_size") or 1) > 1 and not config.get(
            "sequence_parallel"):
        return (f"megatron-core trains MoE models under tensor parallelism only with "
                f"sequence_parallel, which this file leaves off; transformers builds {family}")
    if (config.get("context_parallel_size") or 1) > 1:
        return ("flywheel's megatron_train has no context parallelism (megatron-core runs it "
                "in Transformer Engine's attention only); transformers builds " + family)
    return None


# Megatron keys megatron_train does not read, each with why dropping it leaves the update
ON_MEGATRON_DROPPED: dict[str, str] = {
    **dict.fromkeys(("pipeline_model_parallel_layout", "distrib_optim_fully_reshardable"),
                    "where Megatron places the layers or cuts its checkpoints; "
                    "megatron_train splits the layers evenly over the pipeline stages "
                    "(and virtual stages): the same update"),
    **dict.fromkeys(("overlap_param_gather", "cross_entropy_loss_fusion",
                     "masked_softmax_fusion", "gradient_accumulation_fusion",
                     "moe_shared_expert_overlap", "moe_permute_fusion", "moe_router_fusion"),
                    _SPEED),
    **dict.fromkeys(("moe_layer_recompute", "recompute_modules", "recompute_method",
                     "recompute_num_layers"),
                    "which activations Megatron recomputes; megatron_train recomputes by "
                    "recompute_granularity: the same gradients"),
}


def keep_moe_on_megatron(out: Conversion, name: str, family: str) -> None:
    """Role `name`'s MoE model stays on megatron_train, each strategy_config key kept,
    mapped, dropped with its reason, or reported missing."""
    role = out.data[name]
    strategy = role.setdefault("strategy_args", {})
    flat = _flat(strategy.get("strategy_config") or {})
    where = f"{name}.strategy_args.strategy_config"
    kept = {}
    for key, value in flat.items():
        if key in megatron_options.DEFAULTS:
            kept[key] = value
        elif key in ON_MEGATRON_DROPPED:
            out.dropped.append(f"{where}.{key}: {value!r}: {ON_MEGATRON_DROPPED[key]}")
        elif key in ROUTER_NEUTRAL or key in WITH_CAPACITY or key in (AUX, BALANCING):
            continue  # _router, below
        else:
            out.missing.append(f"the Megatron setting {key} on megatron_train ({where}."
                               f"{key} = {value!r})")
    strategy["strategy_config"] = kept
    _router(flat, where, name != "reference", out)
    out.mapped.append(f"{name}: the {family} model stays on megatron_train (megatron-core's "
                      f"MoE layers, expert_model_parallel_size "
                      f"{kept.get('expert_model_parallel_size', 1)})")


def fit_vl_megatron(out: Conversion) -> None:
    """A VL RLVR file's megatron_train roles (actor_train, reference) go to
    deepspeed_train: flywheel's Megatron path takes text alone, and images reach
    deepspeed_train's forward (derived.IMAGE_TRAIN_BACKENDS)."""
    if out.pipeline_type != "rlvr" or not out.vl:
        return
    for name in ("actor_train", "reference"):
        role = out.data.get(name)
        if isinstance(role, dict) and (
                (role.get("strategy_args") or {}).get("strategy_name") == "megatron_train"):
            megatron_to_deepspeed(out, name, "flywheel's megatron_train takes no images; "
                                             "deepspeed_train's forward does")


def moe_family(role: dict[str, Any], out: Conversion) -> str | None:
    """The transformers model_type of the role's MoE model, or None (reported missing)."""
    name = _model_name(role, out)
    family = _named_family(name)
    if family is None or not _in_transformers(family):
        known = "" if family is None else f" ({family} is not in this transformers)"
        out.missing.append(f"an MoE model on Megatron whose family flywheel cannot train on "
                           f"deepspeed_train{known} (model_name_or_path = {name})")
        return None
    return family


def _model_name(role: dict[str, Any], out: Conversion) -> str:
    return str((role.get("model_args") or {}).get("model_name_or_path")
               or out.data.get("pretrain") or "")


def _named_family(name: str) -> str | None:
    base = name.rstrip("/").rsplit("/", 1)[-1].lower()
    return next((t for pattern, t in MOE_FAMILIES if re.search(pattern, base)), None)


def _in_transformers(family: str) -> bool:
    """Whether this transformers has the family's modeling module (each of MOE_FAMILIES
    is a causal LM there, or Qwen3-Omni's thinker). Found, not imported: importing
    transformers' auto classes costs seconds, and a conversion loads no model."""
    try:
        return importlib.util.find_spec(f"transformers.models.{family}.modeling_{family}"
                                        ) is not None
    except ModuleNotFoundError:  # no transformers at all
        return False


def megatron_to_deepspeed(out: Conversion, name: str, why: str) -> None:
    """Role `name` from megatron_train to deepspeed_train, each strategy_config key
    accounted for (module docstring); `why` says why it cannot stay."""
    role = out.data[name]
    megatron = dict((role.get("strategy_args") or {}).get("strategy_config") or {})
    stage, placed = zero_stage_for(megatron)
    role["strategy_args"] = {"strategy_name": "deepspeed_train",
                             "strategy_config": {"zero_stage": stage}}
    out.mapped.append(f"{name}.strategy_args: megatron_train -> deepspeed_train with "
                      f"zero_stage {stage} ({why}; {placed}; the same update, the tensors "
                      f"placed otherwise)")
    where = f"{name}.strategy_args.strategy_config"
    trains = name != "reference"
    if trains:
        _same_global_batch(role, name, megatron, out)
    recompute = []
    for key, value in _flat(megatron).items():
        if key in LAYOUT:
            out.dropped.append(f"{where}.{key}: {value!r}: {LAYOUT[key]}")
        elif key in RECOMPUTE:
            recompute.append(key)
        elif key in ROUTER_NEUTRAL or key in WITH_CAPACITY or key in (AUX, BALANCING):
            continue  # _router, below, once for all of them
        else:
            out.missing.append(f"the Megatron setting {key} on deepspeed_train ({where}."
                               f"{key} = {value!r})")
    if is_moe({"strategy_args": {"strategy_config": megatron}}):
        _router(_flat(megatron), where, trains, out)
    if recompute and trains:
        _recompute(role, {k: _flat(megatron)[k] for k in recompute}, where, out)
    elif recompute:
        out.dropped.extend(f"{where}.{k}: recomputation in the backward; {name} runs forward "
                           f"only" for k in recompute)


def _same_global_batch(role: dict[str, Any], name: str, megatron: dict[str, Any],
                       out: Conversion) -> None:
    """Megatron's data-parallel ranks are the devices / (tensor x pipeline x context
    parallel); every device is a ZeRO rank. The optimizer step's batch (micro-batch x
    accumulation x ranks) stays ROLL's: the accumulation (then the micro-batch) shrinks by
    that factor, or the file is refused."""
    factor = 1
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                "context_parallel_size"):
        factor *= int(megatron.get(key) or 1)
    if factor == 1:
        return
    args = role.setdefault("training_args", {})
    per = int(args.get("per_device_train_batch_size", keys.TRAINING_ARGS[
        "per_device_train_batch_size"]))
    accum = int(args.get("gradient_accumulation_steps", keys.TRAINING_ARGS[
        "gradient_accumulation_steps"]))
    from_accum = math.gcd(accum, factor)
    if per % (factor // from_accum):
        out.missing.append(f"a global batch deepspeed_train's {factor}x more data-parallel "
                           f"ranks can keep ({name}.training_args: "
                           f"per_device_train_batch_size {per} x gradient_accumulation_steps "
                           f"{accum} does not divide by {factor})")
        return
    args["gradient_accumulation_steps"] = accum // from_accum
    args["per_device_train_batch_size"] = per // (factor // from_accum)
    out.mapped.append(f"{name}.training_args: per_device_train_batch_size {per} x "
                      f"gradient_accumulation_steps {accum} -> "
                      f"{args['per_device_train_batch_size']} x "
                      f"{args['gradient_accumulation_steps']} (Megatron's data-parallel "
                      f"ranks are the devices / {factor} (tensor x pipeline x context "
                      f"parallel), deepspeed_train's every device: the same samples per "
                      f"optimizer step)")


def _router(config: dict[str, Any], where: str, trains: bool, out: Conversion) -> None:
    """ROUTER keys: act as transformers' MoE block does, or the file is refused."""
    for key, neutral in ROUTER_NEUTRAL.items():
        if key in config and config[key] not in (neutral, None):
            out.missing.append(f"the MoE router setting {key} (token dropping, router losses "
                               f"and router numerics differ from transformers' block) "
                               f"({where}.{key} = {config[key]!r})")
        elif key in config:
            out.dropped.append(f"{where}.{key}: {config[key]!r}: what transformers' MoE "
                               f"block does (no token dropped, no such loss)")
    capacity = config.get("moe_expert_capacity_factor") is not None
    for key in WITH_CAPACITY:
        if key in config and not capacity:
            out.dropped.append(f"{where}.{key}: {config[key]!r}: acts only with "
                               f"moe_expert_capacity_factor, which is unset")
    if not trains:
        out.dropped.extend(f"{where}.{k}: {config[k]!r}: a loss on the router's gradient; "
                           f"this role runs forward only" for k in (AUX, BALANCING)
                           if k in config)
        return
    balancing, coeff = config.get(BALANCING, "aux_loss"), config.get(AUX)
    if balancing == "none" or coeff == 0:
        out.dropped.extend(f"{where}.{k}: {config[k]!r}: no load-balancing loss, and "
                           f"flywheel adds none unless model_args.moe_aux_loss_coef is set"
                           for k in (AUX, BALANCING) if k in config)
        return
    if balancing != "aux_loss":
        out.missing.append(f"the MoE load-balancing loss {balancing!r} ({where}.{BALANCING} "
                           f"= {balancing!r}; flywheel has Megatron's aux_loss)")
        return
    setting = "model" if coeff is None else float(coeff)
    role = out.data[where.split(".", 1)[0]]
    role.setdefault("model_args", {})["moe_aux_loss_coef"] = setting
    source = (f"{AUX} unset: ROLL's Megatron takes the checkpoint's router_aux_loss_coef"
              if coeff is None else f"{AUX}: {coeff!r}")
    out.mapped.append(f"{where} ({source}, {BALANCING} aux_loss) -> "
                      f"{where.split('.', 1)[0]}.model_args.moe_aux_loss_coef: {setting!r} "
                      f"(the same per-layer load-balancing loss at Megatron's scale)")


def _recompute(role: dict[str, Any], keys: dict[str, Any], where: str,
               out: Conversion) -> None:
    model_args = role.setdefault("model_args", {})
    written = ", ".join(f"{k}: {v!r}" for k, v in keys.items())
    if not any(keys.values()):
        out.dropped.append(f"{where} ({written}): no recomputation")
        return
    if model_args.get("disable_gradient_checkpointing", True):
        model_args["disable_gradient_checkpointing"] = False
    out.mapped.append(f"{where} ({written}) -> model_args.disable_gradient_checkpointing: "
                      f"false (recomputation in the backward)")


def _flat(config: dict[str, Any]) -> dict[str, Any]:
    """strategy_config with ROLL's `additional_configs` (more Megatron arguments, passed
    through as written) merged in at the top."""
    flat = {k: v for k, v in config.items() if k != "additional_configs"}
    flat.update(config.get("additional_configs") or {})
    return flat
