"""ROLL's LoRA keys on convert: which backend trains the adapter, and the keys that go.

ROLL turns LoRA on by writing `lora_target` on actor_train (its other lora_* keys shape
the adapter) and writes the same keys on actor_infer, whose vLLM then serves the adapter.
actor_train's keys carry over as written (roll_rules.MODEL_ARGS); here the rest fits:

- The backend. flywheel trains an adapter on hf_train and deepspeed_train
  (the registry entries' `lora` flag). Three of ROLL's four LoRA examples train on
  megatron_train, which trains none here: they go to deepspeed_train
  (roll_megatron.megatron_to_deepspeed, which MoE files share), whose ZeRO stage shards
  what Megatron's layout shards. The update is the same: LoRA on the same base with the
  same batches and optimizer; only where the tensors live differs. Each key of Megatron's
  strategy_config is reported there; its recomputation becomes gradient checkpointing.
  A LoRA actor on any other backend is a missing feature.
- The other roles' LoRA keys are dropped with the reason (`LORA_ELSEWHERE`): actor_infer
  receives the merged weights, so the adapter it would serve is already in them.
- A reference of the same base model is actor_train's model with the adapter disabled
  (derived.reference_from_actor): `drop_inert` (defaults.py) then drops its own
  devices, backend and batch size, each with that reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flywheel.config.acts_when.table import LORA_ELSEWHERE, LORA_KEYS
from flywheel.interop.roll.fit.megatron import megatron_to_deepspeed
from flywheel.workers.strategies.registry import backends_with

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

# The backends that train a LoRA adapter (their registry entries' flag).
LORA_BACKENDS = backends_with(lambda spec: spec.lora)

def fit_lora(out: Conversion) -> None:
    for role in LORA_ELSEWHERE:
        _drop_elsewhere(out, role)
    train = out.data.get("actor_train") or {}
    if not (train.get("model_args") or {}).get("lora_target"):
        return
    strategy = train.get("strategy_args") or {"strategy_name": "hf_train"}
    name = strategy.get("strategy_name")
    if name == "megatron_train":
        megatron_to_deepspeed(out, "actor_train", "flywheel's megatron_train trains no LoRA "
                                                  "adapter, deepspeed_train does")
    elif name not in LORA_BACKENDS:
        out.missing.append(f"LoRA on {name} (actor_train.strategy_args.strategy_name = "
                           f"{name}; flywheel trains an adapter on "
                           f"{' or '.join(LORA_BACKENDS)})")


def _drop_elsewhere(out: Conversion, role: str) -> None:
    """A role's LoRA keys (role "rewards.*": each reward's), dropped with the reason."""
    if role == "rewards.*":
        for name in out.data.get("rewards") or {}:
            _drop_keys(out, ("rewards", name), LORA_ELSEWHERE[role])
    else:
        _drop_keys(out, (role,), LORA_ELSEWHERE[role])


def _drop_keys(out: Conversion, block: tuple[str, ...], why: str) -> None:
    node: Any = out.data
    for key in (*block, "model_args"):
        node = node.get(key) if isinstance(node, dict) else None
    for key in LORA_KEYS:
        if isinstance(node, dict) and key in node:
            node.pop(key)
            out.dropped.append(f"{'.'.join(block)}.model_args.{key}: {why}")


def drop_frozen_elsewhere(out: Conversion) -> None:
    """ROLL writes freeze_module_prefix on a reference too (its agentic Qwen3.5 files):
    it acts on the model that trains, actor_train's, so other roles' copies go."""
    for role in ("reference", "actor_infer"):
        args = (out.data.get(role) or {}).get("model_args")
        if isinstance(args, dict) and "freeze_module_prefix" in args:
            args.pop("freeze_module_prefix")
            out.dropped.append(f"{role}.model_args.freeze_module_prefix: this role never "
                               f"trains (frozen modules are actor_train's)")
