"""Prompt records for RLVR: data files in, token ids per prompt, batches in a resumable order.

Order: each epoch is a permutation of the records drawn from `seed + epoch`, so the
records of batch b depend only on the seed and b: a resumed run, or a batch generated
ahead of time, sees exactly the prompts the uninterrupted synchronous run would have.

Files (data/data_files.py): JSONL or parquet; `builtin://arithmetic/train` and `/val` name the
built-in synthetic math splits (written on first use under the flywheel cache). Columns
(`record_columns`): flywheel's prompt_key/answer_key/tag_key or ROLL's prompt / messages /
response / id / tag, never both naming different columns. A prompt is a string or a
list of chat messages ({"role", "content"}).

Templates (`PromptEncoder`): "native" sends the text as is after the tokenizer's bos;
"chat" and ROLL's names (`TEMPLATES`) apply the tokenizer's own chat template, with
`system_prompt` first and `chat_template_kwargs` passed on. Under transformers 5,
`apply_chat_template(tokenize=True)` returns a BatchEncoding: we take its input_ids.

Length: `load_prompts` drops prompts longer than prompt_length tokens and says how many
(or refuses them, `overlong_prompts: error`); nothing longer reaches generation.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flywheel.pipelines.data.arithmetic_data import ensure_arithmetic_files
from flywheel.pipelines.data.data_files import read_rows
from flywheel.pipelines.data.prompt_templates import TEMPLATES
from flywheel.platform.config.schema import DataArgs
from flywheel.platform.models.builtin import default_cache_dir

log = logging.getLogger(__name__)

BUILTIN_DATA = {"builtin://arithmetic/train": 0, "builtin://arithmetic/val": 1}
# flywheel key -> ROLL key naming the same column
ROLL_COLUMNS = {"prompt_key": "prompt", "answer_key": "response", "tag_key": "tag"}

Prompt = str | list[dict[str, Any]]


class DataError(ValueError):
    pass


@dataclass
class PromptRecord:
    id: str
    prompt: Prompt  # text, or chat messages
    answer: str
    tag: str
    # The whole row, every column as read (JSON values), with `id` and `tag` added when the
    # row has no column of that name: what a reward function gets as its `record`
    # (workers/rewards/user_function.py), so tags, ids and extra fields reach it.
    row: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Columns:
    prompt: str
    prompt_is_messages: bool
    answer: str
    tag: str
    id: str | None


def record_columns(args: DataArgs, role: str) -> Columns:
    """Which column holds what: ROLL's keys replace flywheel's defaults; both written and
    naming different columns is an error."""
    defaults = DataArgs()
    chosen = {}
    for ours, roll in ROLL_COLUMNS.items():
        mine, theirs = getattr(args, ours), getattr(args, roll)
        if theirs is not None and mine != getattr(defaults, ours) and mine != theirs:
            raise DataError(f"{role}.data_args.{roll}: names column '{theirs}' but "
                            f"{ours} names '{mine}'; write one of them")
        chosen[ours] = theirs if theirs is not None else mine
    if args.messages is not None and args.prompt is not None:
        raise DataError(f"{role}.data_args.messages: the prompt comes from messages "
                        f"('{args.messages}') or prompt ('{args.prompt}'), not both")
    if args.messages is not None and args.prompt_key != defaults.prompt_key:
        raise DataError(f"{role}.data_args.messages: names column '{args.messages}' but "
                        f"prompt_key names '{args.prompt_key}'; write one of them")
    return Columns(prompt=args.messages or chosen["prompt_key"],
                   prompt_is_messages=args.messages is not None,
                   answer=chosen["answer_key"], tag=chosen["tag_key"], id=args.id)


def resolve_data_file(name: str) -> Path:
    if name in BUILTIN_DATA:
        files = ensure_arithmetic_files(default_cache_dir().parent / "data")
        return files[BUILTIN_DATA[name]]
    return Path(name)


def load_records(args: DataArgs, role: str) -> list[PromptRecord]:
    """Every record of `args.file_name`, validated; errors name the file and row."""
    if not args.file_name:
        raise DataError(f"{role}.data_args.file_name: no data files given")
    columns = record_columns(args, role)
    records: list[PromptRecord] = []
    for name in args.file_name:
        path = resolve_data_file(name)
        if not path.exists():
            raise DataError(f"{role}.data_args.file_name: file not found: {path}")
        for where, row in read_rows(path):
            records.append(parse_record(row, where, columns))
    if args.max_samples:
        records = records[: args.max_samples]
    if not records:
        raise DataError(f"{role}.data_args.file_name: no records in {args.file_name}")
    return records


def parse_record(row: dict, where: str, columns: Columns) -> PromptRecord:
    for column in (columns.prompt, columns.answer):
        if column not in row:
            raise DataError(f"{where}: no column '{column}' (columns: {', '.join(row)}); "
                            f"set data_args' prompt/answer columns")
    prompt = row[columns.prompt]
    if columns.prompt_is_messages and isinstance(prompt, str):
        try:
            prompt = json.loads(prompt)  # ROLL's data often stores messages as JSON text
        except json.JSONDecodeError:
            raise DataError(f"{where}: column '{columns.prompt}' is neither a list of "
                            f"messages nor its JSON text") from None
    if not isinstance(prompt, str):
        prompt = checked_messages(prompt, where)
    rid = row.get(columns.id) if columns.id else row.get("id")
    record = PromptRecord(id=str(rid) if rid is not None else where.rsplit("/", 1)[-1],
                          prompt=prompt, answer=str(row[columns.answer]),
                          tag=str(row.get(columns.tag) or ""))
    record.row = {"id": record.id, "tag": record.tag, **json_row(row)}
    return record


def json_row(row: dict) -> dict[str, Any]:
    """`row` with JSON values only (a parquet date or bytes becomes its text): it travels
    to a reward's scoring process as JSON and is checkpointed with its group."""
    return json.loads(json.dumps(row, default=str))


