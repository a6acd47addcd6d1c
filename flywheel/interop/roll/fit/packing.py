"""ROLL's sequence-packing keys on convert: where packing acts, and the keys that go.

ROLL writes `use_sequence_packing` with `sequence_packing_args` on every role that runs a
forward (actor_train, reference, critic), mostly on Megatron. flywheel packs the rows of a
training role (actor_train, critic) on hf_train and deepspeed_train, its training forward
and its log-prob forward alike (`training_args.sequence_packing`, whose width is ROLL's
`max_packed_sequence_length_train`). Everywhere else packing changes no number, only the
speed, so the keys are dropped with that reason instead of refused:

- megatron_train runs padded micro-batches of one shape (its pipeline schedule);
- reference and actor_infer have no training_args: their forwards run padded;
- `algorithm` and `min_num_micro_batches_*` balance packs over ranks and micro-batches
  (flywheel packs first-fit by decreasing length within each micro-batch), and
  `max_packed_sequence_length_forward` is the log-prob forward's width, which flywheel
  takes from the training width.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flywheel.workers.strategies.registry import backends_with

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

# The backends that cut micro-batches by a token budget and pack rows (their registry flag).
TOKEN_BUDGET_BACKENDS = backends_with(lambda spec: spec.token_budget)

KEYS = ("use_sequence_packing", "sequence_packing_args")
WIDTH = "max_packed_sequence_length_train"
PACKING_ROLES = ("actor_train", "critic")


def fit_packing(data: dict[str, Any], out: Conversion) -> None:
    """Every role's packing keys as ROLL wrote them (`data`), once the roles' backends are
    final (after the Megatron LoRA and MoE moves to deepspeed_train)."""
    roles = [r for r in ("actor_train", "actor_infer", "reference", "critic")
             if isinstance(data.get(r), dict)]
    roles += [f"rewards.{name}" for name, block in (data.get("rewards") or {}).items()
              if isinstance(block, dict)]
    for role in roles:
        block = data
        for part in role.split("."):
            block = block[part]
        _role_packing(block, role, out)


def _role_packing(value: dict[str, Any], role: str, out: Conversion) -> None:
    if not any(k in value for k in KEYS):
        return
    on = value.get("use_sequence_packing") is True
    args = value.get("sequence_packing_args") or {}
    strategy = ((out.data.get(role) or {}).get("strategy_args") or {}).get(
        "strategy_name", "hf_train")
    if not on:
        for key in (k for k in KEYS if k in value):
            out.dropped.append(f"{role}.{key}: off (use_sequence_packing is not true)")
        return
    if role not in PACKING_ROLES:
        why = "only training roles pack in flywheel; this role's forward runs padded"
    elif strategy not in TOKEN_BUDGET_BACKENDS:
        why = f"{strategy} runs padded micro-batches of one shape"
    else:
        why = None
    if why:
        for key in (k for k in KEYS if k in value):
            out.dropped.append(f"{role}.{key}: {why}; the same numbers, only slower")
        return
    training = out.data.setdefault(role, {}).setdefault("training_args", {})
    training["sequence_packing"] = True
    out.mapped.append(f"{role}.use_sequence_packing -> {role}.training_args.sequence_packing")
    for key, item in args.items():
        where = f"{role}.sequence_packing_args.{key}"
        if key == WIDTH and isinstance(item, int) and item > 0:
            training["max_packed_sequence_length"] = item
            out.mapped.append(f"{where} -> {role}.training_args.max_packed_sequence_length")
        elif key == "max_packed_sequence_length_forward":
            out.dropped.append(f"{where}: the role's log-prob forward packs at the training "
                               f"width (max_packed_sequence_length)")
        else:
            out.dropped.append(f"{where}: balances packs over ranks and micro-batches; "
                               f"flywheel packs first-fit by decreasing length within each "
                               f"micro-batch, the same numbers")
