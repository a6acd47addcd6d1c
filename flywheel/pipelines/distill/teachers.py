"""What on-policy distillation checks at start, before any worker (each teacher's tokenizer
is the student's, every training record's tag has a teacher, a context_template's records
have text prompts), and the prompt each teacher is shown (`teacher_prompt`).

A teacher scores the student's token ids as they are; with another tokenizer the same ids
are other text, and the log-ratio would compare unrelated tokens. Re-tokenizing the
response for the teacher (and mapping its log-probs back onto the student's tokens) is a
different algorithm with its own errors; flywheel refuses the pair instead, with the first
difference it finds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from flywheel.config.checks.distill import teacher_tags, untaught_tags
from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.data.records import DataError, PromptRecord
from flywheel.pipelines.rlvr.generation import Group
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.models.builtin import resolve_pretrain

SPECIAL_IDS = ("eos_token_id", "pad_token_id", "bos_token_id")


def tokenizer_mismatch(student, teacher) -> str | None:
    """The first way the two tokenizers map ids differently, or None when they agree."""
    own, other = student.get_vocab(), teacher.get_vocab()
    if len(own) != len(other):
        return f"vocabularies of {len(own)} (student) and {len(other)} (teacher) tokens"
    if own != other:
        by_id = {i: t for t, i in own.items()}
        other_by_id = {i: t for t, i in other.items()}
        first = min(i for i in set(by_id) | set(other_by_id)
                    if by_id.get(i) != other_by_id.get(i))
        return (f"token id {first} is {by_id.get(first)!r} to the student and "
                f"{other_by_id.get(first)!r} to the teacher")
    for attr in SPECIAL_IDS:
        mine, theirs = getattr(student, attr, None), getattr(teacher, attr, None)
        if mine != theirs:
            return f"{attr} is {mine} to the student and {theirs} to the teacher"
    return None


def check_teacher_tokenizers(cfg: PipelineConfig, student_tokenizer,
                             load: Callable[[str], object]) -> None:
    """ConfigError naming the teacher whose tokenizer is not the student's. A teacher that
    names no model loads the run's `pretrain`, the student's own."""
    for name, teacher in cfg.teacher.items():
        model = teacher.model_args.model_name_or_path
        if not model:
            continue
        key = f"teacher.{name}.model_args.model_name_or_path"
        try:
            tokenizer = load(resolve_pretrain(model))
        except (OSError, ValueError) as e:  # no tokenizer files there (a bare checkpoint)
            raise ConfigError("", key, f"{model}: its tokenizer does not load "
                                       f"({type(e).__name__}), so it cannot be checked to be "
                                       f"the student's: give the folder its tokenizer files "
                                       f"(`platform export` writes a model folder with "
                                       f"them)") from None
        why = tokenizer_mismatch(student_tokenizer, tokenizer)
        if why is not None:
            raise ConfigError("", key, f"{model}'s tokenizer is not the student's ({why}); "
                                       f"a teacher scores the student's token ids as they "
                                       f"are, so both need one tokenizer (flywheel does not "
                                       f"re-tokenize)")


def render_context(template: str, record: PromptRecord) -> str:
    """The teacher's prompt text from the record (placeholders checked at load:
    checks/distill.py check_context_template)."""
    return template.format(prompt=record.prompt, answer=record.answer, tag=record.tag)


def teacher_prompt(cfg: PipelineConfig, encode: Callable[[str, str], list[int]]
                   ) -> Callable[[str, Group], list[int]]:
    """(teacher name, group) -> the prompt ids that teacher scores the group's responses
    on: its context_template's text encoded like the student's prompt (`encode`: the
    rollout's PromptEncoder), or the student's own prompt ids."""
    def prompt(name: str, group: Group) -> list[int]:
        template = cfg.teacher[name].context_template
        if template is None:
            return group.prompt_ids
        return encode(render_context(template, group.record), group.record.tag)
    return prompt


def check_teacher_tags(cfg: PipelineConfig, records: Iterable[PromptRecord]) -> None:
    """Every training record's tag is taken by some teacher; else a one-line DataError."""
    if not cfg.teacher:
        return
    counts = Counter(r.tag for r in records)
    routing = teacher_tags(cfg)
    for tag in untaught_tags(list(counts), routing):
        taken = "; ".join(f"{name}: {list(tags)}" for name, tags in routing.items())
        shown = f"'{tag}'" if tag else "no tag"
        raise DataError(f"actor_train.data_args: {counts[tag]} record(s) with {shown} would "
                        f"go to no teacher (teachers' tag_included: {taken}); add the tag to "
                        f"a teacher's tag_included, or a teacher with an empty tag_included")


def check_teacher_contexts(cfg: PipelineConfig, records: list[PromptRecord]) -> None:
    """A context_template writes a text prompt: records of chat messages are refused."""
    templated = [n for n, t in cfg.teacher.items() if t.context_template is not None]
    chats = sum(not isinstance(r.prompt, str) for r in records)
    if templated and chats:
        raise DataError(f"actor_train.data_args: {chats} record(s) have chat messages as "
                        f"their prompt; teacher.{templated[0]}.context_template writes a "
                        f"text prompt ({{prompt}} is the record's text): use text prompts, "
                        f"or remove context_template")
