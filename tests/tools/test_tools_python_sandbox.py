"""The python tool runs the model's program in the bubblewrap sandbox: it answers, and a
hostile program is contained (no network to the host, no file outside its tmpfs, no process
left), each failure an observation and a count. Where bubblewrap cannot be set up these
fail (the tool refuses to start), never skip."""

from __future__ import annotations

import json
import socket

import pytest

from flywheel.envs import make
from flywheel.tools import ToolBox, ToolEnv, ToolError, build_tool
from flywheel.tools.python_tool import PythonToolSettings
from flywheel.tools.python_tool import build as build_python

LIMITS = {"timeout_s": 1.5, "cpu_seconds": 1, "memory_mb": 256, "max_processes": 16,
          "max_file_mb": 2, "max_output_chars": 200}


@pytest.fixture(scope="module")
def python_tool():
    return build_python(PythonToolSettings(**LIMITS))


def test_the_python_tool_returns_what_the_program_prints(python_tool):
    assert python_tool.run({"code": "print(4821 * 739)"}) == "3562719\n"
    assert python_tool.run({"code": "x = 1"}) == "(no output: print the result)"
    with pytest.raises(ToolError, match="exited with 1: .*ZeroDivisionError"):
        python_tool.run({"code": "print('partial')\n1/0"})
    assert len(python_tool.run({"code": "print('y' * 10_000)"})) == 200
    built = build_tool("python", {"timeout_s": 1.5}, None, [], "custom_envs.M.tool_use.tools[0]")
    assert built.settings.timeout_s == 1.5


def test_hostile_programs_are_contained_and_counted(python_tool, tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    port = listener.getsockname()[1]
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    mark = tmp_path / "mark"  # a host folder (the sandbox's /tmp is its own)
    # a program prints ESCAPED (built at run time, so a traceback never shows the word)
    # only if its attack worked
    programs = {
        "network": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 1)\n"
                   "print('ESC' + 'APED')",
        "host_file": f"print(open({str(secret)!r}).read())",
        "write_outside": f"open({str(mark)!r}, 'w').write('x')\nprint('ESC' + 'APED')",
        "fork_bomb": "import os\nwhile True:\n    os.fork()",
        "busy_loop": "while True:\n    pass",
        "sleeper": "import time\ntime.sleep(60)",
    }
    env = ToolEnv(make("multiply"), ToolBox([python_tool], timeout_s=10), max_tool_uses=10)
    env.reset(seed=0)
    outcomes = {}
    for name, code in programs.items():
        call = '<tool_call>{"name": "python", "arguments": {"code": %s}}</tool_call>'
        observation, _, terminated, _, info = env.step(call % json.dumps(code))
        assert not terminated and info["tool_calls"] == 1
        outcomes[name] = (observation, info)
    for name, (observation, info) in outcomes.items():
        assert "ESCAPED" not in observation and "host secret" not in observation, name
        assert info["tool_valid_calls"] == 0, (name, observation)
    for name in ("busy_loop", "sleeper"):  # the CPU limit or the wall clock
        assert outcomes[name][1]["tool_timeouts"] == 1, outcomes[name]
    # (a busy loop meets its 1 CPU second first, unless a loaded machine gives it less)
    assert all("timed out" in outcomes[n][0] for n in ("busy_loop", "sleeper"))
    assert not mark.exists()
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()

