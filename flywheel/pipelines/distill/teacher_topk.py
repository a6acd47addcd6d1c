"""The teacher's top-k next-token distributions over offline distillation's fixed records:
computed on the fly for each batch, or cached to disk in chunks and read back.

Why a cache: the records are fixed, so the teacher's distribution of every record is the
same at every epoch and in every run that distills from the same teacher with the same k
(comparing divergences, loss weights, students); a teacher forward costs about as much as
the student's. Why chunks: a record's top-k is positions × k values and ids, and the whole
dataset's may not fit one file; a chunk (`teacher_cache_chunk_rows` records, in the order
the records were loaded) is computed the first time a batch needs one of its records, then
written atomically (a temporary file renamed), so a killed run leaves whole chunks only.

Never reused silently: a cache lives in `<teacher_logits_cache>/<digest>/`, the digest of
everything its values depend on (`cache_key`): the bytes of the teacher's files (weights,
config), its dtype, the records' token ids and loss positions, k and the temperature. A
changed teacher, dataset, template, k, temperature or distill_on_prompt gives another
folder; `key.json` in it says what the digest covers. Chunks read are kept in memory for
the run (about records × positions × k × 8 bytes).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from flywheel.config.schema import ModelArgs
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.hf_model import load_causal_lm
from flywheel.workers.strategies.topk_head import TOPK_INDICES, TOPK_LOG_PROBS, teacher_topk

# per record: (log-probs [P, k], vocabulary ids [P, k]) at its P loss positions, in order
RecordTopK = tuple[torch.Tensor, torch.Tensor]
HASHED_SUFFIXES = (".safetensors", ".bin", ".json", ".gguf", ".model", ".txt", ".jinja")


def model_digest(path: str) -> str:
    """A digest of a model folder's (or file's) contents: every weight, config and
    tokenizer file, by name and bytes."""
    root = Path(path)
    files = [root] if root.is_file() else sorted(
        p for p in root.rglob("*") if p.is_file() and p.suffix in HASHED_SUFFIXES)
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(root) if file != root else file.name).encode())
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def cache_key(teacher_path: str, model_args: ModelArgs, rows: list[list[int]],
              positions: list[list[int]], k: int, temperature: float) -> dict[str, str]:
    """What a cache's values depend on, each as a digest or value (key.json)."""
    data = hashlib.sha256(json.dumps([rows, positions]).encode()).hexdigest()
    return {"teacher": model_digest(teacher_path), "dtype": model_args.dtype,
            "records": data, "k": str(k), "temperature": repr(float(temperature))}


def key_digest(key: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]


@dataclass
class TeacherTopK:
    """The teacher, loaded in this process, and its top-k of the records (module doc).

    `rows[i]` are record i's token ids (prompt + response), `positions[i]` the columns
    whose token the loss reads (the response's, or every one after the first with
    distill_on_prompt); `cache_dir` None: no cache. The model is shared by the records'
    sets (`dataclasses.replace` with other rows: validation's)."""

    model: torch.nn.Module  # the teacher (load_teacher), frozen
    teacher_path: str
    model_args: ModelArgs
    rows: list[list[int]]
    positions: list[list[int]]
    k: int
    temperature: float
    pad_id: int
    batch_rows: int  # records per teacher forward (the teacher's infer_batch_size)
    cache_dir: Path | None = None
    chunk_rows: int = 256
    folder: Path | None = field(init=False, default=None)
    chunks: dict[int, list[RecordTopK]] = field(init=False, default_factory=dict)
    computed_chunks: int = field(init=False, default=0)  # this run computed (and wrote)
    read_chunks: int = field(init=False, default=0)  # this run read from disk

    def __post_init__(self) -> None:
        if self.cache_dir is not None:
            key = cache_key(self.teacher_path, self.model_args, self.rows, self.positions,
                            self.k, self.temperature)
            self.folder = self.cache_dir / key_digest(key)
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / "key.json").write_text(json.dumps(key, indent=1))

    def compute(self, records: list[int]) -> list[RecordTopK]:
        """The teacher's forward over `records`, batch_rows at a time."""
        out: list[RecordTopK] = []
        for start in range(0, len(records), self.batch_rows):
            part = records[start:start + self.batch_rows]
            batch = rows_batch([self.rows[i] for i in part], self.pad_id)
            wanted = torch.zeros_like(batch.input_ids)
            for r, i in enumerate(part):
                wanted[r, self.positions[i]] = 1
            values, ids = teacher_topk(self.model, batch, wanted, self.k, self.temperature)
            for r, i in enumerate(part):
                cols = self.positions[i]
                out.append((values[r, cols].clone(), ids[r, cols].clone()))
        return out

    def chunk(self, c: int) -> list[RecordTopK]:
        if c in self.chunks:
            return self.chunks[c]
        path = self.folder / f"chunk_{c:06d}.pt" if self.folder is not None else None
        if path is not None and path.exists():
            self.chunks[c] = torch.load(path, weights_only=True)
            self.read_chunks += 1
            return self.chunks[c]
        first = c * self.chunk_rows
        values = self.compute(list(range(first, min(first + self.chunk_rows, len(self.rows)))))
        self.computed_chunks += 1
        if path is not None:
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            torch.save(values, tmp)
            os.replace(tmp, path)
        self.chunks[c] = values
        return values

    def of(self, records: list[int]) -> list[RecordTopK]:
        """Each record's top-k: from the cache's chunks, or computed now without one."""
        if self.folder is None:
            return self.compute(records)
        return [self.chunk(i // self.chunk_rows)[i % self.chunk_rows] for i in records]


def load_teacher(path: str, model_args: ModelArgs, device: torch.device) -> torch.nn.Module:
    """The teacher in eval mode with no gradient (it never trains)."""
    model = load_causal_lm(path, model_args, device).eval()
    model.requires_grad_(False)
    return model


def rows_batch(rows: list[list[int]], pad_id: int) -> TokenBatch:
    """Right-padded rows, every token attended (the loss mask is the caller's)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])  # [B, L]
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return TokenBatch(ids, mask, mask.float())


def attach_topk(batch: TokenBatch, topk: list[RecordTopK], positions: list[list[int]],
                k: int) -> None:
    """The teacher's top-k of each row onto the batch as per-token extras [B, L, k]; a
    slot without a value (off the positions; k above the vocabulary) has log-prob -inf,
    which the divergences count as no outcome."""
    rows, width = batch.input_ids.shape
    values = torch.full((rows, width, k), -torch.inf)  # -inf: no outcome (divergences.py)
    ids = torch.zeros(rows, width, k, dtype=torch.long)
    for r, ((v, i), cols) in enumerate(zip(topk, positions)):
        values[r, cols, :v.shape[1]] = v
        ids[r, cols, :i.shape[1]] = i
    batch.attach(TOPK_LOG_PROBS, values, per="token")
    batch.attach(TOPK_INDICES, ids, per="token")
