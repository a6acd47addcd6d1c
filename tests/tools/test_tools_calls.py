"""Tool calls inside episodes (issue 26 item 1): parsing, the built-in tools, and every way
a call can fail becoming an observation plus a count, never an exception out of the episode.
"""

from __future__ import annotations

import json
import time

import pytest

from flywheel.envs import make
from flywheel.envs.trajectory import Trajectory, episode_metrics
from flywheel.tools import (
    CallFormat,
    MalformedCall,
    ToolBox,
    ToolCall,
    ToolEnv,
    ToolError,
    build_tool,
    parse_tool_call,
)
from flywheel.tools.calculator import Calculator
from flywheel.tools.search import SearchSettings
from flywheel.tools.search import build as build_search


def call_text(name, arguments, tags=("<tool_call>", "</tool_call>")):
    return f"I will call.{tags[0]}\n{json.dumps({'name': name, 'arguments': arguments})}\n{tags[1]}"


# ---- parsing ------------------------------------------------------------------------------
def test_a_valid_call_parses_and_a_reply_without_one_is_an_action():
    assert parse_tool_call(call_text("calculator", {"expression": "2*3"})) == ToolCall(
        "calculator", {"expression": "2*3"})
    assert parse_tool_call("<answer>6</answer>") is None
    # arguments written as a JSON string holding the object
    text = '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>'
    assert parse_tool_call(text) == ToolCall("search", {"query": "x"})
    # the format is configurable
    fmt = CallFormat("[CALL]", "[/CALL]")
    assert parse_tool_call(call_text("a", {}, ("[CALL]", "[/CALL]")), fmt) == ToolCall("a", {})
    assert parse_tool_call(call_text("a", {}), fmt) is None


@pytest.mark.parametrize("text, reason", [
    ('<tool_call>{"name": "calculator"', "without </tool_call>"),
    ("<tool_call>{name: calculator}</tool_call>", "not JSON"),
    ('<tool_call>{"arguments": {}}</tool_call>', '"name"'),
    ('<tool_call>["calculator"]</tool_call>', '"name"'),
    ('<tool_call>{"name": "c", "arguments": [1]}</tool_call>', "must be a JSON object"),
    ('<tool_call>{"name": "c", "arguments": "nope"}</tool_call>', "not a JSON object"),
    ("<tool_call>" + "[" * 100_000 + "</tool_call>", "characters"),
])
def test_malformed_calls_say_what_is_wrong(text, reason):
    parsed = parse_tool_call(text)
    assert isinstance(parsed, MalformedCall) and reason in parsed.reason


# ---- the built-in tools -------------------------------------------------------------------
def test_calculator_is_exact_and_refuses_anything_but_arithmetic():
    calc = Calculator()
    assert calc.run({"expression": "4821 * 739"}) == "3562719"
    assert calc.run({"expression": "-(7 + 3) / 4"}) == "-2.5"
    assert calc.run({"expression": "123456789 * 987654321"}) == str(123456789 * 987654321)
    for bad in ("__import__('os').system('true')", "x * 2", "2 ** 10000", "9 ** 9 ** 9",
                "1 / 0", "(1,2)", "'a' * 3", "10 ** 60 * 10 ** 60"):
        with pytest.raises(ToolError):
            calc.run({"expression": bad})
    with pytest.raises(ToolError, match="non-empty string"):
        calc.run({"expr": "1"})


def test_search_ranks_the_matching_document_first(tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(json.dumps(d) for d in [
        {"title": "Paris", "text": "Paris is the capital of France."},
        {"title": "Berlin", "text": "Berlin is the capital of Germany."},
        {"title": "Rome", "text": "Rome is the capital of Italy and has the Colosseum."},
        {"title": "Oslo", "text": "Oslo lies in Norway."}]))
    search = build_search(SearchSettings(str(docs), top_k=2))
    answer = search.run({"query": "capital of Italy Colosseum"})
    assert answer.startswith("[1] Rome:") and "[2]" in answer
    assert search.run({"query": "zebra"}) == "No document matches the query."
    lines = tmp_path / "docs.txt"
    lines.write_text("alpha beta\n\ngamma delta\n")
    assert build_search(SearchSettings(str(lines))).run({"query": "delta"}) == "[1] gamma delta"


