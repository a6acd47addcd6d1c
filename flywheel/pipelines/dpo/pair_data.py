"""Preference pairs from data files: a prompt, a chosen and a rejected response.

A record (JSONL / parquet, `data_args.file_name`) holds its prompt in data_args' prompt
column (text, or chat messages: `data_args.messages`, as RLVR and SFT read them) and the
two responses in the top-level `chosen_key` / `rejected_key` columns (ROLL's keys, default
`chosen` / `rejected`): each a string, or a list of messages whose last one is the
assistant's reply (TRL's conversational layout, where only that reply is trained on).

Both rows of a pair are encoded as the RL pipelines lay a sample, `prompt | reply <eos>`
(the prompt through data_args' template, `prompt_data.PromptEncoder`), and stay side by
side in the pair layout (algorithms/preference/pair_logprobs.py: chosen at 2i, rejected at
2i + 1).

Bad records, each named by file:line:
- no prompt, chosen or rejected column, or one that is neither text nor messages: an error;
- chosen equal to rejected (after truncation too): no preference to learn, so refused
  (`equal_pairs: error`, the default) or dropped and counted (`equal_pairs: drop`);
- a row (prompt + response + eos) over `sequence_length` tokens: dropped and counted
  (`overlong_pairs: drop`, ROLL's filter, which drops silently), its responses cut to fit
  (`truncate`: counted; a prompt that leaves no room is dropped), or refused (`error`).
Dropped and truncated pairs are logged in one warning naming the first file:line, and
reported in the run's metrics (`PairCounts`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from flywheel.algorithms.preference.pair_logprobs import PAIR_EXTRA, pair_layout
from flywheel.config.schema import DataArgs
from flywheel.pipelines.data.data_files import warn_oversize
from flywheel.pipelines.data.prompt_data import (
    DataError,
    Prompt,
    checked_messages,
    data_rows,
    prompt_encoder,
    record_columns,
)
from flywheel.platform.models.text_tokens import content_ids
from flywheel.workers.batch import TokenBatch, pack_sequences

log = logging.getLogger(__name__)

Overlong = Literal["drop", "truncate", "error"]
Equal = Literal["drop", "error"]


@dataclass
class PairRecord:
    where: str  # file:line
    prompt: Prompt
    chosen: str
    rejected: str
    margin: float = 0.0  # margin_key's value (reward-model training), else 0


@dataclass
class PairCounts:
    """What became of the records: kept, or why not (reported as metrics at step 1)."""

    records: int = 0
    dropped_overlong: int = 0
    truncated: int = 0
    dropped_equal: int = 0
    first: dict[str, str] = field(default_factory=dict)  # reason -> first file:line

    def note(self, reason: str, where: str) -> None:
        setattr(self, reason, getattr(self, reason) + 1)
        self.first.setdefault(reason, where)

    def metrics(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}/pairs_{k}": float(getattr(self, k))
                for k in ("dropped_overlong", "truncated", "dropped_equal")}


@dataclass
class EncodedPairs:
    records: list[PairRecord]
    prompts: list[list[int]]
    chosen: list[list[int]]  # reply ids + eos (unless truncated)
    rejected: list[list[int]]
    counts: PairCounts

    def __len__(self) -> int:
        return len(self.records)

    def batch(self, pairs: list[int], pad_id: int) -> TokenBatch:
        """Rows in the pair layout: chosen of pairs[0], its rejected, chosen of pairs[1], ...,
        said by the `pair` extra (pair_logprobs.py)."""
        prompts = [self.prompts[i] for i in pairs for _ in range(2)]
        responses = [r for i in pairs for r in (self.chosen[i], self.rejected[i])]
        batch = pack_sequences(prompts, responses, pad_id)
        batch.attach(PAIR_EXTRA, pair_layout(pairs), per="sample")
        return batch


def reply_text(value: Any, where: str, column: str) -> str:
    """A response column's text: a string, or messages ending with the assistant's reply."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value:
        last = checked_messages(value, f"{where}: column '{column}'")[-1]
        if last["role"] == "assistant" and isinstance(last["content"], str):
            return last["content"]
    raise DataError(f"{where}: column '{column}' is neither text nor chat messages ending "
                    f"with the assistant's reply, got {str(value)[:80]}")


