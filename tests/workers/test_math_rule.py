import pytest

from flywheel.workers.rewards.math_rule import marked_answer, score
from flywheel.workers.rewards.registry import reward_fn


@pytest.mark.parametrize("response, reference, expected", [
    ("046", "046", 1.0),
    ("46", "046", 1.0),            # numeric comparison, padding does not matter
    ("047", "046", 0.0),
    ("", "046", 0.0),              # nothing to parse
    ("we get 12, then 13", "13", 1.0),  # math-verify reads the whole text: last value
    ("the answer is 12, no 13", "12", 1.0),  # ... but "the answer is" marks one in words
    ("so it is $\\frac{1}{2}$", "0.5", 1.0),  # unboxed LaTeX (was scored 0 before)
    ("so it is $\\frac{1}{2}$", "\\frac{1}{3}", 0.0),
    ("#### 1,234", "1234", 1.0),
    ("so \\boxed{3/4}", "0.75", 1.0),
    ("so \\boxed{\\frac{1}{2}}", "\\frac{2}{4}", 1.0),  # math-verify path
    ("so \\boxed{\\frac{1}{3}}", "\\frac{1}{2}", 0.0),
])
def test_math_rule_scores(response, reference, expected):
    assert score("q", response, reference).score == expected


def test_marked_answer_prefers_boxed_then_hashes():
    assert marked_answer("12 then \\boxed{7} then 9") == "7"
    assert marked_answer("work 5 #### 8") == "8"
    assert marked_answer("12 and 13") is None


@pytest.mark.parametrize("response, parsed, source", [
    ("\\boxed{4}", True, "marked"),
    ("the result is $x^2$", True, "math_verify"),
    ("no answer here", False, None),
])
def test_metadata_says_whether_and_where_an_answer_was_found(response, parsed, source):
    metadata = score("q", response, "4").metadata
    assert metadata["parsed"] is parsed and metadata.get("answer_from") == source


def test_unknown_reward_type_is_an_error():
    with pytest.raises(ValueError, match="unknown reward_type 'nope'.*math_rule"):
        reward_fn("nope")


BARE = ["12", "046", "-3", "1/2", "3.50", " 7\n", "12 ", "-0", "007.10", "0.5", "200"]


@pytest.mark.parametrize("reference", ["12", "46", "0.5", "7.1", "\\frac{1}{2}", "-3", "3.5"])
def test_a_bare_number_scores_as_math_verify_reads_it(reference, monkeypatch):
    fast = [score("q", r, reference) for r in BARE]
    monkeypatch.setattr("flywheel.workers.rewards.math_rule._bare_number", lambda _: [])
    slow = [score("q", r, reference) for r in BARE]
    assert [(f.score, f.metadata) for f in fast] == [(s.score, s.metadata) for s in slow]
    assert any(f.score == 1.0 for f in fast)


def test_a_bare_number_skips_the_math_verify_parse(monkeypatch):
    def refuse(text):
        raise AssertionError(f"math-verify parsed {text!r}")

    monkeypatch.setattr("flywheel.workers.rewards.math_rule._math_verify_parse", refuse)
    assert score("q", " 046\n", "46").score == 1.0
    assert score("q", "7/2", "3.5").score == 1.0
    assert score("q", "13", "12").score == 0.0
