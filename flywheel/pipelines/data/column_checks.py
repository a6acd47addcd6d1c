"""The columns an RLVR config reads, checked against its data files' first record.

A config that names a column its data lacks (a converted ROLL file keeps ROLL's default
`response: solution`) validated and failed when the run loaded its prompts, after Ray and
the model had started. `platform validate` and `platform run` read the first record of
every data file that exists here (a missing file is environment_checks' warning: the file
may be on the cluster) and refuse a prompt or answer column it does not have, naming the
file, the key that chose the column and the columns the file has. Only the first record is
read: a column missing further down is the loader's error, with its line.
"""

from __future__ import annotations

from pathlib import Path

from flywheel.config.kinds import kind_of
from flywheel.config.schema import DataArgs, PipelineConfig
from flywheel.pipelines.data.data_files import read_rows
from flywheel.pipelines.data.prompt_data import (
    BUILTIN_DATA,
    ROLL_COLUMNS,
    column_value,
    record_columns,
)
from flywheel.pipelines.data.records import DataError
from flywheel.platform.config.errors import ConfigError


def check_data_columns(cfg: PipelineConfig) -> None:
    """ConfigError for the first data file that lacks a column the config reads."""
    if not kind_of(cfg).responses:  # SFT reads its records itself (pipelines/sft)
        return
    reads = [("actor_train", cfg.actor_train.data_args)]
    if cfg.validation is not None and cfg.eval_steps:
        reads.append(("validation", cfg.validation.data_args))
    for role, args in reads:
        if args.reasoning_gym is not None:
            continue
        try:
            columns = record_columns(args, role)
        except DataError as error:
            raise ConfigError("", f"{role}.data_args", str(error)) from None
        for index, name in enumerate(args.file_name):
            path = Path(name)
            if name in BUILTIN_DATA or not path.is_file():
                continue
            row = _first_row(path, f"{role}.data_args.file_name[{index}]")
            if row is None:
                continue
            for what, column, key in (("prompt", columns.prompt, _prompt_key(args)),
                                      ("answer", columns.answer, _key(args, "answer_key"))):
                try:
                    column_value(row, column)
                except KeyError:
                    raise ConfigError("", f"{role}.data_args.{key}",
                                      f"the {what} column '{column}' is not in {name} (its "
                                      f"first record has {', '.join(row) or 'no columns'}); "
                                      f"name the column that holds the {what}") from None


def _first_row(path: Path, key_path: str) -> dict | None:
    try:
        for _, row in read_rows(path):
            return row
    except (ValueError, OSError) as error:  # DataFileError is a ValueError
        raise ConfigError("", key_path, str(error)) from None
    return None


def _key(args: DataArgs, ours: str) -> str:
    """The key that chose the column: ROLL's spelling when written, else flywheel's."""
    roll = ROLL_COLUMNS.get(ours)
    return roll if roll and getattr(args, roll) is not None else ours


def _prompt_key(args: DataArgs) -> str:
    return "messages" if args.messages is not None else _key(args, "prompt_key")