def parse_pair(row: dict, where: str, prompt_column: str, messages: bool,
               chosen_key: str, rejected_key: str, margin_key: str | None = None
               ) -> PairRecord:
    for column in (prompt_column, chosen_key, rejected_key, *([margin_key] if margin_key
                                                               else [])):
        if column not in row:
            raise DataError(f"{where}: no column '{column}' (columns: {', '.join(row)}); a "
                            f"preference record needs a prompt, '{chosen_key}' and "
                            f"'{rejected_key}' (data_args' prompt column, chosen_key, "
                            f"rejected_key)")
    prompt = row[prompt_column]
    if messages and isinstance(prompt, str):
        try:
            prompt = json.loads(prompt)
        except json.JSONDecodeError:
            raise DataError(f"{where}: column '{prompt_column}' is neither a list of "
                            f"messages nor its JSON text") from None
    if not isinstance(prompt, str):
        prompt = checked_messages(prompt, where)
    margin = 0.0
    if margin_key:
        margin = row[margin_key]
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not (
                0 <= margin < float("inf")):
            raise DataError(f"{where}: column '{margin_key}' (margin_key) is a number >= 0, "
                            f"got {str(margin)[:40]}")
    return PairRecord(where, prompt, reply_text(row[chosen_key], where, chosen_key),
                      reply_text(row[rejected_key], where, rejected_key), float(margin))


def load_pairs(args: DataArgs, role: str, chosen_key: str, rejected_key: str,
               margin_key: str | None = None) -> list[PairRecord]:
    """Every record of `args.file_name` (the first max_samples); errors name file:line."""
    oversize: list[str] = []
    rows = data_rows(args, role, oversize)
    columns = record_columns(args, role)
    records = [parse_pair(row, where, columns.prompt, columns.prompt_is_messages,
                          chosen_key, rejected_key, margin_key) for where, row in rows]
    warn_oversize(log, oversize, args.max_record_bytes, role)
    records = records[: args.max_samples] if args.max_samples else records
    if not records:
        raise DataError(f"{role}.data_args.file_name: no records in {args.file_name}")
    return records


def encode_pairs(records: list[PairRecord], args: DataArgs, role: str, tokenizer,
                 sequence_length: int, overlong: Overlong = "drop",
                 equal: Equal = "error") -> EncodedPairs:
    """The pairs tokenized and checked against `sequence_length` (module docstring)."""
    encode = prompt_encoder(tokenizer, args)
    counts = PairCounts(records=len(records))
    kept = EncodedPairs([], [], [], [], counts)
    for record in records:
        prompt = encode(record.prompt)
        sides = [content_ids(tokenizer, r) + [tokenizer.eos_token_id]
                 for r in (record.chosen, record.rejected)]
        room = sequence_length - len(prompt)
        if any(len(s) > room for s in sides):
            longest = len(prompt) + max(len(s) for s in sides)
            if overlong == "error":
                raise DataError(f"{record.where}: a pair of {longest} tokens (prompt + "
                                f"response + eos), more than sequence_length="
                                f"{sequence_length} (overlong_pairs: error)")
            if overlong == "drop" or room < 1:
                counts.note("dropped_overlong", record.where)
                continue
            sides = [s[:room] for s in sides]
            counts.note("truncated", record.where)
        if sides[0] == sides[1]:
            if equal == "error":
                raise DataError(f"{record.where}: chosen and rejected are the same "
                                f"response{' once truncated' if len(sides[0]) == room else ''}"
                                f"; there is nothing to prefer (equal_pairs: drop skips it)")
            counts.note("dropped_equal", record.where)
            continue
        kept.records.append(record)
        kept.prompts.append(prompt)
        kept.chosen.append(sides[0])
        kept.rejected.append(sides[1])
    for reason, where in counts.first.items():
        log.warning("%s: %s %d of %d pairs (sequence_length=%d; first at %s)", role,
                    reason.replace("_", " "), getattr(counts, reason), len(records),
                    sequence_length, where)
    if not kept.records:
        raise DataError(f"{role}: no pair is left to train on of {len(records)} "
                        f"(dropped: {counts.dropped_overlong} over sequence_length="
                        f"{sequence_length}, {counts.dropped_equal} with equal responses)")
    return kept
