"""A ROLL role on FSDP2 (fsdp2_train / fsdp2_infer) goes to deepspeed_train (rules.py
STRATEGY_NAMES): ZeRO shards what FSDP shards, the same update with the tensors placed
otherwise. Each key of its strategy_config is accounted for here, one report line each:
what it placed or sped up, and why deepspeed_train needs none of it (CPU offload included:
memory only); a compute dtype other than the role's model_args.dtype, which would change
what is learned, and an unknown key are refused; a key no ROLL code reads is one ROLL
ignores too.

Read from ROLL's roll/distributed/strategy/fsdp2_strategy.py and its examples at 8eb27cc2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

_PLACE = "where FSDP2 places the shards; deepspeed_train's ZeRO shards over all the role's ranks"
_SPEED = "an FSDP2 kernel or memory knob; the same numbers without it"
PLACEMENT: dict[str, str] = {
    "fsdp_size": _PLACE, "reshard_after_forward": _PLACE,
    "wrap_policy": "FSDP2's units of sharding (modules wrapped); ZeRO needs no wrapping",
    "ep_size": "expert parallelism (where the experts sit); " + _PLACE,
    "efsdp_size": "the experts' shard group; " + _PLACE,
    "moe_use_grouped_mm": _SPEED, "apply_expert_patch": _SPEED, "apply_tiled_mlp": _SPEED,
    "tiled_num_shards": "the shards of apply_tiled_mlp; " + _SPEED,
    "offload_policy": "FSDP2's CPU offload of parameters, gradients and optimizer state: "
                      "memory only, the same numbers (deepspeed_train: strategy_config "
                      "offload_optimizer / offload_param)",
    "reduce_dtype": "the dtype FSDP2 all-reduces gradients in; DeepSpeed reduces them itself "
                    "(fp32 masters under bf16): rounding only",
}
# in ROLL's example files' strategy_config, read by no ROLL code at 8eb27cc2
NOT_READ = frozenset({"use_batched_model_update"})
DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16",
          "fp32": "fp32", "float32": "fp32"}


def fit_fsdp2_config(config: dict[str, Any], role: dict[str, Any], where: str,
                     out: Conversion) -> None:
    """Report (and where it acts, carry) each key of an FSDP2 role's strategy_config."""
    dtype = DTYPES.get(str((role.get("model_args") or {}).get("dtype", "bf16")))
    for key, value in config.items():
        at = f"{where}.{key}"
        if key == "offload_policy" and not value:
            out.dropped.append(f"{at}: off ({value!r})")
        elif key == "param_dtype" and DTYPES.get(str(value)) == dtype:
            out.dropped.append(f"{at}: {value!r}: the dtype FSDP2 computes in, the role's "
                               f"model_args.dtype here too")
        elif key in PLACEMENT:
            out.dropped.append(f"{at}: {value!r}: {PLACEMENT[key]}")
        elif key in NOT_READ:
            out.ignored.append(at)  # ROLL's FSDP2 strategy never reads it
        else:
            out.missing.append(f"the FSDP2 setting {key} on deepspeed_train ({at} = "
                               f"{value!r})")
