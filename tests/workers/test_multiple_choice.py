"""multiple_choice: ROLL's CrossThinkQA choice-letter reward on hand-written responses,
adversarial ones included (the scoring process and Ray path it shares with every catalog
reward is exercised once, by test_ifeval.py)."""

from __future__ import annotations

import time

import pytest

from flywheel.workers.rewards.multiple_choice import (
    MultipleChoiceArgs,
    extract_answer,
    last_boxed_flat,
    score_with,
)

SOFT = MultipleChoiceArgs(repetition_max_penalty=0.0)


def score(response: str, reference: str = "B", scoring: str = "soft") -> float:
    args = MultipleChoiceArgs(scoring=scoring, repetition_max_penalty=0.0)
    return score_with(args, "prompt", response, reference).score


@pytest.mark.parametrize("response, expected", [
    ("Reasoning... \\boxed{B}", 1.0),                       # correct, boxed
    ("Reasoning... \\boxed{\\text{(B) Paris}}", 1.0),       # first uppercase inside the box
    ("So the answer is B.", 0.5),                           # correct, not boxed
    ("So the Answer Is: (B)", 0.5),                         # any case
    ("\\boxed{C}", -0.5),                                   # wrong, boxed
    ("the answer is C", -1.0),                              # wrong, not boxed
    ("B", 0.5),                                             # the whole text
    ("no letter at all", -1.0),                             # nothing read
    ("\\boxed{A} then \\boxed{B}", 1.0),                    # the last box
    ("\\boxed{B} then \\boxed{A}", -0.5),
    ("\\boxed{B} then \\boxed{}", 1.0),                     # an empty box is no box
    ("\\boxed{A} unclosed \\boxed{B", -0.5),                # unclosed: the last closed one
    ("\\boxed{ b }", -0.5),                                 # lowercase is no letter
    ("<think>\\boxed{A}</think>\n\nthe answer is B", 0.5),  # only after </think>
    ("<think>\\boxed{B}</think>\n\nI am not sure", -1.0),   # ... whose first capital is I
])
def test_soft_scoring(response, expected):
    assert score(response) == expected


@pytest.mark.parametrize("scoring, table", [
    ("loose", [1.0, 1.0, -1.0, -1.0]),
    ("soft", [1.0, 0.5, -0.5, -1.0]),
    ("strict", [1.0, -1.0, -1.0, -1.0]),
])
def test_rolls_tables(scoring, table):
    responses = ["\\boxed{B}", "answer is B", "\\boxed{D}", "answer is D"]
    assert [score(r, scoring=scoring) for r in responses] == table


@pytest.mark.parametrize("reference", ["B", "B. Paris", "(B)", " b) B"])
def test_the_reference_letter_is_its_first_uppercase_character(reference):
    assert score("\\boxed{B}", reference) == 1.0


def test_a_reference_without_a_letter_is_an_error():
    with pytest.raises(ValueError, match="names no choice letter"):
        score("\\boxed{B}", "42")


def test_metadata_are_rolls_flags():
    result = score_with(SOFT, "p", "answer is B", "B")
    assert result.metadata == {"correct": True, "parsed": False, "choice": "B",
                               "repetition_penalty": 0.0}
    strict = score_with(MultipleChoiceArgs("strict", 0.0), "p", "answer is B", "B")
    assert strict.metadata["correct"] is False  # ROLL's score: the table gave <= 0


def test_the_repetition_penalty_reads_the_whole_response():
    thinking = "<think>" + "go round and " * 50 + "</think>\\boxed{B}"
    result = score_with(MultipleChoiceArgs(), "p", thinking, "B")
    assert result.metadata["repetition_penalty"] < -0.4
    assert result.score == pytest.approx(1.0 + result.metadata["repetition_penalty"])


def test_last_boxed_flat_equals_rolls_regex_on_tricky_text():
    import re

    roll = re.compile(r"\\boxed\{([^}]+)\}")
    for text in ["\\boxed{A \\boxed{B}", "\\boxed{}\\boxed{C}", "x\\boxed{\\boxed{}}D}",
                 "\\boxed{A}\\boxed{", "\\boxed{{B}}", "", "\\boxed{\n}"]:
        found = roll.findall(text)
        assert last_boxed_flat(text) == (found[-1] if found else None), text


HOSTILE = ["\\boxed{" * 100_000, "\\boxed{}" * 100_000, "answer is " * 100_000,
           "\u0130" * 300_000, "\\boxed{" + "x" * 500_000, "", "</think>" * 50_000,
           "\U0001F600\u202e\u0000\\boxed{\u00c5}"]


def test_hostile_responses_are_scored_in_linear_time():
    """ROLL's `\\\\boxed\\{([^}]+)\\}` rescans to the end from every unclosed box: quadratic
    on the first text. Here each takes milliseconds."""
    start = time.monotonic()
    for response in HOSTILE:
        result = score_with(MultipleChoiceArgs(), "p", response, "A")
        assert -1.5 <= result.score <= 1.0
    assert time.monotonic() - start < 10
    assert extract_answer(HOSTILE[-1]) == ("\u00c5", True)
