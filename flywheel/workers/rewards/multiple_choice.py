"""multiple_choice: the response's choice letter against the reference's (ROLL's
CrossThinkQARuleRewardWorker, roll/pipeline/rlvr/rewards/crossthinkqa_rule_reward_worker.py).

The answer is read from the text after the last `</think>` (thinking.py): the content of
the last `\\boxed{...}` (up to its first `}`, as ROLL's `\\boxed\\{([^}]+)\\}`), else what
follows the last "answer is" (any case), else the whole text. The choice is the first
uppercase character of that answer; it is correct when it equals the reference's letter
(the first uppercase character of the reference: "B", "B. Paris" and "(B)" all name B;
ROLL takes the reference's first character, so "(B)" could never be right there).

The score follows ROLL's `reward_type` table, here `scoring` (correct / boxed):

    scoring   correct+boxed  correct, not boxed  wrong+boxed  wrong, not boxed
    loose          1               1                 -1            -1
    soft           1              0.5               -0.5           -1
    strict         1              -1                 -1            -1

plus ROLL's repetition penalty (repetition_penalty.py, on the whole response). Metadata:
`correct` (ROLL's `scores`: 1 when the table gives > 0), `parsed` (an answer was boxed,
ROLL's `format_flag`), `choice` (the letter read, or null), `repetition_penalty`.

Built for untrusted text: every step is a linear scan (no regex that can backtrack), so a
huge response, unclosed boxes, many boxes or any unicode cost time in proportion to their
length. ROLL's length reward (`response_length_penalty_coef`) is a key of every reward here
(schema.RewardConfig), since it needs the response's token count.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from flywheel.config.schema import RewardConfig
from flywheel.platform.config.catalogs import settings_from
from flywheel.workers.rewards.repetition_penalty import check_penalty_args, repetition_penalty
from flywheel.workers.rewards.result import RewardResult
from flywheel.workers.rewards.thinking import after_last_think

BOXED = "\\boxed{"
ANSWER_IS = re.compile("answer is", re.IGNORECASE)
# (correct, boxed) -> score, per scoring (ROLL's crossthinkqa_reward_fn reward_dict)
SCORES: dict[str, dict[tuple[bool, bool], float]] = {
    "loose": {(True, True): 1.0, (True, False): 1.0, (False, True): -1.0, (False, False): -1.0},
    "soft": {(True, True): 1.0, (True, False): 0.5, (False, True): -0.5, (False, False): -1.0},
    "strict": {(True, True): 1.0, (True, False): -1.0, (False, True): -1.0,
               (False, False): -1.0},
}


@dataclass
class MultipleChoiceArgs:
    # How correctness and a boxed answer combine into the score (ROLL's reward_type on
    # this worker; its examples use soft). See the module's table.
    scoring: Literal["loose", "soft", "strict"] = "soft"
    # ROLL's repetition penalty: the most it subtracts (<= 0; 0 turns it off) and the
    # n-gram length it counts repeats of (ROLL: -0.5 and 3).
    repetition_max_penalty: float = -0.5
    repetition_ngram_size: int = 3

    def __post_init__(self) -> None:
        check_penalty_args(self.repetition_max_penalty, self.repetition_ngram_size)


def last_boxed_flat(text: str) -> str | None:
    """What `re.findall(r"\\\\boxed\\{([^}]+)\\}", text)[-1]` gives (None for no match), in
    one pass: a box's content runs to the first `}` after it, and scanning resumes there."""
    found, pos = None, 0
    while (start := text.find(BOXED, pos)) >= 0:
        close = text.find("}", start + len(BOXED))
        if close < 0:  # no `}` after this box, so none after any later one either
            break
        if close > start + len(BOXED):
            found, pos = text[start + len(BOXED):close], close + 1
        else:  # `\boxed{}`: no match here; the regex moves on by one character
            pos = start + 1
    return found


def extract_answer(text: str) -> tuple[str, bool]:
    """(the answer text, whether it was boxed)."""
    boxed = last_boxed_flat(text)
    if boxed is not None:
        return boxed, True
    ends = [m.end() for m in ANSWER_IS.finditer(text)]
    return (text[ends[-1]:] if ends else text), False


def first_upper(text: str) -> str | None:
    return next((c for c in text if c.isupper()), None)


def reference_letter(reference: str) -> str:
    letter = first_upper(reference)
    if letter is None:
        raise ValueError(f"multiple_choice: the reference names no choice letter (no "
                         f"uppercase character in {reference[:80]!r})")
    return letter


def score_with(args: MultipleChoiceArgs, prompt: str, response: str,
               reference: str) -> RewardResult:
    gold = reference_letter(reference)
    answer, boxed = extract_answer(after_last_think(response))
    choice = first_upper(answer)
    correct = choice == gold
    value = SCORES[args.scoring][(correct, boxed)]
    penalty = repetition_penalty(response, args.repetition_ngram_size,
                                 args.repetition_max_penalty)
    return RewardResult(value + penalty, {"correct": value > 0, "parsed": boxed,
                                          "choice": choice, "repetition_penalty": penalty})


def build(cfg: RewardConfig) -> Callable[[str, str, str], RewardResult]:
    args = settings_from(MultipleChoiceArgs, cfg.reward_args, "reward_args")

    def score(prompt: str, response: str, reference: str) -> RewardResult:
        return score_with(args, prompt, response, reference)

    return score
