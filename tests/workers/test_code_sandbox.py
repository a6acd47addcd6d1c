"""code_sandbox's scoring: the program it picks, the tests it reads, how it counts. Runs the
real sandbox (these fail where bubblewrap cannot be set up)."""

from __future__ import annotations

import json

import pytest

from flywheel.config.schema import CodeSandboxArgs, RewardConfig
from flywheel.workers.rewards.code_sandbox import last_code_block, outputs_match, parse_tests
from flywheel.workers.rewards.registry import reward_fn

LIMITS = CodeSandboxArgs(test_timeout_s=2.0, cpu_seconds=1)
# a + b, with the third case's expected output wrong on purpose: 2 of 3 pass
TESTS = json.dumps({"inputs": ["1 2\n", "10 20\n", "0 0\n"], "outputs": ["3\n", "30\n", "1\n"]})
ADD = "Read two ints.\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\n"


def code_reward(**kwargs):
    limits = CodeSandboxArgs(**{**vars(LIMITS), **kwargs})
    return reward_fn("code_sandbox", RewardConfig(reward_type="code_sandbox", code_sandbox=limits))


def test_fraction_of_cases_passed_with_counts():
    result = code_reward()("q", ADD, TESTS)
    assert result.score == pytest.approx(2 / 3)
    assert result.metadata == {"parsed": True, "passed": 2, "failed": 1,
                               "timed_out_tests": 0, "crashed": 0}


def test_all_or_nothing():
    assert code_reward(scoring="all_or_nothing")("q", ADD, TESTS).score == 0.0
    right = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
    assert code_reward(scoring="all_or_nothing")("q", ADD, right).score == 1.0


def test_crash_and_timeout_are_counted_apart():
    program = ("```python\nimport time\nx = int(input())\nif x == 1:\n    raise SystemExit(3)\n"
               "if x == 2:\n    time.sleep(30)\nprint(x)\n```")
    tests = json.dumps({"inputs": ["1", "2", "3"], "outputs": ["1", "2", "3"]})
    result = code_reward()("q", program, tests)
    assert result.metadata == {"parsed": True, "passed": 1, "failed": 0,
                               "timed_out_tests": 1, "crashed": 1}


def test_max_tests_runs_only_the_first_cases():
    assert code_reward(max_tests=2)("q", ADD, TESTS).metadata["passed"] == 2
    assert code_reward(max_tests=2)("q", ADD, TESTS).score == 1.0


def test_no_program_or_an_unknown_language_scores_zero_unparsed():
    assert code_reward()("q", "I would add them.", TESTS).metadata["parsed"] is False
    rust = "```rust\nfn main() {}\n```"
    result = code_reward()("q", rust, TESTS)
    assert result.score == 0.0 and result.metadata["language"] == "rust"


def test_last_fenced_block_is_the_program():
    text = "```python\nprint(1)\n```\nbetter:\n```py\nprint(2)\n```"
    assert last_code_block(text) == ("python", "print(2)\n")
    assert last_code_block("```\nprint(3)\n```") == ("python", "print(3)\n")
    assert last_code_block("no fence") is None


def test_output_comparison_is_by_tokens_numbers_within_1e6():
    assert outputs_match("3 4\n\n", "3   4")
    assert outputs_match("0.3333333", "0.33333333")
    assert not outputs_match("3 4 5", "3 4")
    assert not outputs_match("yes", "Yes")


def test_reference_shapes_not_handled_are_errors():
    with pytest.raises(ValueError, match="not JSON"):
        parse_tests("{not json")
    with pytest.raises(ValueError, match=r"must be stdin/stdout tests .*fn_name"):
        parse_tests(json.dumps({"fn_name": "f", "inputs": [], "outputs": []}))
    with pytest.raises(ValueError, match="2 inputs but 1 outputs"):
        parse_tests(json.dumps({"inputs": ["1", "2"], "outputs": ["1"]}))
    lines = parse_tests(json.dumps({"inputs": [["1 2", "3"]], "outputs": [["3"]]}))
    assert lines.inputs == ["1 2\n3"]  # a case given as a list of lines
