"""math_rule: 1 if the response's final answer equals the reference, else 0.

The final answer is the last `\\boxed{...}`, else what follows `####`; with neither, the
whole response goes to math-verify, which finds an answer in free text and LaTeX (an
unboxed `$\\frac{1}{2}$`, "the answer is 12"); only if it finds none, the last number.
Plain numbers compare numerically (so "046" == "46" == "46.0"); anything else goes to
math-verify, which knows LaTeX and symbolic equivalence. math-verify guards itself with
signal.alarm, which only works on the main thread and not inside C code: the reward
worker runs this in a killable process under the hard per-sample limit (time_limit.py).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from fractions import Fraction

from flywheel.config.schema import RewardConfig
from flywheel.workers.rewards.result import RewardResult

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")
_BOXED = "\\boxed{"


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...}, braces balanced (\\frac{1}{2} nests them)."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def marked_answer(text: str) -> str | None:
    """The answer a text marks explicitly: last \\boxed{...}, else what follows ####."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    return None


def reference_answer(reference: str) -> str:
    """A reference is the answer itself, unless it is a worked solution (boxed / ####)."""
    marked = marked_answer(reference)
    return reference.strip() if marked is None else marked


def _as_number(text: str) -> Fraction | None:
    text = text.strip().replace(",", "")
    if not _NUMBER.fullmatch(text):
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def _math_verify_parse(text: str) -> list:
    """math-verify's reading of `text` ([] if it finds no answer). Its own timeout works
    only on the main thread (where the scoring process calls it); the hard limit around
    every reward (time_limit.py) covers the rest, C code included."""
    from math_verify import parse

    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        return parse(text, parsing_timeout=timeout)
    except Exception:  # math-verify raises on some malformed input: no answer found
        return []


def _math_verify_equal(gold: list, pred: list) -> bool:
    from math_verify import verify

    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        return bool(verify(gold, pred, timeout_seconds=timeout))
    except Exception:  # a comparison math-verify cannot make: not shown equal
        return False


def _bare_number(response: str) -> list:
    """A response that is one plain number (e.g. "046", "-3", "7/2") as `[None, text]`, the
    shape of math-verify's parse ([value, text]) without calling it: the parse costs ~0.5 ms
    a sample (sympy), 150 ms a step of 256 samples on the arithmetic examples, where almost
    every response is a bare number. The value is None because score() reads only the text
    (found[-1]) and compares numbers itself. [] for anything else, which math-verify reads.
    Commas are left to math-verify ("1,2" is not 12 there)."""
    text = response.strip()
    return [None, text] if _NUMBER.fullmatch(text) else []


def answers_equal(gold: str, pred: str) -> bool:
    """Plain numbers numerically (exact, fast); anything else by math-verify."""
    gold_num, pred_num = _as_number(gold), _as_number(pred)
    if gold_num is not None and pred_num is not None:
        return gold_num == pred_num
    return _math_verify_equal(_math_verify_parse(f"${gold}$"), _math_verify_parse(f"${pred}$"))


def score(prompt: str, response: str, reference: str) -> RewardResult:
    """`parsed` in the metadata says whether any answer was found (the parse rate);
    `answer_from` where: marked (boxed / ####), math_verify (the whole response), number;
    `correct` whether it equals the reference (reward/correct_rate: the exact-answer
    accuracy, also when math_rule is a zero-weight part of a weighted_sum)."""
    gold = reference_answer(reference)
    marked = marked_answer(response)
    if marked is not None:
        correct = answers_equal(gold, marked)
        return RewardResult(float(correct), {"parsed": True, "answer_from": "marked",
                                             "correct": bool(correct)})
    found = _bare_number(response) or _math_verify_parse(response)
    if found:  # [sympy expression, the text it was read from]
        pred = found[-1]
        correct = (answers_equal(gold, pred) if _as_number(pred) is not None
                   else _math_verify_equal(_math_verify_parse(f"${gold}$"), found))
        return RewardResult(float(correct), {"parsed": True, "answer_from": "math_verify",
                                             "correct": bool(correct)})
    numbers = _NUMBER.findall(response.replace(",", ""))
    if numbers:
        correct = answers_equal(gold, numbers[-1])
        return RewardResult(float(correct), {"parsed": True, "answer_from": "number",
                                             "correct": bool(correct)})
    return RewardResult(0.0, {"parsed": False, "correct": False})


def build(cfg: RewardConfig) -> Callable[[str, str, str], RewardResult]:
    """The reward as built in a scoring process: math-verify imported now (about a second),
    not inside the first sample's time limit."""
    import math_verify  # noqa: F401

    return score
