"""Prompt records for RLVR: data files in, token ids per prompt, batches in a resumable order.

Order: each epoch is a permutation of the records drawn from `seed + epoch`, so the
records of batch b depend only on the seed and b: a resumed run, or a batch generated
ahead of time, sees exactly the prompts the uninterrupted synchronous run would have.

Files (data/data_files.py): JSONL or parquet; `builtin://arithmetic/train` and `/val` name the
built-in synthetic math splits (written on first use under the flywheel cache). Or no
files: `data_args.reasoning_gym` generates the records (data/reasoning_gym_data.py). Columns
(`record_columns`): flywheel's prompt_key/answer_key/tag_key or ROLL's prompt / messages /
response / id / tag, never both naming different columns. A prompt is a string or a
list of chat messages ({"role", "content"}).

Templates (`PromptEncoder`): "native" sends the text as is after the tokenizer's bos;
"chat" and ROLL's names (`TEMPLATES`) apply the tokenizer's own chat template, with
`system_prompt` first and `chat_template_kwargs` passed on. Either way a prompt's text is
tokenized as text (platform/models/text_tokens.py): `<|im_start|>` written in a record is
characters, not a turn; only the template writes roles.

Length: `load_prompts` drops prompts longer than prompt_length tokens and says how many
(or refuses them, `overlong_prompts: error`); nothing longer reaches generation.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flywheel.config.schema import DataArgs
from flywheel.pipelines.data.arithmetic_data import ensure_arithmetic_files
from flywheel.pipelines.data.data_files import (
    OversizeRow,
    oversize_record,
    read_rows,
    warn_oversize,
)
from flywheel.pipelines.data.image_files import ImageArgs
from flywheel.pipelines.data.image_prompts import (
    ImageItem,
    ImagePromptEncoder,
    encode_image_prompts,
)
from flywheel.pipelines.data.prompt_templates import TEMPLATES
from flywheel.pipelines.data.records import (
    DataError,
    Prompt,
    PromptRecord,
    images_in_parts,
    json_images,
    json_row,
)
from flywheel.platform.models.cache import default_cache_dir  # not .builtin: it imports torch
from flywheel.platform.models.text_tokens import chat_ids, content_ids, fits_bytes, text_bytes

log = logging.getLogger(__name__)

BUILTIN_DATA = {"builtin://arithmetic/train": 0, "builtin://arithmetic/val": 1}
# flywheel key -> ROLL key naming the same column
ROLL_COLUMNS = {"prompt_key": "prompt", "answer_key": "response", "tag_key": "tag"}


@dataclass(frozen=True)
class Columns:
    prompt: str
    prompt_is_messages: bool
    answer: str
    tag: str
    id: str | None
    image: str = "images"  # data_args.image_key


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
                   answer=chosen["answer_key"], tag=chosen["tag_key"], id=args.id,
                   image=args.image_key)


def resolve_data_file(name: str) -> Path:
    if name in BUILTIN_DATA:
        files = ensure_arithmetic_files(default_cache_dir().parent / "data")
        return files[BUILTIN_DATA[name]]
    return Path(name)


def data_rows(args: DataArgs, role: str, oversize: list[str]
              ) -> Iterator[tuple[str, dict]]:
    """(file:line, row) of every row of `args.file_name`, in order, for every loader of
    fixed records (prompts, SFT, pairs). A row over data_args.max_record_bytes is not
    yielded: where it was is appended to `oversize` (or it is refused, as
    overlong_prompts says). No files, or a missing one, is a DataError."""
    if not args.file_name:  # now, not at the first row: before the caller's own checks
        raise DataError(f"{role}.data_args.file_name: no data files given")
    return _rows(args, role, oversize)


def _rows(args: DataArgs, role: str, oversize: list[str]) -> Iterator[tuple[str, dict]]:
    for name in args.file_name:
        path = resolve_data_file(name)
        if not path.exists():
            raise DataError(f"{role}.data_args.file_name: file not found: {path}")
        for where, row in read_rows(path, args.max_record_bytes):
            if isinstance(row, OversizeRow):
                oversize.append(oversize_record(where, row, args.max_record_bytes,
                                                args.overlong_prompts, role))
                continue
            yield where, row


def load_records(args: DataArgs, role: str, oversize: list[str] | None = None
                 ) -> list[PromptRecord]:
    """Every record of `args.file_name` (or generated by `args.reasoning_gym`), validated;
    errors name the file and row. Records over data_args.max_record_bytes are dropped
    (where each was appended to `oversize`, and one warning) or refused."""
    if args.reasoning_gym is not None:
        # here, not at the top: it imports this module (PromptRecord, DataError)
        from flywheel.pipelines.data.reasoning_gym_data import reasoning_gym_records

        return reasoning_gym_records(args.reasoning_gym, f"{role}.data_args.reasoning_gym")
    oversize = [] if oversize is None else oversize
    rows = data_rows(args, role, oversize)
    columns = record_columns(args, role)
    records = [parse_record(row, where, columns) for where, row in rows]
    warn_oversize(log, oversize, args.max_record_bytes, role)
    if args.max_samples:
        records = records[: args.max_samples]
    if not records:
        raise DataError(f"{role}.data_args.file_name: no records in {args.file_name}")
    return records


def column_value(row: dict, column: str) -> Any:
    """`row[column]`; a dotted name the row lacks reads inside dict columns
    ("reward_model.ground_truth"). KeyError when neither is there."""
    if column in row:
        return row[column]
    node: Any = row
    for part in column.split(".") if "." in column else [column]:
        if not isinstance(node, dict) or part not in node:
            raise KeyError(column)
        node = node[part]
    return node


def parse_record(row: dict, where: str, columns: Columns) -> PromptRecord:
    for column in (columns.prompt, columns.answer):
        try:
            column_value(row, column)
        except KeyError:
            raise DataError(f"{where}: no column '{column}' (columns: {', '.join(row)}); "
                            f"set data_args' prompt/answer columns") from None
    prompt = row[columns.prompt]
    if columns.prompt_is_messages and isinstance(prompt, str):
        try:
            prompt = json.loads(prompt)  # ROLL's data often stores messages as JSON text
        except json.JSONDecodeError:
            raise DataError(f"{where}: column '{columns.prompt}' is neither a list of "
                            f"messages nor its JSON text") from None
    inline: list[str] = []
    if not isinstance(prompt, str):
        prompt, inline = images_in_parts(checked_messages(prompt, where), where)
    rid = row.get(columns.id) if columns.id else row.get("id")
    record = PromptRecord(id=str(rid) if rid is not None else where.rsplit("/", 1)[-1],
                          prompt=prompt, answer=str(column_value(row, columns.answer)),
                          tag=str(row.get(columns.tag) or ""))
    record.images = json_images(row.get(columns.image), f"{where}: column '{columns.image}'")
    if inline and record.images:
        raise DataError(f"{where}: images both in column '{columns.image}' and inside its "
                        f"messages' image parts; give them in one place")
    record.images = record.images or inline
    rest = {k: v for k, v in row.items() if k != columns.image}
    if inline:  # the messages without their image data, as the column's images are kept out
        rest[columns.prompt] = prompt
    record.row = {"id": record.id, "tag": record.tag, **json_row(rest)}
    return record


# The roles chat templates render; any other would be written as a header of its own
# (`<|im_start|>hacker`) by templates that print the role as given.
CHAT_ROLES = ("system", "user", "assistant", "tool")
# Part types of a part-list content (text, and the image parts records.images_in_parts takes)
PART_TYPES = ("text", "image", "image_url")


def checked_messages(value: Any, where: str) -> list[dict[str, Any]]:
    """A chat-message list: dicts with a known role and text content (a string, or a list
    of text / image parts); anything else is refused naming the record and the field."""
    ok = isinstance(value, list) and value and all(
        isinstance(m, dict) and "role" in m and "content" in m for m in value)
    if not ok:
        raise DataError(f"{where}: a prompt is a string or a non-empty list of "
                        f"{{'role': ..., 'content': ...}} messages, got {str(value)[:80]}")
    for i, message in enumerate(value):
        role, content = message["role"], message["content"]
        if role not in CHAT_ROLES:
            raise DataError(f"{where}: message {i} role: {str(role)[:40]!r} is not one of "
                            f"{', '.join(CHAT_ROLES)}")
        if not isinstance(content, str) and not _text_parts(content):
            raise DataError(f"{where}: message {i} content: expected text (or a list of "
                            f"{{'type': 'text', 'text': ...}} / image parts), got "
                            f"{type(content).__name__} {str(content)[:40]}")
    return [dict(m) for m in value]


def _text_parts(content: Any) -> bool:
    return isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") in PART_TYPES
        and (p["type"] != "text" or isinstance(p.get("text"), str)) for p in content)


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
            ids = content_ids(self.tokenizer, prompt)  # the text's control tokens: text
            bos = self.tokenizer.bos_token_id
            return ([bos] if bos is not None else []) + ids
        messages = prompt_messages(prompt)
        if self.system_prompt is not None and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        # only the template writes roles: the messages' contents are tokenized as text
        return chat_ids(self.tokenizer, messages, add_generation_prompt=True,
                        **self.chat_template_kwargs)


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


def prompt_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """The prompt as chat messages before any template: a text prompt is one user turn.
    What a reward with its own chat template renders (workers/rewards/reward_model.py)."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


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
    # image data (issue 29): every record encoded by the model's processor, image tokens
    # counted in prompt_length (image_prompts.py); None: text prompts, tokenizer-encoded
    image_encoder: ImagePromptEncoder | None = None
    skipped_bad_images: int = 0  # records dropped for a bad image (bad_images: skip)


