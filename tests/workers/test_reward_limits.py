"""A reward's scoring is bounded (issue 53 items 3-5, issue 44 items 2-3): a function that
always hangs stops its reward after max_consecutive_timeouts, said at the first timeout;
an answer that is no finite float is a counted failure; no process a reward started
outlives its scoring process (setsid ones included), even when the reward worker is
killed; a reward over memory_mb fails its sample and the scorer goes on; a reward that
scores nothing for max_failed_steps steps stops the run with a named error.

The functions are tests/workers/hostile_rewards.py's, run in real scoring processes
(time_limit.TimeLimitedScorer) without Ray."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from flywheel.config.checks.reward_limits import check_reward_limits
from flywheel.config.schema import CodeSandboxArgs, RewardConfig
from flywheel.pipelines.data.prompt_data import PromptRecord
from flywheel.pipelines.loop.seams import Taken
from flywheel.pipelines.rlvr.generation import Group, ScoringJob
from flywheel.pipelines.rlvr.reward_health import RewardHealth, RewardScoresNothing
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.rewards.python_reward import UserScorer
from flywheel.workers.rewards.registry import Sample
from flywheel.workers.rewards.reward_limits import memory_limit_mb
from flywheel.workers.rewards.time_limit import RewardHangs, TimeLimitedScorer
from flywheel.workers.rewards.user_function import user_function
from flywheel.workers.strategies.base import Generation

PATH = "tests.workers.hostile_rewards:misbehave"


def sample(case: str, **record) -> Sample:
    return Sample("p", "r", "", {"case": case, **record})


@pytest.fixture
def scorers():
    made = []

    def make(**kwargs) -> TimeLimitedScorer:
        made.append(TimeLimitedScorer(RewardConfig(reward_type="python",
                                                   reward_import_path=PATH, **kwargs)))
        return made[-1]

    yield make
    for scorer in made:
        scorer.close()


def alive(pid: int) -> bool:
    """Running (a zombie, dead and waiting for its reaper, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids: list[int], within_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_a_huge_int_or_an_answer_without_a_float_is_a_counted_failure():
    # float(10**400) raises OverflowError: the sample fails, counted, the scorer goes on
    class NoFloat(float):
        def __float__(self):
            raise RuntimeError("no")

    answers = iter([10**400, 10**5000, NoFloat(1.0), {"score": -10**400}, 1.0])
    scorer = UserScorer(user_function(lambda response: next(answers), "t:f"), "t:f")
    results = scorer.score([Sample("p", "r", "")] * 5)
    assert [r.metadata["fn_error"] for r in results] == [True] * 4 + [False]
    assert [r.score for r in results] == [0.0] * 4 + [1.0]
    report = results[0].metadata["fn_traceback"]
    assert "returned an int of 1329 bits (a int), which has no float value" in report
    assert "OverflowError" in report


def test_a_huge_int_in_a_real_scoring_process_is_counted(scorers):
    results = scorers().score([sample("huge_int"), sample("ok")])
    assert [r.score for r in results] == [0.0, 1.0]
    assert results[0].metadata["fn_error"] and not results[1].metadata["fn_error"]


def test_a_hanging_reward_is_declared_broken_after_k_timeouts_in_a_row(scorers):
    # 60 samples of 0.3 s each would take 18 s and more (a fresh process per timeout);
    # the third timeout in a row stops the reward, and the first was said at once
    scorer = scorers(sample_timeout_s=0.3, max_consecutive_timeouts=3)
    started = time.monotonic()
    with pytest.raises(RewardHangs, match=r"3 samples in a row timed out at "
                                          r"sample_timeout_s 0.3s \(max_consecutive_timeouts 3"):
        scorer.score([sample("hang")] * 60)
    assert time.monotonic() - started < 12.0  # 3 x (0.3 s + a fresh process) under load
    assert len(scorer.notices) == 1 and "a sample timed out at sample_timeout_s 0.3s" in (
        scorer.notices[0])


def test_an_answer_between_timeouts_breaks_the_row(scorers):
    scorer = scorers(sample_timeout_s=0.3, max_consecutive_timeouts=2)
    results = scorer.score([sample("hang"), sample("ok"), sample("hang"), sample("ok")])
    assert [r.score for r in results] == [0.0, 1.0, 0.0, 1.0]
    assert len(scorer.notices) == 1  # the first timeout only


def test_no_process_a_reward_started_outlives_its_scorer(scorers, tmp_path):
    # a plain child and a setsid grandchild (an orphan) per call: alive while their scoring
    # process is, gone with it, at a timeout's kill as at close()
    scorer = scorers(sample_timeout_s=2.0)

    def forked(name: str, **record) -> tuple[list[int], list]:
        path = tmp_path / name
        results = scorer.score([sample("fork", pids=str(path), **record)])
        return [int(path.read_text()), int((tmp_path / f"{name}.setsid").read_text())], results

    first, _ = forked("first")
    assert all(alive(p) for p in first)
    second, results = forked("second", then="hang")
    assert results[0].metadata["timed_out"]
    assert wait_gone(first + second) == []  # the process that started them was killed
    third, _ = forked("third")  # in a fresh scoring process
    assert all(alive(p) for p in third)
    scorer.close()
    assert wait_gone(third) == []


def test_no_process_a_reward_started_outlives_a_killed_reward_worker(tmp_path):
    # the reward worker dies by SIGKILL (ray.kill): its scoring processes' supervisors
    # hear of it (PR_SET_PDEATHSIG) and take the whole tree down
    pids = tmp_path / "pids"
    worker = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from flywheel.config.schema import RewardConfig
        from flywheel.workers.rewards.registry import Sample
        from flywheel.workers.rewards.time_limit import TimeLimitedScorer
        scorer = TimeLimitedScorer(RewardConfig(reward_type="python",
                                                reward_import_path={PATH!r}))
        scorer.score([Sample("p", "r", "", {{"case": "fork", "pids": {str(pids)!r}}})])
        print(scorer._children[0].proc.pid, flush=True)
        input()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        supervisor = int(worker.stdout.readline())
        started = [int(pids.read_text()), int((tmp_path / "pids.setsid").read_text())]
        assert all(alive(p) for p in [supervisor, *started])
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        assert wait_gone([supervisor, *started]) == []
    finally:
        worker.kill()
        worker.wait()


def test_a_reward_over_its_memory_limit_is_counted_and_the_scorer_goes_on(scorers):
    scorer = scorers(memory_mb=1024)
    results = scorer.score([sample("hog"), sample("ok")])
    assert [r.score for r in results] == [0.0, 1.0]
    assert results[0].metadata["crashed"] and results[0].metadata["out_of_memory"]
    assert "ran out of memory (its address-space limit, rewards.*.memory_mb, is 1024 MiB)" in (
        results[0].metadata["fn_traceback"])  # once, for the worker's log and the console


def test_the_memory_limit_by_reward_kind_and_its_checks():
    assert memory_limit_mb(RewardConfig(reward_type="python")) == 4096
    assert memory_limit_mb(RewardConfig(reward_type="reward_model")) == 0  # a model's size
    assert memory_limit_mb(RewardConfig(reward_type="code_sandbox", code_sandbox=(
        CodeSandboxArgs(memory_mb=8192)))) == 9216  # its sandbox gets what it asked
    assert memory_limit_mb(RewardConfig(memory_mb=0)) == 0
    with pytest.raises(ConfigError, match="rewards.r.memory_mb: .*below code_sandbox"):
        check_reward_limits("r", RewardConfig(reward_type="code_sandbox", memory_mb=1024))
    with pytest.raises(ConfigError, match=r"rewards.r.max_failed_steps: must be a whole "):
        check_reward_limits("r", RewardConfig(max_failed_steps=-1))


class Answered:
    """A reward cluster whose worker already answered (ScoringJob.finish reads `get`)."""

    def __init__(self, results):
        self.results = results

    def get(self, ref, rank):
        return self.results


def failing_step(scorer: UserScorer, cases: list[str]) -> Taken:
    """Two groups of a step, scored by `scorer` through ScoringJob.finish as in a run."""
    groups = [Group(i, PromptRecord(f"r{i}", "p", "", tag="math"), [1], [
        Generation(0, [1], [0.0], "stop") for _ in cases], version=0, texts=["r"] * len(cases))
        for i in range(2)]
    results = scorer.score([Sample("p", "r", "", {"case": c}) for c in cases * 2])
    job = ScoringJob(groups, [(Answered(results), 0, None, [0, 1])], names=["mine"])
    return Taken(job.finish())


def test_a_reward_that_scores_nothing_is_said_and_stops_the_run_after_k_steps(caplog):
    from tests.workers.hostile_rewards import misbehave

    scorer = UserScorer(user_function(misbehave, PATH), PATH)
    health = RewardHealth({"mine": RewardConfig(max_failed_steps=3)})
    with caplog.at_level(logging.WARNING, logger="flywheel.pipelines.rlvr.reward_health"):
        health.check(failing_step(scorer, ["raise", "raise"]), 1)
        health.check(failing_step(scorer, ["raise", "ok"]), 2)  # half scored: not said
        health.check(failing_step(scorer, ["raise", "raise"]), 3)  # the row starts again
        health.check(failing_step(scorer, ["raise", "raise"]), 4)
        with pytest.raises(RewardScoresNothing, match=r"reward 'mine' scored none of its "
                                                      r"samples in 3 steps in a row \(step 5: "
                                                      r"fn_error 4 of 4\)"):
            health.check(failing_step(scorer, ["raise", "raise"]), 5)
    said = [r.getMessage() for r in caplog.records if r.name.endswith("reward_health")]
    assert len(said) == 4 and said[0] == ("step 1: reward 'mine' scored 0 of its 4 samples "
                                          "(unscored: fn_error 4; each scores 0)")
