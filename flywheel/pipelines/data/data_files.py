"""Reading prompt data files: JSONL and parquet rows as dicts, each with where it came from.

Why separate from data/prompt_data.py: which columns mean what is a data_args question; how a
file is read is a format question. A new format is one branch in `read_rows`.
`file.jsonl:12` or `file.parquet row 12` names a bad row in an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

JSONL_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")


class DataFileError(ValueError):
    pass


def read_rows(path: Path) -> Iterator[tuple[str, dict]]:
    """(where, row) for every record of a JSONL (one JSON object a line) or parquet file."""
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        yield from _parquet_rows(path)
    elif suffix in JSONL_SUFFIXES:
        yield from _jsonl_rows(path)
    else:
        raise DataFileError(f"{path}: unknown data file type {suffix!r}; expected one of "
                            f"{', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES)}")


def _jsonl_rows(path: Path) -> Iterator[tuple[str, dict]]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFileError(f"{where}: not JSON ({e})") from None
            if not isinstance(row, dict):
                raise DataFileError(f"{where}: expected a JSON object, got "
                                    f"{type(row).__name__}")
            yield where, row


def _parquet_rows(path: Path) -> Iterator[tuple[str, dict]]:
    import pyarrow.parquet as pq  # ships with the pinned stack (mlflow, vllm)

    index = 0
    for batch in pq.ParquetFile(path).iter_batches():
        for row in batch.to_pylist():
            yield f"{path} row {index}", row
            index += 1
