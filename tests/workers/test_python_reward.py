"""reward_type python through real reward workers (issue 25, item 1).

One Ray reward worker, shared by the module, runs tests/workers/user_rewards.py:cases in
its scoring process; what the function does is each record's `case` column, so records
read from a JSONL file go through `submit_scoring` as in a run: their columns reach the
function, and a function that raises, hangs past the limit or answers garbage costs only
its samples (scored 0, counted), the worker goes on, and the first traceback reaches the
worker's log and the driver's console once. TRL's batched form and verl's form run in
real scoring processes without Ray (time_limit.TimeLimitedScorer), as do the start errors.
"""

from __future__ import annotations

import json
import logging
import time

import pytest

from flywheel.config.schema import DataArgs, RewardConfig
from flywheel.pipelines.data.prompt_data import load_records
from flywheel.pipelines.loop.seams import Taken
from flywheel.pipelines.rlvr.generation import Group, submit_scoring
from flywheel.pipelines.rlvr.metrics import reward_info_metrics
from flywheel.pipelines.roles.handles import RewardRole
from flywheel.platform.models.char_tokenizer import make_char_tokenizer
from flywheel.platform.resources import RoleDevices
from flywheel.workers.reward_worker import RewardWorker
from flywheel.workers.rewards.registry import Sample
from flywheel.workers.rewards.time_limit import ScorerError, TimeLimitedScorer
from flywheel.workers.strategies.base import Generation

CASES = RewardConfig(reward_type="python", sample_timeout_s=1.0,
                     reward_import_path="tests.workers.user_rewards:cases")
# (row, responses): the row's `case` says what the function does with it
ROWS = [
    ({"prompt": "1+1=", "answer": "2", "tag": "math", "case": "by_column", "expected": "yes"},
     ["yes", "no"]),
    ({"prompt": "2+2=", "answer": "4", "case": "raise"}, ["r1", "r2"]),
    ({"prompt": "3+3=", "answer": "6", "case": "hang"}, ["h"]),
    ({"prompt": "4+4=", "answer": "8", "case": "garbage"}, ["text", "nan", "no_score"]),
    ({"prompt": "5+5=", "answer": "10", "case": "raise"}, ["r3"]),
    ({"prompt": "6+6=", "answer": "12", "case": "none"}, ["n"]),
]


@pytest.fixture(scope="module")
def worker(ray_session, tmp_path_factory):
    """One python-reward worker for the module, its output in a log file of its own."""
    log_dir = tmp_path_factory.mktemp("reward_logs")
    role = RewardRole.create("rewards.mine", RewardWorker, RoleDevices("rewards.mine", (0,)),
                             None, init_kwargs=dict(reward_type="python", cfg=CASES),
                             log_dir=log_dir)
    yield role, log_dir / "rewards.mine-0.log"
    role.shutdown()


def scored_groups(tmp_path, role: RewardRole) -> list[Group]:
    """ROWS read from JSONL as a run reads them, scored through submit_scoring."""
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row, _ in ROWS))
    records = load_records(DataArgs(file_name=[str(path)]), "actor_train")
    tokenizer = make_char_tokenizer()

    def reply(text: str) -> Generation:
        ids = tokenizer.encode(text, add_special_tokens=False)
        return Generation(0, ids, [0.0] * len(ids), "stop")

    groups = [Group(i, record, tokenizer.encode(record.prompt, add_special_tokens=False),
                    [reply(text) for text in texts], version=0)
              for i, (record, (_, texts)) in enumerate(zip(records, ROWS))]
    return submit_scoring(groups, {"mine": role}, {"mine": CASES}, tokenizer).finish()


def test_user_function_scores_by_record_columns_and_its_failures_are_counted(
        worker, tmp_path, caplog):
    role, log_path = worker
    with caplog.at_level(logging.WARNING, logger="flywheel.pipelines.rlvr.generation"):
        groups = scored_groups(tmp_path, role)
    by_column, raised, hung, garbage, raised_again, unscored = groups
    # the record's own columns (expected, tag) reached the function
    assert by_column.scores == [1.0, 0.0]
    assert by_column.reward_info[0] == {"tag": "math", "fn_error": False, "fn_unscored": False}
    # an exception, then garbage answers: 0 each, counted; the hang is the time limit's
    assert raised.scores == [0.0, 0.0] and garbage.scores == [0.0, 0.0, 0.0]
    assert all(i["fn_error"] for g in (raised, garbage, raised_again) for i in g.reward_info)
    assert hung.scores == [0.0] and hung.reward_info == [
        {"timed_out": True, "unscored_by": {"mine": "timed_out"}}]  # reward_health.py
    assert unscored.scores == [0.0] and unscored.reward_info[0]["fn_unscored"]
    metrics = reward_info_metrics(Taken(groups))
    assert metrics["reward/fn_errors"] == 6.0 and metrics["reward/fn_unscored"] == 1.0
    assert metrics["reward/timed_out"] == 1.0 and metrics["reward/crashed"] == 0.0
    # the first traceback, once: on the console (the driver's log) and in the worker's log,
    # though a fresh scoring process (after the hang) failed again; no sample keeps it
    console = [r.getMessage() for r in caplog.records]
    assert len(console) == 1 and "ValueError: no answer in 'r1'" in console[0]
    assert console[0].startswith("reward function tests.workers.user_rewards:cases raised")
    assert log_path.read_text().count("WARNING rewards (python): reward function") == 1
    assert not any("fn_traceback" in i for g in groups for i in g.reward_info)
    # and the worker goes on scoring
    again = role.get(role.score(0, [Sample("q", "yes", "", {"case": "by_column",
                                                             "expected": "yes", "tag": ""})]), 0)
    assert again[0].score == 1.0


