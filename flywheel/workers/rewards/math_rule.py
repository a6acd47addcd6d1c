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
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


@dataclass
class RewardResult:
    score: float
    metadata: dict = field(default_factory=dict)


def extract_answer(text: str) -> str | None:
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].strip()
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    numbers = _NUMBER.findall(text.replace(",", ""))
    return numbers[-1] if numbers else None


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
        gold_parsed = parse(gold, parsing_timeout=timeout)
        pred_parsed = parse(pred, parsing_timeout=timeout)
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))
    except Exception:  # math-verify raises on unparseable input: that answer is wrong
        return False


def score(prompt: str, response: str, reference: str) -> RewardResult:
    pred = extract_answer(response)
    if pred is None:
        return RewardResult(0.0, {"parsed": False})
    gold = extract_answer(reference) or reference.strip()
    gold_num, pred_num = _as_number(gold), _as_number(pred)
    if gold_num is not None and pred_num is not None:
        correct = gold_num == pred_num
    else:
        correct = _math_verify_equal(gold, pred)
    return RewardResult(1.0 if correct else 0.0, {"parsed": True})