def checked_messages(value: Any, where: str) -> list[dict[str, Any]]:
    """A chat-message list: dicts with a string role and content."""
    ok = isinstance(value, list) and value and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m
        for m in value)
    if not ok:
        raise DataError(f"{where}: a prompt is a string or a non-empty list of "
                        f"{{'role': ..., 'content': ...}} messages, got {str(value)[:80]}")
    return [dict(m) for m in value]


@dataclass
class PromptEncoder:
    """Prompt (text or messages) -> token ids, by data_args' template, system prompt and
    chat-template keyword arguments."""

    tokenizer: Any
    template: str = "native"  # a key of TEMPLATES
    system_prompt: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    tag_to_template: dict[str, str] = field(default_factory=dict)  # tag -> template name

    def __call__(self, prompt: Prompt, tag: str = "") -> list[int]:
        template = self.tag_to_template.get(tag, self.template)
        if TEMPLATES[template] == "native":
            if not isinstance(prompt, str):
                raise DataError(f"template {template} sends text as is; a messages prompt "
                            f"needs template: chat")
            ids = self.tokenizer.encode(prompt, add_special_tokens=False)
            bos = self.tokenizer.bos_token_id
            return ([bos] if bos is not None else []) + ids
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        if self.system_prompt is not None and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        encoded = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True,
            **self.chat_template_kwargs)
        return list(encoded["input_ids"])


def prompt_encoder(tokenizer, args: DataArgs) -> PromptEncoder:
    """The encoder data_args describe (an unknown template is refused by the config)."""
    return PromptEncoder(tokenizer, args.template or "native", args.system_prompt,
                         dict(args.chat_template_kwargs), dict(args.tag_to_template))


def reward_prompt(tokenizer, prompt_ids: list[int]) -> str:
    """The `prompt` every reward receives: the text the policy was conditioned on, i.e.
    the prompt's token ids after the template (chat template, system prompt, template
    kwargs) decoded the way the response is, special tokens skipped.

    Why this text and not the record's prompt: a record's prompt is a string or a list of
    chat messages, and a reward's request is three strings (scoring_process.py); one rule
    for both shapes, every template and every data file. A judge then reads the system
    prompt and earlier turns the policy saw, and skipping special tokens keeps the
    policy's control tokens (<|im_start|>, ...) out of a judge's own chat template. The
    messages themselves stay in the record."""
    return tokenizer.decode(prompt_ids, skip_special_tokens=True)


def encode_prompt(tokenizer, prompt: Prompt, template: str | None) -> list[int]:
    """One prompt by template name alone (no system prompt or template kwargs)."""
    return PromptEncoder(tokenizer, template or "native")(prompt)


def check_template_tags(tag_to_template: dict[str, str], records: list[PromptRecord]) -> None:
    """A tag_to_template key that no record carries is a typo or the wrong data: its
    template would silently never apply."""
    unused = sorted(set(tag_to_template) - {r.tag for r in records})
    if unused:
        raise DataError(f"actor_train.data_args.tag_to_template: no training or validation "
                        f"record has tag {', '.join(unused)} (the records' tags: "
                        f"{', '.join(sorted({r.tag for r in records})) or 'none'})")


@dataclass
class PromptSet:
    records: list[PromptRecord]  # those that fit prompt_length
    dropped_overlong: int  # records filtered out for length


def load_prompts(args: DataArgs, role: str, tokenizer, prompt_length: int) -> PromptSet:
    """`load_records`, minus prompts longer than `prompt_length` tokens once encoded:
    dropped and counted (logged), or an error with `overlong_prompts: error`."""
    records = load_records(args, role)
    encode = prompt_encoder(tokenizer, args)
    kept, longest = [], 0
    for record in records:
        length = len(encode(record.prompt, record.tag))
        if length <= prompt_length:
            kept.append(record)
            continue
        longest = max(longest, length)
        if args.overlong_prompts == "error":
            raise DataError(f"{role}: record {record.id} has {length} prompt tokens, more than "
                            f"prompt_length={prompt_length} (data_args.overlong_prompts: error)")
    dropped = len(records) - len(kept)
    if dropped:
        log.warning("%s: dropped %d of %d prompts longer than prompt_length=%d tokens "
                    "(longest %d)", role, dropped, len(records), prompt_length, longest)
    if not kept:
        raise DataError(f"{role}: every prompt is longer than prompt_length={prompt_length}")
    return PromptSet(kept, dropped)


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
        return self.take(index * size, size)

    def take(self, start: int, count: int) -> list[PromptRecord]:
        """Records at positions start .. start + count - 1 of the endless stream of epochs."""
        n = len(self.records)
        return [self.records[self._permutation(p // n)[p % n]]
                for p in range(start, start + count)]
