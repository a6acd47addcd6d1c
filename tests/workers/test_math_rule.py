import pytest

from flywheel.workers.rewards.math_rule import extract_answer, score
from flywheel.workers.rewards.registry import reward_fn


@pytest.mark.parametrize("response, reference, expected", [
    ("046", "046", 1.0),
    ("46", "046", 1.0),            # numeric comparison, padding does not matter
    ("047", "046", 0.0),
    ("", "046", 0.0),              # nothing to parse
    ("the answer is 12, no 13", "13", 1.0),  # last number wins
    ("#### 1,234", "1234", 1.0),
    ("so \\boxed{3/4}", "0.75", 1.0),
    ("so \\boxed{\\frac{1}{2}}", "\\frac{2}{4}", 1.0),  # math-verify path
    ("so \\boxed{\\frac{1}{3}}", "\\frac{1}{2}", 0.0),
])
def test_math_rule_scores(response, reference, expected):
    assert score("q", response, reference).score == expected


def test_extract_answer_prefers_boxed_then_hashes():
    assert extract_answer("12 then \\boxed{7} then 9") == "7"
    assert extract_answer("work 5 #### 8") == "8"
    assert extract_answer("no digits") is None


def test_unknown_reward_type_is_an_error():
    with pytest.raises(ValueError, match="unknown reward_type 'nope'.*math_rule"):
        reward_fn("nope")
