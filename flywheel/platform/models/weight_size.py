"""How many bytes a model's weights take, read from its checkpoint without loading it.

The local Ray's object store is sized from this (platform/ray_runtime.py): a weight sync
puts one copy of actor_train's weights there. Only safetensors headers are read (8 bytes
of length, then a JSON table of names, dtypes and shapes), so a 7B checkpoint costs a few
kilobytes of I/O. A hub id or a folder without safetensors gives None (size unknown).
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def checkpoint_numel(path: str) -> int | None:
    """Parameters (elements) in the safetensors files of folder `path`; None if none."""
    files = sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else []
    if not files:
        return None
    total = 0
    for file in files:
        with open(file, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


def weight_bytes(path: str, dtype: str) -> int | None:
    """Bytes of the checkpoint's weights held in `dtype` (a model_args.dtype)."""
    numel = checkpoint_numel(path)
    return None if numel is None else numel * DTYPE_BYTES[dtype]
