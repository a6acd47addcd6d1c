"""Synthetic verifiable math: two-digit addition, `ab+cd=` -> `xyz`.

Why this task: an exact-match reward is trivially verifiable, the built-in tiny model can
learn it in well under a minute of CPU, and its accuracy after a short warm start sits where
RL has visible room to improve (see BACKENDS.md and `workshop/sft_recipes.py`).

Format. Operands are zero-padded to 2 digits and the answer to 3 (`07+05=` -> `012`), so every
prompt is 6 characters and every answer 3: sequences in a batch never need padding and token
positions never shift between examples.

Token layout (the contract with the pipeline and the warm start):
`prompt` is plain text with no special tokens. The pipeline encodes it and puts
`bos_token_id` in front; the response is the answer characters followed by `<eos>`:

    <bos> 1 2 + 3 4 = | 0 4 6 <eos>
    ---- prompt ----- | - response -

The bos is added by whoever tokenises, not stored in the text, so the same record works with
any tokenizer (a hub model's bos differs from ours) and a literal "<bos>" never has to be
parsed out of a string.

Splits. The 10,000 ordered operand pairs are partitioned once by a fixed permutation
(`PARTITION_SEED`, not the caller's seed) into `val` (1,000 pairs) and `train` (9,000 pairs),
so train and val are disjoint whatever seeds callers pick; `seed` only orders a split.
`random.Random` is used because its shuffle is stable across platforms and Python versions.

Not here: the reward (workers/rewards) and dataset loading for pipelines (they read JSONL).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path
from typing import Literal

Split = Literal["train", "val"]

OPERAND_WIDTH = 2
ANSWER_WIDTH = 3
NUM_PAIRS = 100 * 100
NUM_VAL_PAIRS = 1_000
PARTITION_SEED = 1_234_567  # fixed forever: changing it would move pairs between splits
TRAIN_FILENAME = "arithmetic_train.jsonl"
VAL_FILENAME = "arithmetic_val.jsonl"


def format_prompt(a: int, b: int) -> str:
    """`7, 5` -> `"07+05="`."""
    return f"{a:0{OPERAND_WIDTH}d}+{b:0{OPERAND_WIDTH}d}="


def format_answer(a: int, b: int) -> str:
    """`7, 5` -> `"012"` (always `ANSWER_WIDTH` characters)."""
    return f"{a + b:0{ANSWER_WIDTH}d}"


def split_pairs(split: Split) -> list[tuple[int, int]]:
    """The operand pairs of one split, in canonical order (disjoint across splits)."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    order = list(range(NUM_PAIRS))
    random.Random(PARTITION_SEED).shuffle(order)
    chosen = order[:NUM_VAL_PAIRS] if split == "val" else order[NUM_VAL_PAIRS:]
    return [divmod(k, 100) for k in sorted(chosen)]


def make_arithmetic_dataset(
    n: int | None = None, seed: int = 0, split: Split = "train"
) -> list[dict[str, str]]:
    """`n` records `{"id", "prompt", "answer"}` from `split`, shuffled by `seed`.

    `n=None` returns the whole split (9,000 train / 1,000 val). Records are distinct pairs; asking
    for more than the split holds is an error rather than silent repetition.
    """
    pairs = split_pairs(split)
    if n is None:
        n = len(pairs)
    if not 0 <= n <= len(pairs):
        raise ValueError(f"n must be in [0, {len(pairs)}] for split {split!r}, got {n}")
    random.Random(seed).shuffle(pairs)
    return [
        {"id": f"add-{a:02d}-{b:02d}", "prompt": format_prompt(a, b), "answer": format_answer(a, b)}
        for a, b in pairs[:n]
    ]


def _atomic_write_text(path: Path, text: str) -> None:
    """Write to a temp file beside `path`, then rename over it: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _jsonl_text(records: list[dict]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)


def write_jsonl(path: str | Path, records: list[dict]) -> Path:
    """Write one JSON object per line, atomically. Returns the path."""
    path = Path(path)
    _atomic_write_text(path, _jsonl_text(records))
    return path


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def ensure_arithmetic_files(directory: str | Path, seed: int = 0) -> tuple[Path, Path]:
    """Write the full train and val splits as JSONL under `directory`; return both paths.

    A file is rewritten only when its content differs from what this code generates now, so the
    call is cheap when nothing changed and self-healing when the recipe or a file did.
    """
    directory = Path(directory)
    paths = []
    for split, name in (("train", TRAIN_FILENAME), ("val", VAL_FILENAME)):
        path = directory / name
        text = _jsonl_text(make_arithmetic_dataset(None, seed=seed, split=split))
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            _atomic_write_text(path, text)
        paths.append(path)
    return paths[0], paths[1]
