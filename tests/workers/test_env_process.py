"""Envs and tools in processes of their own (workers/env_process.py), in this process (no
Ray): an env or tool that ends its process (os._exit, a segfault) fails only its episode,
counted and named, and the next episode gets a fresh process; a hung step's process is
killed (its work really stops), and the envs of a turn wait out one limit together; a tool
whose constructor exits is refused before any worker starts, naming the tag, with the
driver alive; a NaN reward from a real env process fails its episode naming the env."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import time

import pytest

from flywheel.config.schema import ToolConfig, ToolUseConfig
from flywheel.envs import EnvManager, EnvManagerConfig, aggregate_metrics
from flywheel.pipelines.agentic.env_jobs import check_envs
from flywheel.pipelines.config import load_config_dict
from flywheel.workers.env_process import EnvSpec, ProcessEnv

FLAKY = "tests.pipelines.faulty_envs:FlakyEnv"
CALL = '<tool_call>{"name": "%s", "arguments": {}}</tool_call>'


class Chars:
    """A char tokenizer that records the longest text it was asked to encode."""

    def __init__(self) -> None:
        self.longest = 0

    def encode(self, text: str) -> list[int]:
        self.longest = max(self.longest, len(text))
        return [ord(c) for c in text]

    def decode(self, ids) -> str:
        return "".join(chr(i) for i in ids)


def replying(text: str):
    def generate(prompts, max_tokens):
        ids = [ord(c) for c in text][:max_tokens]
        return [(ids, [-1.0] * len(ids)) for _ in prompts]
    return generate


def flaky(mode: str, every_seed: bool = True, fail_on_turn: int = 1) -> EnvSpec:
    return EnvSpec("Flaky", "flaky", {"mode": mode, "every_seed": every_seed,
                                      "fail_on_turn": fail_on_turn}, FLAKY,
                   ("tests.pipelines", "tests.tools"))


def manager(first: EnvSpec, timeout_s: float = 30.0, rest: EnvSpec | None = None,
            groups: int = 2, group_size: int = 2, **cfg) -> EnvManager:
    """Env 0 from `first`, the others from `rest` (default: a FlakyEnv that never fails)."""
    specs = iter([first] + [rest or flaky("crash", fail_on_turn=99)] * (groups * group_size - 1))
    config = EnvManagerConfig("flaky", tag="Flaky", group_size=group_size,
                              num_env_groups=groups, max_steps=2, max_tokens_per_step=128,
                              system_template="", turn_template="{observation}\n", **cfg)
    return EnvManager(config, make_env=lambda: ProcessEnv(next(specs), timeout_s))


@pytest.mark.parametrize("mode, says", [("exit", "exit code 3"),
                                        ("segfault", "killed by SIGSEGV")])
def test_an_env_that_ends_its_process_fails_its_episode_and_the_next_gets_a_new_one(
        mode, says):
    envs = manager(flaky(mode))
    try:
        for _ in range(2):  # the second rollout: a fresh process, failing the same way
            episodes = envs.rollout(replying("<answer>Down</answer>"), Chars(), seed=0)
            died = episodes[0]
            assert died.failed and "tag Flaky: env 0 (flaky" in died.error
            assert f"EnvProcessDied: the env's process died in step ({says})" in died.error
            assert not any(t.failed for t in episodes[1:])
            assert all(len(t.turn_spans) == 2 for t in episodes[1:])
            assert aggregate_metrics(episodes)["failed"] == 0.25
    finally:
        envs.close()


def test_a_hung_step_is_killed_with_its_process_and_one_turn_waits_one_limit():
    limit = 2.0
    envs = manager(flaky("hang"), timeout_s=limit, rest=flaky("hang"), groups=1,
                   group_size=3)
    try:
        for env in envs.envs:  # starts every process (not timed)
            env.reset(seed=1)
        pids = [env._proc.pid for env in envs.envs]
        start = time.monotonic()
        episodes = envs.rollout(replying("<answer>Down</answer>"), Chars(), seed=1)
        waited = time.monotonic() - start
        assert all("TimeoutError: step gave no answer within 2s (the env's process was "
                   "killed)" in t.error for t in episodes)
        assert waited < 2.5 * limit, waited  # one limit for the turn, not one per env
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in pids)  # the sleeping steps were stopped
    finally:
        envs.close()


def test_a_stopped_env_takes_every_process_it_started_with_it_setsid_ones_included(tmp_path):
    pid_file = tmp_path / "pids"
    spec = EnvSpec("Flaky", "flaky", {"mode": "orphans", "every_seed": True,
                                      "pid_file": str(pid_file)}, FLAKY,
                   ("tests.pipelines", "tests.tools"))
    env = ProcessEnv(spec, timeout_s=2.0)
    try:
        env.reset(seed=1)
        with pytest.raises(TimeoutError, match="the env's process was killed"):
            env.step("<answer>Down</answer>")
        started = [int(pid) for pid in pid_file.read_text().split()]
        assert len(started) == 2
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in started if _alive(pid)]  # the setsid orphan too
    finally:
        env.close()
        for pid in pid_file.read_text().split() if pid_file.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead (its parent reaps it)
        return stat.read().split(") ")[1][0] != "Z"


def test_a_tool_that_ends_its_process_fails_its_episode_and_a_flood_is_cut_and_counted():
    def tooled(tool: str) -> EnvSpec:
        path = f"tests.tools.user_tools:{tool.title()}"
        use = ToolUseConfig(tools=[ToolConfig(tool_id=tool, tool_import_path=path)],
                            max_tool_output_tokens=0, max_tool_output_chars=1000)
        return EnvSpec("Flaky", "flaky", {"fail_on_turn": 99}, FLAKY,
                       ("tests.pipelines", "tests.tools"), use)

    envs = manager(tooled("exits"), rest=tooled("exits"), groups=1, group_size=2)
    try:
        [died, other] = envs.rollout(replying(CALL % "exits"), Chars(), seed=0)
        assert died.failed and other.failed  # both envs called the tool; each died alone
        assert "died in step (exit code 7)" in died.error and "env 1 (flaky" in other.error
        again = envs.rollout(replying("<answer>Down</answer>"), Chars(), seed=0)
        assert not any(t.failed for t in again)  # fresh processes play on
    finally:
        envs.close()
    chars = Chars()
    envs = manager(tooled("floods"), rest=tooled("floods"), groups=1, group_size=1)
    try:
        [flooded] = envs.rollout(replying(CALL % "floods"), chars, seed=0)
    finally:
        envs.close()
    assert not flooded.failed and flooded.metrics["tool_output_cut"] == 2.0  # both turns called
    assert flooded.infos[0]["tool_output_cut_by"] == "floods"
    assert chars.longest < 2000  # 10 MB never reached the tokenizer
    assert "[floods output cut: 9999000 more characters" in chars.decode(flooded.input_ids)


def test_a_nan_reward_from_an_env_process_fails_its_episode_naming_the_env():
    envs = manager(flaky("nan"))
    try:
        episodes = envs.rollout(replying("<answer>Down</answer>"), Chars(), seed=0)
    finally:
        envs.close()
    assert "tag Flaky: env 0 (flaky" in episodes[0].error
    assert "ValueError: reward must be finite, got nan" in episodes[0].error
    assert not any(t.failed for t in episodes[1:])


BASE = {
    "pipeline_type": "agentic", "pretrain": "builtin://tiny-qwen2", "rollout_batch_size": 8,
    "import_allowlist": ["tests.pipelines", "tests.tools"],
    "train_env_manager": {"num_env_groups": 1, "group_size": 4, "tags": ["F"]},
    "val_env_manager": {"num_env_groups": 1, "group_size": 1, "tags": ["F"]},
    "custom_envs": {"F": {"env_type": "flaky", "env_import_path": FLAKY, "tool_use": {
        "tools": [{"tool_id": "exits_when_built",
                   "tool_import_path": "tests.tools.user_tools:ExitsWhenBuilt"}]}}},
}


def test_a_tool_whose_constructor_exits_is_refused_naming_the_tag(tiny_model_path):
    raw = copy.deepcopy(BASE)
    with pytest.raises(ValueError, match=r"custom_envs.F: building its env and tools: the "
                                         r"env's process died in building the env \(exit "
                                         r"code 5\)"):
        check_envs(load_config_dict(raw), tiny_model_path)
    # this process (the driver) is alive, and a well-behaved tool passes
    raw["custom_envs"]["F"]["tool_use"]["tools"] = [
        {"tool_id": "reverse", "tool_import_path": "tests.tools.user_tools:Reverse"}]
    check_envs(load_config_dict(raw), tiny_model_path)
