"""A user's reward function (reward_type python) without processes: which form its
parameters name, what each form is passed, and what its answers become
(workers/rewards/user_function.py, python_reward.py)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from flywheel.config.schema import RewardConfig
from flywheel.workers.rewards.python_reward import UserScorer, build
from flywheel.workers.rewards.registry import Sample
from flywheel.workers.rewards.user_function import NotAScore, coerce, user_function

RECORD = {"id": "r1", "tag": "math", "level": 2, "prompt": "1+1=", "answer": "2"}
SAMPLE = Sample("1+1=", "2", "2", RECORD)


def flywheel_form(prompt, response, reference, record):
    return {"prompt": prompt, "response": response, "reference": reference, "record": record}


def flywheel_few(response, record):  # names only what it reads
    return {"response": response, "record": record}


def verl_form(data_source, solution_str, ground_truth, extra_info=None):
    return {"data_source": data_source, "solution_str": solution_str,
            "ground_truth": ground_truth, "extra_info": extra_info}


def trl_form(prompts, completions, **columns):
    return {"prompts": prompts, "completions": completions, **columns}


def trl_completions_only(completions, **kwargs):  # TRL's own examples look like this
    return [float(len(c)) for c in completions]


class CallableReward:
    def __call__(self, *, response, **kwargs):
        return {"response": response, "kwargs": sorted(kwargs)}


@pytest.mark.parametrize("fn, form", [
    (flywheel_form, "flywheel"), (flywheel_few, "flywheel"), (verl_form, "verl"),
    (trl_form, "trl"), (trl_completions_only, "trl"), (CallableReward(), "flywheel"),
])
def test_the_form_is_told_by_parameter_names(fn, form):
    user = user_function(fn, "m:f")
    assert user.form == form and user.batched == (form == "trl")


@pytest.mark.parametrize("fn, message", [
    (lambda text, answer: 1.0, "no parameter names its form"),
    (lambda prompt, response, reference, record, threshold: 1.0,
     "required parameter 'threshold' is not one that flywheel's form passes"),
    (lambda response, /: 1.0, "'response' is positional-only"),
    ("not a function", "m:f is a str, not a function"),
])
def test_a_function_without_a_form_is_refused_in_one_line(fn, message):
    with pytest.raises(TypeError, match=message) as info:
        user_function(fn, "m:f")
    assert "\n" not in str(info.value)


def test_flywheel_form_gets_the_whole_record_by_keyword():
    assert user_function(flywheel_form, "m:f").call_one(SAMPLE) == {
        "prompt": "1+1=", "response": "2", "reference": "2", "record": RECORD}
    assert user_function(flywheel_few, "m:f").call_one(SAMPLE) == {"response": "2",
                                                                   "record": RECORD}
    assert user_function(CallableReward(), "m:f").call_one(SAMPLE) == {
        "response": "2", "kwargs": ["prompt", "record", "reference"]}


def test_verl_form_data_source_from_its_column_else_the_tag_and_extra_info():
    user = user_function(verl_form, "m:f")
    assert user.call_one(SAMPLE) == {"data_source": "math", "solution_str": "2",
                                     "ground_truth": "2", "extra_info": RECORD}
    verl_row = {**RECORD, "data_source": "gsm8k", "extra_info": {"split": "train"}}
    got = user.call_one(SAMPLE._replace(record=verl_row))
    assert got["data_source"] == "gsm8k" and got["extra_info"] == {"split": "train"}


def test_trl_form_gets_lists_and_every_column_but_the_prompt():
    samples = [SAMPLE, SAMPLE._replace(response="3", record={**RECORD, "level": 5})]
    with pytest.raises(NotAScore, match="a dict"):  # not one score per completion
        user_function(trl_form, "m:f").call_batch(samples)
    seen = {}

    def spy(prompts, completions, **columns):
        seen.update(prompts=prompts, completions=completions, **columns)
        return [1.0, 0.0]

    assert user_function(spy, "m:f").call_batch(samples) == [1.0, 0.0]
    assert seen == {"prompts": ["1+1=", "1+1="], "completions": ["2", "3"],
                    "answer": ["2", "2"], "id": ["r1", "r1"], "level": [2, 5],
                    "tag": ["math", "math"]}


@pytest.mark.parametrize("answer, score, metadata", [
    (1, 1.0, {}), (0.25, 0.25, {}), (True, 1.0, {}), (np.float32(0.5), 0.5, {}),
    ({"score": 0.5, "exact": False, "pred": "3"}, 0.5, {"exact": False, "pred": "3"}),
])
def test_numbers_and_score_dicts_are_scores(answer, score, metadata):
    result = coerce(answer)
    assert result.score == score
    assert result.metadata == {**metadata, "fn_error": False, "fn_unscored": False}


def test_none_is_no_score_and_counted():
    assert coerce(None).score == 0.0 and coerce(None).metadata["fn_unscored"] is True


@pytest.mark.parametrize("answer, reason", [
    ("1.0", "'1.0' (a str), not a number"), (math.nan, "nan, not a finite number"),
    (math.inf, "inf, not a finite number"), ({"value": 1}, "a dict without 'score'"),
    ({"score": "high"}, "not a number"), ({"score": 1, "obj": object()}, "not JSON"),
    ({"score": 1, "timed_out": False}, "flywheel's own key(s) timed_out"),
    ([1.0], "[1.0] (a list), not a number"),
])
def test_garbage_is_not_a_score(answer, reason):
    with pytest.raises(NotAScore, match=re.escape(reason)):
        coerce(answer)


def test_failures_score_zero_counted_and_only_the_first_carries_a_report():
    def sometimes(response, record):
        if response == "raise":
            raise KeyError("missing")
        return "garbage" if response == "str" else 1.0

    scorer = UserScorer(user_function(sometimes, "m:sometimes"), "m:sometimes")
    results = scorer.score([SAMPLE._replace(response=r) for r in ("raise", "ok", "str")])
    assert [r.score for r in results] == [0.0, 1.0, 0.0]
    assert [r.metadata["fn_error"] for r in results] == [True, False, True]
    report = results[0].metadata["fn_traceback"]
    assert report.startswith("reward function m:sometimes raised:\nTraceback")
    assert "KeyError: 'missing'" in report and "python_reward.py" not in report
    assert "fn_traceback" not in results[2].metadata


def test_a_batched_failure_costs_the_whole_batch():
    def short(completions, **columns):
        return [1.0]

    scorer = UserScorer(user_function(short, "m:short"), "m:short")
    results = scorer.score([SAMPLE, SAMPLE])
    assert [r.metadata["fn_error"] for r in results] == [True, True]
    assert "1 values for a batch of 2 completions" in results[0].metadata["fn_traceback"]


@pytest.mark.parametrize("path, message", [
    (None, "reward_type python needs reward_import_path"),
    ("no_such_module_here:fn", "cannot be imported: ModuleNotFoundError"),
    ("tests.workers.user_rewards:missing",
     "cannot be imported: MissingAttribute: .*has no attribute missing"),
])
def test_a_function_that_cannot_be_imported_is_refused_at_build(path, message):
    with pytest.raises(ValueError, match=message):
        build(RewardConfig(reward_type="python", reward_import_path=path))
