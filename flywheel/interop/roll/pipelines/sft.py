"""ROLL's SFT pipeline (examples/start_sft_pipeline.py, roll/pipeline/sft/sft_config.py):
flywheel's sft.

ROLL trains one role, `sft_train`, on records whose columns the top-level `prompt_key`,
`query_key`, `response_key` and `system_key` name; the user turn is the prompt, then a
newline and the query when the record has one (sft_pipeline.py build_conversation). It runs
`num_train_epochs` whole passes and reads no max_steps. `fit` makes that flywheel's SFT:
the role is actor_train, the columns go into actor_train's (and validation's) data_args, the
epochs stay epochs, and `sequence_length` (ROLL's one length bound) bounds the whole record.
The role's backend is fitted by the shared walk and `finish` (fsdp2_train and
megatron_train onto deepspeed_train, fit/fsdp2.py and fit/megatron.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flywheel.interop.roll.pipelines.pipeline import RollPipeline

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

KEYS = {"system_key": None, "prompt_key": "instruction", "query_key": None,
        "response_key": "output"}
# ROLL's column key -> flywheel's data_args key naming the same column
COLUMNS = {"prompt_key": "prompt", "query_key": "query", "response_key": "response"}


def fit_sft(data: dict[str, Any], out: Conversion) -> dict[str, Any]:
    data = dict(data)
    role = data.pop("sft_train", None)
    data["actor_train"] = role if isinstance(role, dict) else {}
    out.mapped.append("sft_train -> actor_train (the role flywheel's SFT trains)")
    if data.get("max_steps") is not None:
        out.dropped.append(f"max_steps: {data.pop('max_steps')!r}: ROLL's SFT runs "
                           f"sft_train.training_args.num_train_epochs whole epochs and never "
                           f"reads it")
    _epochs(data["actor_train"], out)
    columns = _columns(data, out)
    for block in ("actor_train", "validation"):  # into flywheel's blocks, beside the walk's
        if isinstance(data.get(block), dict):
            args = out.data.setdefault(block, {}).setdefault("data_args", {})
            args.update(columns)
    _lengths(data, out)
    return data


def fit_sft_backend(out: Conversion) -> None:
    """flywheel's SFT trains on hf_train or deepspeed_train: a megatron_train sft_train goes
    to deepspeed_train, each Megatron key accounted for (fit/megatron.py). fsdp2_train went
    there already (rules.STRATEGY_NAMES, fit/fsdp2.py)."""
    from flywheel.interop.roll.fit.megatron import megatron_to_deepspeed

    strategy = (out.data.get("actor_train") or {}).get("strategy_args") or {}
    if strategy.get("strategy_name") == "megatron_train":
        megatron_to_deepspeed(out, "actor_train", "flywheel's SFT trains on hf_train or "
                                                  "deepspeed_train")


def _epochs(role: dict[str, Any], out: Conversion) -> None:
    args = role.get("training_args")
    epochs = (args or {}).get("num_train_epochs", 1.0) if isinstance(args, dict) else 1.0
    role["training_args"] = {**(args if isinstance(args, dict) else {}),
                             "num_train_epochs": epochs}
    out.mapped.append(f"sft_train.training_args.num_train_epochs: {epochs} -> "
                      f"actor_train.training_args.num_train_epochs (whole passes over the "
                      f"records, as ROLL's SFT; the steps are counted once the data is read)")


def _columns(data: dict[str, Any], out: Conversion) -> dict[str, str]:
    """flywheel's data_args column keys for ROLL's top-level column keys (their defaults
    where unset: ROLL reads `instruction` and `output` then)."""
    columns = {}
    system = data.pop("system_key", None)
    if system is not None:
        out.missing.append(f"a per-record system prompt column (system_key = {system!r}; "
                           f"flywheel's data_args.system_prompt is one text for every record)")
    for roll_key, ours in COLUMNS.items():
        written = roll_key in data
        value = data.pop(roll_key, KEYS[roll_key])
        if value is None:
            continue
        columns[ours] = value
        how = "" if written else f" (unset: ROLL's default {value!r})"
        out.mapped.append(f"{roll_key}: {value!r}{how} -> actor_train.data_args.{ours} and "
                          f"validation.data_args.{ours}")
    return columns


def _lengths(data: dict[str, Any], out: Conversion) -> None:
    """ROLL's SFT bounds a record by sequence_length alone (prompt and response together);
    flywheel's prompt_length / response_length are set to it, so the one bound acts."""
    total = data.get("sequence_length")
    if total is None:
        return
    for key in ("prompt_length", "response_length"):
        if key not in data:
            data[key] = total
    out.mapped.append(f"sequence_length: {total} -> sequence_length (prompt and response "
                      f"together; prompt_length and response_length set to it, so it is the "
                      f"bound that acts; a longer record is left out and counted, where "
                      f"ROLL's collator cuts it)")


# ROLL's shared config keys its SFT pipeline never reads (sft_pipeline.py runs whole epochs
# and validates every record): their ROLL defaults are not written out
UNREAD = frozenset({"max_steps", "val_batch_size"})

PIPELINE = RollPipeline(name="sft", title="SFT", launcher="examples/start_sft_pipeline.py",
                        roles=("sft_train",), keys=KEYS, runs_as="sft", fit=fit_sft,
                        fit_backends=fit_sft_backend, unread=UNREAD, generates=False)