def test_the_first_timeout_reaches_the_console_while_the_worker_is_asked(worker, caplog):
    # the driver asks a scoring worker for its progress while it waits (prefetch.py every
    # SCORE_ASK_S); the answer carries the worker's notices, each said once
    role, _ = worker
    hang = Sample("q", "h", "", {"case": "hang"})
    assert role.get(role.score(0, [hang]), 0)[0].metadata["timed_out"]
    with caplog.at_level(logging.WARNING, logger="flywheel.pipelines.roles.handles"):
        assert len(role.progress(0, 5.0)) == 2  # (counter, doing), as for any role
        role.progress(0, 5.0)
    said = [r.getMessage() for r in caplog.records if r.name.endswith("handles")]
    assert len(said) == 1 and said[0].startswith(
        "rewards.mine: reward 'python': a sample timed out at sample_timeout_s 1s")


@pytest.fixture
def scorers():
    made = []

    def make(path: str, **kwargs) -> TimeLimitedScorer:
        made.append(TimeLimitedScorer(RewardConfig(reward_type="python",
                                                   reward_import_path=path, **kwargs)))
        return made[-1]

    yield make
    for scorer in made:
        scorer.close()


def test_trl_batched_form_has_the_batch_limit_and_a_timeout_costs_its_batch(scorers):
    # two scoring processes: the call's 4 samples go as two batches of 2, each with a
    # limit of 2 x 0.5 s; the batch holding "hang" scores 0, timed out, the other scores
    scorer = scorers("tests.workers.user_rewards:trl_batch", sample_timeout_s=0.5,
                     scoring_processes=2)
    assert scorer.batched
    expected = {"expected": "a"}
    results = scorer.score([Sample("p", c, "", expected) for c in ("a", "skip", "b", "hang")])
    assert [r.score for r in results] == [1.0, 0.0, 0.0, 0.0]
    assert results[1].metadata["fn_unscored"]
    assert [r.metadata.get("timed_out", False) for r in results] == [False, False, True, True]
    # a batch may take longer than one sample's limit: the batch [nap, a] sleeps 0.6 s,
    # over 0.5 s but under its 2 x 0.5 s, and is scored
    started = time.monotonic()
    nap = scorer.score([Sample("p", c, "", expected) for c in ("nap", "a", "a", "b")])
    assert [r.score for r in nap] == [0.0, 1.0, 1.0, 0.0]
    assert not any("timed_out" in r.metadata for r in nap)
    assert time.monotonic() - started > 0.6


def test_trl_form_answering_too_few_scores_costs_the_batch(scorers):
    results = scorers("tests.workers.user_rewards:trl_short").score(
        [Sample("p", "a", "", {}), Sample("p", "b", "", {})])
    assert [r.metadata["fn_error"] for r in results] == [True, True]


def test_verl_form_reads_data_source_and_extra_info_from_the_record(scorers):
    scorer = scorers("tests.workers.user_rewards:verl_score")
    record = {"tag": "math", "extra_info": {"level": 2}}
    results = scorer.score([Sample("p", "4", "4", record), Sample("p", "5", "4", record)])
    assert [r.score for r in results] == [1.0, 0.0]


@pytest.mark.parametrize("path, message", [
    ("no_such_module_here:fn", "cannot be imported: ModuleNotFoundError: No module named "
                               "'no_such_module_here'"),
    ("tests.workers.slow_reward:build", "no parameter names its form"),
])
def test_a_function_that_cannot_run_stops_the_reward_at_start_in_one_line(path, message):
    with pytest.raises(ScorerError, match="reward 'python' cannot start: ") as info:
        TimeLimitedScorer(RewardConfig(reward_type="python", reward_import_path=path))
    assert message in str(info.value) and "\n" not in str(info.value)