def test_tools_build_by_catalog_name_or_user_import_path():
    assert build_tool("calculator", {}, None, [], "t").name == "calculator"
    with pytest.raises(ValueError, match="unknown tool_id 'calculater'"):
        build_tool("calculater", {}, None, [], "t")
    with pytest.raises(Exception, match="declares no settings"):
        build_tool("calculator", {"digits": 3}, None, [], "t")
    tool = build_tool("reverse", {"suffix": "!"}, "user_tools:Reverse", ["user_tools"], "t")
    assert tool.run({"text": "abc"}) == "cba!"
    with pytest.raises(ValueError, match="not under the import_allowlist"):
        build_tool("reverse", {}, "user_tools:Reverse", ["other"], "t")
    with pytest.raises(ValueError, match="lacks name, description"):
        build_tool("nope", {}, "user_tools:NotATool", ["user_tools"], "t")
    with pytest.raises(ValueError, match="named 'reverse', not tool_id 'rev'"):
        build_tool("rev", {}, "user_tools:Reverse", ["user_tools"], "t")


# ---- failures become observations ---------------------------------------------------------
def user_box(timeout_s=0.3):
    tools = [build_tool(n, {}, f"user_tools:{cls}", ["user_tools"], "t") for n, cls in
             (("hangs", "Hangs"), ("raises", "Raises"), ("number", "ReturnsNumber"))]
    return ToolBox([Calculator(), *tools], timeout_s)


def test_unknown_raising_hanging_and_bad_tools_become_text():
    box = user_box()
    assert box.run_call(ToolCall("calculator", {"expression": "6*7"})).text == "42"
    outcome = box.run_call(ToolCall("calculater", {}))
    assert outcome.kind == "unknown" and "calculator" in outcome.text
    outcome = box.run_call(ToolCall("calculator", {"expression": "x"}))
    assert outcome.kind == "error" and outcome.text.startswith("Error: not arithmetic")
    outcome = box.run_call(ToolCall("raises", {}))
    assert outcome.kind == "error" and "KeyError" in outcome.text
    assert box.run_call(ToolCall("number", {})).kind == "error"
    started = time.monotonic()
    outcome = box.run_call(ToolCall("hangs", {}))
    assert outcome.kind == "timeout" and time.monotonic() - started < 2


def test_tool_env_counts_every_kind_and_keeps_the_budget():
    env = ToolEnv(make("multiply"), user_box(), max_tool_uses=4)
    env.reset(seed=0)
    a, b = env.env.factors
    replies = [call_text("calculator", {"expression": f"{a} * {b}"}),
               "<tool_call>{oops</tool_call>", call_text("raises", {}), call_text("hangs", {}),
               call_text("nope", {}), call_text("calculator", {"expression": "2"}),
               f"<answer>{a * b}</answer>"]
    trajectory = Trajectory(0, 0, 0, "guess_number", "g")
    observations = []
    for reply in replies:
        observation, reward, terminated, _, info = env.step(reply)
        observations.append(observation)
        trajectory.rewards.append(reward)
        trajectory.infos.append(info)
        trajectory.turn_spans.append((0, 0))
    assert terminated and info["success"] and "observation_role" not in info
    assert [i.get("observation_role") for i in trajectory.infos[:6]] == ["tool"] * 6
    assert observations[0] == str(a * b) and "malformed tool call" in observations[1]
    assert "no tool uses left" in observations[5] and observations[6] == "Correct."
    metrics = episode_metrics(trajectory)
    assert {k: metrics[k] for k in ("tool_calls", "tool_valid_calls", "tool_malformed",
                                    "tool_errors", "tool_timeouts", "tool_unknown",
                                    "tool_over_budget")} == {
        "tool_calls": 6, "tool_valid_calls": 1, "tool_malformed": 1, "tool_errors": 1,
        "tool_timeouts": 1, "tool_unknown": 1, "tool_over_budget": 1}
    assert metrics["tool_valid_rate"] == pytest.approx(1 / 6)
    assert metrics["success"] == 1.0 and sum(trajectory.rewards) > 0
    # a new episode gets the whole budget again
    env.reset(seed=1)
    assert env.step(call_text("calculator", {"expression": "3"}))[0] == "3"
