"""A user's reward function (`reward_type: python`): which form it has, how it is called,
and what its answers become. Pure: no import of the user's module here (python_reward.py).

Forms. The function's form is told by the names of its parameters (inspect.signature),
checked in this order, so that the signatures users already have run as written:

1. a parameter named `completions`: TRL's batched `reward_funcs` form, called once per
   batch as `fn(prompts=[...], completions=[...], **columns)`, every column of the
   records as a list with one value per completion (TRL leaves out `prompt`, which
   `prompts` replaces, and so do we). It returns a list with one entry per completion.
2. a parameter named `solution_str`: verl's `compute_score(data_source, solution_str,
   ground_truth, extra_info)`, once per sample. `data_source` is the record's
   `data_source` column, else its tag; `ground_truth` the reference; `extra_info` the
   record's `extra_info` column when it holds a dict (verl's data layout), else the whole
   record.
3. a parameter named `response`: flywheel's `fn(prompt=..., response=..., reference=...,
   record=...)`, once per sample; `record` is the whole data record, every column.

Every argument is passed by keyword: a function receives the ones it names, or all of them
when it takes `**kwargs`. A function with none of the three names, a required parameter its
form does not pass (TRL's form excepted: its columns are known only per batch) or a
positional-only one is refused when the reward starts, in one line.

Answers (`coerce`): a finite number (any `numbers.Real` whose float() is finite: int,
float, bool, numpy scalars) is the score; a dict is `score` (a finite number) plus
metadata (its other keys, JSON, kept with the sample's reward metadata like a built-in
reward's); None says "no score for this sample" (TRL's way for a reward that does not
apply): it scores 0 and is counted (`fn_unscored`). Anything else (a string, NaN, an int
with no float such as `10**400`, a dict without `score`, metadata that is not JSON or uses
one of flywheel's own keys, a TRL list of the wrong length) is `NotAScore`, a failure of
the function like an exception (python_reward.py counts both).
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from flywheel.workers.rewards.registry import Sample
from flywheel.workers.rewards.result import RewardResult

Form = Literal["trl", "verl", "flywheel"]
# (form, the parameter name that marks it, the keywords it passes), in detection order
FORMS: tuple[tuple[Form, str, tuple[str, ...]], ...] = (
    ("trl", "completions", ("prompts", "completions")),
    ("verl", "solution_str", ("data_source", "solution_str", "ground_truth", "extra_info")),
    ("flywheel", "response", ("prompt", "response", "reference", "record")),
)
# metadata keys flywheel sets itself: a function's metadata may not use them
RESERVED = frozenset({"fn_error", "fn_unscored", "fn_traceback", "timed_out", "crashed",
                      "out_of_memory", "unscored_by"})
# record columns TRL's form does not pass as columns (prompts replaces prompt)
NOT_COLUMNS = frozenset({"prompt", "prompts", "completions"})
SHOWN_CHARS = 80  # of a bad answer's repr, in its one-line reason


class NotAScore(ValueError):
    """A function's answer that is not a score; the message says what it was."""


@dataclass(frozen=True)
class UserFunction:
    fn: Callable[..., Any]
    form: Form
    accepts: frozenset[str] | None  # keywords it names; None: any (it takes **kwargs)

    @property
    def batched(self) -> bool:
        return self.form == "trl"

    def call_one(self, sample: Sample) -> Any:
        """The function's raw answer for one sample (verl's and flywheel's forms)."""
        record = sample.record or {}
        if self.form == "verl":
            extra = record.get("extra_info")
            args = {"data_source": str(record.get("data_source") or record.get("tag") or ""),
                    "solution_str": sample.response, "ground_truth": sample.reference,
                    "extra_info": extra if isinstance(extra, dict) else record}
        else:
            args = {"prompt": sample.prompt, "response": sample.response,
                    "reference": sample.reference, "record": record}
        return self.fn(**self._kept(args))

    def call_batch(self, samples: list[Sample]) -> list[Any]:
        """The function's raw answers, one per sample (TRL's form), or NotAScore."""
        records = [s.record or {} for s in samples]
        columns = {key for record in records for key in record} - NOT_COLUMNS
        args = {"prompts": [s.prompt for s in samples],
                "completions": [s.response for s in samples],
                **{key: [record.get(key) for record in records] for key in sorted(columns)}}
        answers = self.fn(**self._kept(args))
        if not isinstance(answers, list | tuple) or len(answers) != len(samples):
            got = (f"{len(answers)} values" if isinstance(answers, list | tuple)
                   else shown(answers))
            raise NotAScore(f"{got} for a batch of {len(samples)} completions (expected a "
                            f"list with one score per completion)")
        return list(answers)

    def _kept(self, args: dict[str, Any]) -> dict[str, Any]:
        if self.accepts is None:
            return args
        return {k: v for k, v in args.items() if k in self.accepts}