def load_prompts(args: DataArgs, role: str, tokenizer, prompt_length: int,
                 processor: Callable[[], Any] | None = None) -> PromptSet:
    """`load_records`, minus prompts longer than `prompt_length` tokens once encoded:
    dropped and counted (logged), or an error with `overlong_prompts: error`. Data with
    images goes through `load_image_prompts` with `processor()`, the model's processor."""
    oversize: list[str] = []
    records = load_records(args, role, oversize)
    if any(r.images for r in records):
        found = load_image_prompts(args, role, records, prompt_length, processor)
        found.dropped_overlong += len(oversize)
        return found
    encode = prompt_encoder(tokenizer, args)
    kept, longest = [], 0
    too_many_bytes = fits_bytes(tokenizer, prompt_length)
    for record in records:
        size = text_bytes(record.prompt)
        if size > too_many_bytes:  # over prompt_length for sure: not tokenized
            if args.overlong_prompts == "error":
                raise DataError(f"{role}: record {record.id} has {size} bytes of prompt "
                                f"text, more than prompt_length={prompt_length} tokens can "
                                f"hold (data_args.overlong_prompts: error)")
            continue
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
    return PromptSet(kept, dropped + len(oversize))


def image_prompt_encoder(args: DataArgs, role: str, processor: Any) -> ImagePromptEncoder:
    """The encoder of image records: the model's processor and chat template, data_args'
    pixel bounds, image folder, system prompt and template kwargs."""
    if args.tag_to_template:
        raise DataError(f"{role}.data_args.tag_to_template: image prompts are rendered by "
                        f"the processor's one chat template; remove it")
    bounds = ImageArgs(args.image_key, args.image_folder, args.image_max_pixels,
                       args.image_min_pixels)
    return ImagePromptEncoder(processor, bounds, args.template or "native",
                              args.system_prompt, dict(args.chat_template_kwargs))


def load_image_prompts(args: DataArgs, role: str, records: list[PromptRecord],
                       prompt_length: int, processor: Callable[[], Any] | None) -> PromptSet:
    """Records of data with images: every record (text-only ones too, so one template
    renders them all) encoded by the model's processor; prompt_length counts image tokens;
    overlong and bad-image records dropped and counted, or refused (data_args)."""
    with_images = next(r for r in records if r.images)
    model = processor() if processor is not None else None
    if model is None or getattr(model, "image_processor", None) is None:
        raise DataError(f"{role}: record {with_images.id} has images "
                        f"(data_args.image_key '{args.image_key}') but the model has no image "
                        f"processor: a text-only model takes no images")
    encode = image_prompt_encoder(args, role, model)
    items = [ImageItem(r.id, r.prompt, r.images) for r in records]
    kept = encode_image_prompts(items, encode, prompt_length, args.overlong_prompts,
                                args.bad_images, role)
    by_id = {id(item): record for item, record in zip(items, records)}
    return PromptSet([by_id[id(item)] for item in kept.items], kept.dropped_overlong,
                     encode, kept.skipped_bad)


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
