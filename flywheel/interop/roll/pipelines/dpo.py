"""ROLL's DPO pipeline (examples/start_dpo_pipeline.py, roll/pipeline/dpo/dpo_config.py):
flywheel's dpo.

Its roles are actor_train and reference (the shared worker blocks); its own keys are the
preference loss's and the pair columns (interop/roll/dpo_keys.py holds the key table:
each key's rule, what differs in meaning). `fit` applies that table to the file's top
level: the loss and column keys carry over as they are, BaseConfig keys ROLL's DPO loop
never reads are dropped with their reason, and ROLL's fixed prompt column (`instruction`)
becomes actor_train's and validation's prompt_key. The rest (the run keys, actor_train,
validation) goes through the shared walk as RLVR's do.

Where the roles train (`fit_dpo_backend`): flywheel's DPO trains actor_train on hf_train
in process or on deepspeed_train ranks, so ROLL's megatron_train actor goes to
deepspeed_train (fit/megatron.py, each Megatron key accounted for), and its reference is
a frozen copy on actor_train's backend and devices: of the reference block only
model_args.model_name_or_path acts, the rest is reported, key by key (`_fit_reference`,
before the shared walk, so the report names ROLL's values). `UNREAD` holds the shared keys
ROLL's DPO never reads (their ROLL defaults are not written).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flywheel.interop.roll.dpo_keys import DPO_IMPLIED, DPO_NOTES, dpo_top_keys
from flywheel.interop.roll.pipelines.pipeline import RollPipeline

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

KEYS = {"ipo": False, "beta": 0.1, "label_smoothing": 0.0, "chosen_key": "chosen",
        "rejected_key": "rejected"}
# the DPO table's keys fit_dpo consumes; the shared ones stay for the walk
OWN = (*KEYS, "rollout_batch_size", "num_return_sequences_in_group", "is_offload_states",
       "is_offload_optimizer_states_in_train_step", "use_sequence_packing")


def fit_dpo(data: dict[str, Any], out: Conversion) -> dict[str, Any]:
    data = dict(data)
    own = {k: data.pop(k) for k in OWN if k in data}
    values, lines, missing = dpo_top_keys(own)
    prompt = values.pop("actor_train")["data_args"]["prompt"]
    values.pop("pipeline_type")
    for key, value in values.items():
        out.data[key] = value
        out.mapped.append(f"{key}: {value!r} -> {key} (DPO's own key, the same meaning)")
    for line in lines:
        (out.dropped if ": dropped (" in line else out.mapped).append(line)
    out.missing.extend(missing)
    for block in ("actor_train", "validation"):  # ROLL reads 'instruction' whatever is set
        if isinstance(data.get(block), dict):
            written = data[block].get("data_args")
            for key in ("prompt", "messages") if isinstance(written, dict) else ():
                if key in written:
                    out.dropped.append(f"{block}.data_args.{key}: {written.pop(key)!r}: "
                                       f"ROLL's DPO never reads it (the prompt is the "
                                       f"'instruction' column)")
            args = out.data.setdefault(block, {}).setdefault("data_args", {})
            args["prompt"] = prompt
    for path, note in DPO_NOTES.items():
        value = _get(data, path.split("."))
        if value is not None and path not in ("actor_train.data_args.prompt", "reference"):
            out.mapped.append(f"{path}: {_short(value)} ({note})")
    _fit_reference(data, out)
    return data


def _fit_reference(data: dict[str, Any], out: Conversion) -> None:
    """The reference block, reported key by key against ROLL's values before the shared
    walk sees it: only its model (model_args.model_name_or_path) is kept."""
    reference = data.pop("reference", None)
    if not isinstance(reference, dict):
        return
    name = (reference.get("model_args") or {}).get("model_name_or_path")
    for path, value in _leaves(reference, ("reference",)):
        if path != ("reference", "model_args", "model_name_or_path"):
            out.dropped.append(f"{'.'.join(path)}: {_short(value)}: {DPO_NOTES['reference']}")
    if name is not None:
        data["reference"] = {"model_args": {"model_name_or_path": name}}


def fit_dpo_backend(out: Conversion) -> None:
    """actor_train onto a backend flywheel's DPO trains on: ROLL's megatron_train actor to
    deepspeed_train ranks (each Megatron key accounted for, fit/megatron.py)."""
    from flywheel.interop.roll.fit.megatron import megatron_to_deepspeed

    actor = out.data.get("actor_train") or {}
    if (actor.get("strategy_args") or {}).get("strategy_name") == "megatron_train":
        megatron_to_deepspeed(out, "actor_train", "flywheel's DPO trains on hf_train or "
                                                  "deepspeed_train")


def _get(data: dict[str, Any], path: list[str]) -> Any:
    node: Any = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _leaves(node: dict[str, Any], path: tuple[str, ...]):
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, (*path, key))
        else:
            yield (*path, key), value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ROLL's shared keys its DPO never reads: val_batch_size (it validates every pair) and
# prompt_length (sequence_length bounds a pair's rows); and the data_args answer column
# (the pairs' responses are in chosen_key / rejected_key)
UNREAD = frozenset({"val_batch_size", "prompt_length", "data_args.response"})

PIPELINE = RollPipeline(name="dpo", title="DPO", launcher="examples/start_dpo_pipeline.py",
                        roles=(), keys=KEYS, runs_as="dpo", fit=fit_dpo,
                        fit_backends=fit_dpo_backend, unread=UNREAD, generates=False)
assert DPO_IMPLIED["pipeline_type"] == PIPELINE.runs_as
