"""math_rule: 1 if the response's final answer equals the reference, else 0.

The final answer is the last `\\boxed{...}`, else what follows `####`, else the last number
in the text. Plain numbers compare numerically (so "046" == "46" == "46.0"); anything else
goes to math-verify, which knows LaTeX and symbolic equivalence. math-verify guards itself
with signal.alarm, which only works on the main thread, so off it the timeout is dropped.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from fractions import Fraction

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")
_BOXED = "\\boxed{"


@dataclass
class RewardResult:
    score: float
    metadata: dict = field(default_factory=dict)


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


def extract_answer(text: str) -> str | None:
    """A response's final answer: the marked one, else its last number."""
    marked = marked_answer(text)
    if marked is not None:
        return marked
    numbers = _NUMBER.findall(text.replace(",", ""))
    return numbers[-1] if numbers else None


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


def _math_verify_equal(gold: str, pred: str) -> bool:
    from math_verify import parse, verify

    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        gold_parsed = parse(f"${gold}$", parsing_timeout=timeout)
        pred_parsed = parse(f"${pred}$", parsing_timeout=timeout)
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))
    except Exception:  # math-verify raises on unparseable input: that answer is wrong
        return False


def score(prompt: str, response: str, reference: str) -> RewardResult:
    pred = extract_answer(response)
    if pred is None:
        return RewardResult(0.0, {"parsed": False})
    gold = reference_answer(reference)
    gold_num, pred_num = _as_number(gold), _as_number(pred)
    if gold_num is not None and pred_num is not None:
        correct = gold_num == pred_num
    else:
        correct = _math_verify_equal(gold, pred)
    return RewardResult(1.0 if correct else 0.0, {"parsed": True})
