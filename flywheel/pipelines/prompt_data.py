"""Prompt records for RLVR: JSONL files in, batches of records out, in a resumable order.

Order: each epoch is a permutation of the records drawn from `seed + epoch`, so the
records of batch b depend only on the seed and b: a resumed run, or a batch generated
ahead of time, sees exactly the prompts the uninterrupted synchronous run would have.

`builtin://arithmetic/train` and `builtin://arithmetic/val` name the built-in synthetic
math splits (written on first use under the flywheel cache). Templates turn a record's
prompt text into token ids: "native" sends the text as is after the tokenizer's bos;
"chat" (and ROLL names such as "qwen2_5") applies the tokenizer's chat template.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from flywheel.platform.config.schema import DataArgs
from flywheel.platform.data.arithmetic import ensure_arithmetic_files
from flywheel.platform.models.builtin import default_cache_dir

BUILTIN_DATA = {"builtin://arithmetic/train": 0, "builtin://arithmetic/val": 1}
NATIVE_TEMPLATES = {"native", "none", "raw"}


class DataError(ValueError):
    pass


@dataclass
class PromptRecord:
    id: str
    prompt: str
    answer: str
    tag: str


def resolve_data_file(name: str) -> Path:
    if name in BUILTIN_DATA:
        files = ensure_arithmetic_files(default_cache_dir().parent / "data")
        return files[BUILTIN_DATA[name]]
    return Path(name)


def load_records(args: DataArgs, role: str) -> list[PromptRecord]:
    """Every record of `args.file_name`, validated; errors name the file and line."""
    if not args.file_name:
        raise DataError(f"{role}.data_args.file_name: no data files given")
    records: list[PromptRecord] = []
    for name in args.file_name:
        path = resolve_data_file(name)
        if not path.exists():
            raise DataError(f"{role}.data_args.file_name: file not found: {path}")
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    records.append(PromptRecord(
                        id=str(row.get("id", f"{path.name}:{lineno}")),
                        prompt=str(row[args.prompt_key]),
                        answer=str(row[args.answer_key]),
                        tag=str(row.get(args.tag_key, "")),
                    ))
                except (json.JSONDecodeError, KeyError, TypeError) as e:
                    raise DataError(f"{path}:{lineno}: bad record ({type(e).__name__}: {e}); "
                                    f"expected JSON with '{args.prompt_key}' and "
                                    f"'{args.answer_key}'") from None
    if args.max_samples:
        records = records[: args.max_samples]
    if not records:
        raise DataError(f"{role}.data_args.file_name: no records in {args.file_name}")
    return records


def encode_prompt(tokenizer, text: str, template: str) -> list[int]:
    if template in NATIVE_TEMPLATES:
        ids = tokenizer.encode(text, add_special_tokens=False)
        return ([tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []) + ids
    messages = [{"role": "user", "content": text}]
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                              tokenize=True))


@dataclass
class PromptOrder:
    """Which records make up batch b: a pure function of (seed, b), so prefetching, resuming
    and regenerating a batch always see the same prompts in the same order."""

    records: list[PromptRecord]
    seed: int
    _perms: dict[int, list[int]] = field(default_factory=dict, repr=False)

    def _permutation(self, epoch: int) -> list[int]:
        if epoch not in self._perms:
            order = list(range(len(self.records)))
            random.Random(self.seed + epoch).shuffle(order)
            self._perms = {epoch: order}  # batches move forward: keep only the current epoch
        return self._perms[epoch]

    def batch(self, index: int, size: int) -> list[PromptRecord]:
        n = len(self.records)
        positions = range(index * size, (index + 1) * size)
        return [self.records[self._permutation(p // n)[p % n]] for p in positions]
