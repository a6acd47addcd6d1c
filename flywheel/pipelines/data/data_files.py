"""Reading prompt data files: JSONL, JSON-array and parquet rows as dicts, each with where it
came from.

Why separate from data/prompt_data.py: which columns mean what is a data_args question; how a
file is read is a format question. A new format is one branch in `read_rows`.
`file.jsonl:12` or `file.parquet row 12` names a bad row in an error (a line that is not
UTF-8 too). JSONL is read a line at a time, each line at most `max_record_bytes`
(data_args.max_record_bytes): a longer one is skipped in bounded pieces and handed back as
an `OversizeRow`, so a file's biggest line never sits in memory whole.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from flywheel.pipelines.data.json_array import (
    ArrayFormatError,
    array_elements,
    parse_element,
    starts_an_array,
)

JSONL_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")


class DataFileError(ValueError):
    pass


@dataclass(frozen=True)
class OversizeRow:
    """A JSONL line over the record size limit, in place of its row: never read whole."""

    size_bytes: int


def read_rows(path: Path, max_record_bytes: int | None = None
              ) -> Iterator[tuple[str, dict | OversizeRow]]:
    """(where, row) for every record of a JSONL (one JSON object a line), parquet, or
    `.json` file (JSON lines, or one JSON array of objects: json_array.py); a record longer
    than `max_record_bytes` is an `OversizeRow`, read in bounded pieces (a 100 MB line once
    took the driver to 18 GB), for the caller to drop or refuse."""
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        yield from _parquet_rows(path)
    elif suffix == ".json" and _holds_an_array(path):
        yield from _array_rows(path, max_record_bytes)
    elif suffix in JSONL_SUFFIXES:
        yield from _jsonl_rows(path, max_record_bytes)
    else:
        raise DataFileError(f"{path}: unknown data file type {suffix!r}; expected one of "
                            f"{', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES)}")


def _jsonl_rows(path: Path, max_record_bytes: int | None
                ) -> Iterator[tuple[str, dict | OversizeRow]]:
    limit = max_record_bytes or -1
    with open(path, "rb") as f:
        for lineno in itertools.count(1):
            raw = f.readline(limit + 1 if limit > 0 else -1)
            if not raw:
                return
            where = f"{path}:{lineno}"
            if 0 < limit < len(raw.rstrip(b"\r\n")):
                yield where, OversizeRow(len(raw) + _skip_line(f, raw))
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataFileError(f"{where}: not UTF-8 text (byte {e.start} of the line: "
                                    f"{e.reason})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFileError(f"{where}: not JSON ({e})") from None
            if not isinstance(row, dict):
                raise DataFileError(f"{where}: expected a JSON object, got "
                                    f"{type(row).__name__}")
            yield where, row


def _holds_an_array(path: Path) -> bool:
    with open(path, "rb") as f:
        return starts_an_array(f)


def _array_rows(path: Path, max_record_bytes: int | None
                ) -> Iterator[tuple[str, dict | OversizeRow]]:
    """The objects of a `.json` file holding one array, `file.json[12]` naming each."""
    with open(path, "rb") as f:
        try:
            for index, raw in array_elements(f, max_record_bytes or None):
                where = f"{path}[{index}]"
                if isinstance(raw, int):
                    yield where, OversizeRow(raw)
                    continue
                row = parse_element(raw, where)
                if not isinstance(row, dict):
                    raise DataFileError(f"{where}: expected a JSON object, got "
                                        f"{type(row).__name__}")
                yield where, row
        except ArrayFormatError as e:
            text = str(e)  # "[3]: ..." names an element, anything else the whole file
            raise DataFileError(text if text.startswith(str(path)) else
                                f"{path}{'' if text.startswith('[') else ': '}{text}") from None


def _skip_line(f: BinaryIO, read: bytes) -> int:
    """Read past the rest of a line whose start `read` was, 1 MiB at a time; its bytes."""
    skipped = 0
    while read and not read.endswith(b"\n"):
        read = f.readline(1 << 20)
        skipped += len(read)
    return skipped


def _parquet_rows(path: Path) -> Iterator[tuple[str, dict]]:
    import pyarrow.parquet as pq  # ships with the pinned stack (mlflow, vllm)

    index = 0
    for batch in pq.ParquetFile(path).iter_batches():
        for row in batch.to_pylist():
            yield f"{path} row {index}", row
            index += 1


def oversize_record(where: str, row: OversizeRow, limit: int, policy: str, role: str) -> str:
    """`where`, for the caller's count of dropped records; a DataFileError under
    `overlong_prompts: error`."""
    if policy == "error":
        raise DataFileError(f"{where}: a record of {row.size_bytes} bytes, more than "
                            f"{role}.data_args.max_record_bytes={limit} "
                            f"(data_args.overlong_prompts: error)")
    return where


def warn_oversize(log: logging.Logger, dropped: list[str], limit: int, role: str) -> None:
    """One warning line for the records dropped over the size limit, naming the first."""
    if dropped:
        log.warning("%s: dropped %d record(s) over data_args.max_record_bytes=%d (first at "
                    "%s)", role, len(dropped), limit, dropped[0])