def user_function(fn: Any, path: str) -> UserFunction:
    """`fn` (imported from `path`) with its form, or TypeError saying why it has none."""
    if not callable(fn):
        raise TypeError(f"{path} is a {type(fn).__name__}, not a function")
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        raise TypeError(f"{path}: its parameters cannot be read (inspect.signature)") from None
    named = {n for n, p in params.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    listed = named | {n for n, p in params.items() if p.kind is p.POSITIONAL_ONLY}
    found = [(form, passed) for form, marker, passed in FORMS if marker in listed]
    if not found:
        raise TypeError(f"{path}: no parameter names its form; write fn(prompt, response, "
                        f"reference, record) (flywheel), compute_score(data_source, "
                        f"solution_str, ground_truth, extra_info) (verl) or "
                        f"fn(prompts, completions, **columns) (TRL, batched)")
    form, passed = found[0]
    for name, p in params.items():
        required = p.default is p.empty
        if p.kind is p.POSITIONAL_ONLY and required:
            raise TypeError(f"{path}: parameter '{name}' is positional-only; rewards are "
                            f"called with keyword arguments ({', '.join(passed)})")
        if required and name in named and name not in passed and form != "trl":
            raise TypeError(f"{path}: required parameter '{name}' is not one that {form}'s "
                            f"form passes ({', '.join(passed)}); give it a default")
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    return UserFunction(fn, form, None if takes_any else frozenset(named))


def coerce(answer: Any) -> RewardResult:
    """A function's answer as a RewardResult (metadata: its own keys, then fn_error and
    fn_unscored), or NotAScore."""
    if answer is None:
        return RewardResult(0.0, {"fn_error": False, "fn_unscored": True})
    if not isinstance(answer, dict):
        return RewardResult(finite(answer), {"fn_error": False, "fn_unscored": False})
    if "score" not in answer:
        raise NotAScore(f"a dict without 'score' (keys: {', '.join(map(str, answer))})")
    metadata = {k: v for k, v in answer.items() if k != "score"}
    if not all(isinstance(k, str) for k in metadata):
        raise NotAScore("a dict whose metadata keys are not all strings")
    if taken := sorted(RESERVED & metadata.keys()):
        raise NotAScore(f"metadata with flywheel's own key(s) {', '.join(taken)}")
    try:
        json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise NotAScore(f"metadata that is not JSON ({e})") from None
    return RewardResult(finite(answer["score"]),
                        {**metadata, "fn_error": False, "fn_unscored": False})


def finite(value: Any) -> float:
    """`value` as a float score, or NotAScore. A number that has no float (an int or
    Fraction past 1.8e308: float() raises OverflowError) or whose float() raises anything
    is NotAScore too (issue 53: `10**400` stopped the run)."""
    if not isinstance(value, numbers.Real):
        raise NotAScore(f"{shown(value)}, not a number")
    try:
        score = float(value)
    except Exception as e:  # noqa: BLE001 (a user type's __float__ may raise anything)
        raise NotAScore(f"{shown(value)}, which has no float value "
                        f"({type(e).__name__}: {str(e)[:SHOWN_CHARS]})") from None
    if not math.isfinite(score):
        raise NotAScore(f"{score}, not a finite number")
    return score


def shown(value: Any) -> str:
    """A value and its type in a few words, for a one-line reason. A huge int is shown by
    its size (repr refuses past 4300 digits), and a repr that raises by its type."""
    if isinstance(value, int) and value.bit_length() > 4 * SHOWN_CHARS:
        text = f"an int of {value.bit_length()} bits"
        return f"{text} (a {type(value).__name__})"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 (a user type's __repr__ may raise anything)
        text = "<no repr>"
    if len(text) > SHOWN_CHARS:
        text = text[:SHOWN_CHARS - 3] + "..."
    return f"{text} (a {type(value).__name__})"
