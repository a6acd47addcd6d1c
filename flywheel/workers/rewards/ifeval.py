"""ifeval: does the response follow the instruction constraint its record names? (ROLL's
GeneralRuleRewardWorker, roll/pipeline/rlvr/rewards/ifeval_rule_reward_worker.py.)

The reference is the constraint as ROLL's RLVR ifeval data stores it: a JSON object with
the check's name and its arguments, unused ones null, e.g.

    {"func_name": "validate_word_constraint", "N": 50, "quantifier": "at least",
     "keyword_list": null, ...}

(a Python-literal dict, as `str()` of a parquet struct column prints it, is read too). The
check (ifeval_checks.py: 25 of them, ROLL's names) reads the text after the last
`</think>` (thinking.py). Score: 1 when the constraint holds, else 0, plus ROLL's repetition
penalty on the whole response (repetition_penalty.py; -0.5 at most). Metadata: `correct`
(the constraint held: ROLL's `scores`), `constraint` (the check's name),
`repetition_penalty`.

A reference that is not such an object, names no check or an unknown one, or lacks an
argument its check needs (or gives it the wrong type, an unknown quantifier, a letter
that is not one character) is an error that names the constraint, never a silent 0 (ROLL
logs it, or its check raises, and scores 0): a data error shows on the first record, not
as a reward that never rises. The response cannot raise: any text is a verdict.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flywheel.config.schema import RewardConfig
from flywheel.platform.config.catalogs import settings_from
from flywheel.workers.rewards.ifeval_checks import (
    ARGUMENT_TYPES,
    CHECKS,
    INT,
    QUANTIFIERS,
    STR,
    STRS,
    Check,
)
from flywheel.workers.rewards.repetition_penalty import check_penalty_args, repetition_penalty
from flywheel.workers.rewards.result import RewardResult
from flywheel.workers.rewards.thinking import after_last_think


@dataclass
class IfevalArgs:
    # ROLL's repetition penalty: the most it subtracts (<= 0; 0 turns it off) and the
    # n-gram length it counts repeats of (ROLL: -0.5 and 3).
    repetition_max_penalty: float = -0.5
    repetition_ngram_size: int = 3

    def __post_init__(self) -> None:
        check_penalty_args(self.repetition_max_penalty, self.repetition_ngram_size)


def _as_dict(reference: str) -> dict[str, Any]:
    try:
        data = json.loads(reference)
    except ValueError:
        try:  # a struct column printed by str(): single quotes, None
            data = ast.literal_eval(reference.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            data = None
    if not isinstance(data, dict):
        raise ValueError(f"ifeval: the reference must be a JSON object naming a constraint "
                         f'({{"func_name": ..., arguments}}), got {reference[:80]!r}')
    return data


def _checked(name: str, key: str, value: Any) -> Any:
    kind = ARGUMENT_TYPES[key]
    if kind == STRS and isinstance(value, str):
        value = [value]  # one option / keyword written as a string
    ok = {INT: isinstance(value, int) and not isinstance(value, bool),
          STR: isinstance(value, str),
          STRS: isinstance(value, list) and all(isinstance(v, str) for v in value)}[kind]
    if not ok:
        raise ValueError(f"ifeval: {name} needs {key} as {kind}, the reference gives "
                         f"{value!r}")
    if key == "quantifier" and value not in QUANTIFIERS:
        raise ValueError(f"ifeval: {name}'s quantifier must be one of {QUANTIFIERS}, the "
                         f"reference gives {value!r}")
    if key == "letter" and len(value) != 1:
        raise ValueError(f"ifeval: {name}'s letter must be one character, the reference "
                         f"gives {value!r}")
    if key == "section_splitter" and not value:
        raise ValueError(f"ifeval: {name}'s section_splitter is empty")
    return value


def parse_constraint(reference: str) -> tuple[str, Check, dict[str, Any]]:
    """(check name, check, its arguments) named by a reference, or ValueError."""
    data = _as_dict(reference)
    name = data.get("func_name")
    if name not in CHECKS:
        raise ValueError(f"ifeval: unknown constraint func_name {name!r} (known: "
                         f"{', '.join(CHECKS)})")
    check = CHECKS[name]
    args = {key: _checked(name, key, data.get(key)) for key in check.arguments}
    return name, check, args


def score_with(args: IfevalArgs, prompt: str, response: str, reference: str) -> RewardResult:
    name, check, arguments = parse_constraint(reference)
    held = bool(check.fn(after_last_think(response), **arguments))
    penalty = repetition_penalty(response, args.repetition_ngram_size,
                                 args.repetition_max_penalty)
    return RewardResult(float(held) + penalty, {"correct": held, "constraint": name,
                                                "repetition_penalty": penalty})


def build(cfg: RewardConfig) -> Callable[[str, str, str], RewardResult]:
    """The reward with its settings; langdetect's language profiles load now (about a
    second), not inside the first sample's time limit."""
    from langdetect import DetectorFactory, detect

    args = settings_from(IfevalArgs, cfg.reward_args, "reward_args")
    DetectorFactory.seed = 0
    detect("warm up the language profiles")

    def score(prompt: str, response: str, reference: str) -> RewardResult:
        return score_with(args, prompt, response, reference)

    return score
