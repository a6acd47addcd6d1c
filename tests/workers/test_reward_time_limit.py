"""The hard per-sample time limit (issue 14's reward item): enforced from outside, in a
killable process, for every reward; a timed-out or crashed sample scores 0 and says so,
and the scorer goes on with a fresh process."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from flywheel.config.schema import CodeSandboxArgs, RewardConfig
from flywheel.sandbox.bwrap import UID_BASE, UID_SPAN
from flywheel.workers.rewards.time_limit import ScorerError, TimeLimitedScorer

ADD = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
ADD_PROGRAM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def leftover_sandbox_processes() -> dict[int, str]:
    """Host pid -> state of every process still running as a sandbox uid. A dead sandbox's
    PID 1 may linger as a zombie until the host's init (its parent by then) reaps it:
    that one is dead and not ours to reap, so it does not count."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except (FileNotFoundError, ProcessLookupError):
            continue
        state, ppid = fields["State"].split()[0], int(fields["PPid"])
        if (UID_BASE <= int(fields["Uid"].split()[0]) < UID_BASE + UID_SPAN
                and not (state == "Z" and ppid == 1)):
            found[int(pid)] = state
    return found


@pytest.fixture
def scorers():
    made = []

    def make(**kwargs) -> TimeLimitedScorer:
        made.append(TimeLimitedScorer(RewardConfig(**kwargs)))
        return made[-1]

    yield make
    for scorer in made:
        scorer.close()


def test_math_verify_stuck_past_the_limit_is_killed_and_the_next_sample_scores(scorers):
    # math-verify's own 5 s comparison timeout would let this tower of powers hold the
    # sample for 5 s; the outer limit kills it at 0.5 s and a fresh process goes on.
    scorer = scorers(reward_type="math_rule", sample_timeout_s=0.5)
    results = scorer.score([("q", "\\boxed{9^{9^{9^{9}}}}", "2"), ("q", "\\boxed{7}", "7")])
    assert [r.score for r in results] == [0.0, 1.0]
    assert results[0].metadata == {"timed_out": True}  # set only by the outer limit


def test_sandboxed_program_past_the_sample_limit_leaves_nothing_running(scorers):
    scorer = scorers(reward_type="code_sandbox", sample_timeout_s=1.0,
                     code_sandbox=CodeSandboxArgs(test_timeout_s=30, cpu_seconds=30))
    sleeper = "```python\nimport time\ntime.sleep(60)\n```"
    results = scorer.score([("q", sleeper, ADD), ("q", ADD_PROGRAM, ADD)])
    assert results[0].score == 0.0 and results[0].metadata["timed_out"]
    assert results[1].score == 1.0 and results[1].metadata["passed"] == 1
    assert leftover_sandbox_processes() == {}


def test_a_scoring_process_that_dies_costs_only_its_sample(scorers):
    scorer = scorers(reward_type="code_sandbox", sample_timeout_s=20.0,
                     code_sandbox=CodeSandboxArgs(test_timeout_s=10, cpu_seconds=10))
    pid = scorer._children[0].proc.pid
    threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()  # e.g. the OOM killer
    sleeper = "```python\nimport time\ntime.sleep(8)\n```"
    results = scorer.score([("q", sleeper, ADD), ("q", ADD_PROGRAM, ADD)])
    assert results[0].score == 0.0 and results[0].metadata == {"crashed": True}
    assert results[1].score == 1.0
    assert leftover_sandbox_processes() == {}


def test_samples_are_scored_in_parallel_across_scoring_processes(scorers):
    scorer = scorers(reward_type="code_sandbox", scoring_processes=2, sample_timeout_s=10.0)
    napper = "```python\nimport time\ntime.sleep(1.5)\nprint(3)\n```"
    started = time.monotonic()
    results = scorer.score([("q", napper, ADD), ("q", napper, ADD)])
    assert [r.score for r in results] == [1.0, 1.0]
    assert time.monotonic() - started < 2.8  # two 1.5 s samples side by side


def test_a_reward_that_raises_is_an_error_not_a_zero(scorers):
    scorer = scorers(reward_type="code_sandbox")
    with pytest.raises(ScorerError, match="reward 'code_sandbox' raised: ValueError: "
                                          "code_sandbox: reference is not JSON"):
        scorer.score([("q", ADD_PROGRAM, "not json")])


def test_unknown_reward_refuses_to_start_in_one_line():
    with pytest.raises(ScorerError, match="reward 'nope' cannot start: unknown reward_type") as e:
        TimeLimitedScorer(RewardConfig(reward_type="nope"))
    assert "\n" not in str(e.value)


def test_code_sandbox_refuses_to_start_without_bubblewrap(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # the scoring process finds no bwrap
    with pytest.raises(ScorerError, match="bubblewrap \\(bwrap\\) is not installed") as e:
        TimeLimitedScorer(RewardConfig(reward_type="code_sandbox"))
    assert "\n" not in str(e.value)


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="sample_timeout_s must be > 0"):
        TimeLimitedScorer(RewardConfig(sample_timeout_s=0))


def test_reward_worker_on_ray_scores_under_the_limit(ray_session):
    from flywheel.platform.cluster import Cluster
    from flywheel.platform.resources import RoleDevices
    from flywheel.workers.reward_worker import RewardWorker

    cfg = RewardConfig(reward_type="code_sandbox", sample_timeout_s=1.0,
                       code_sandbox=CodeSandboxArgs(test_timeout_s=30, cpu_seconds=30))
    cluster = Cluster.create("rewards.code", RewardWorker, RoleDevices("rewards.code", (0,)),
                             None, init_kwargs=dict(reward_type="code_sandbox", cfg=cfg))
    try:
        hang = "```python\nwhile True:\n    pass\n```"
        results = cluster.call_all("score", [("q", hang, ADD), ("q", ADD_PROGRAM, ADD)])[0]
        assert results[0].metadata == {"timed_out": True}
        assert results[1].score == 1.0
    finally:
        cluster.shutdown()
    assert leftover_sandbox_processes() == {}


def test_a_slow_reward_that_keeps_scoring_is_not_a_stall(ray_session):
    """timeouts.score_s bounds how long a reward worker may go without finishing a sample,
    not a whole call: 8 samples of 0.25 s (2 s) against a 1 s limit are waited for."""
    from flywheel.pipelines.roles.handles import RewardRole
    from flywheel.platform.resources import RoleDevices
    from flywheel.workers.reward_worker import RewardWorker

    cfg = RewardConfig(reward_type="slow", sample_timeout_s=5.0)
    role = RewardRole.create("rewards.slow", RewardWorker, RoleDevices("rewards.slow", (0,)),
                             None, timeout_s=1.0,
                             init_kwargs=dict(reward_type="slow", cfg=cfg,
                                              build="tests.workers.slow_reward:build"))
    try:
        results = role.get(role.score(0, [("q", "r", "a")] * 8), 0)
        assert [r.score for r in results] == [1.0] * 8
    finally:
        role.shutdown()
