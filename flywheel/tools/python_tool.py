"""python: run the model's program in the bubblewrap sandbox and return what it printed.

The same sandbox and limits as the code_sandbox reward (flywheel/sandbox/bwrap.py): no
network, a read-only system, a private tmpfs, its own PID namespace and an unprivileged
user, rlimits on CPU, memory, processes, file size and open files, and a wall clock after
which its whole process tree is killed. The program gets empty stdin; the observation is its
stdout (cut to `max_output_chars`), and its stderr's last lines when it exits non-zero (a
ToolError, so the episode counts an error). A program past the wall clock or its CPU
seconds is a ToolTimeout.
The sandbox is probed once when the tool is built; where it cannot be set up the tool
refuses to start (never runs code unsandboxed).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from flywheel.config.schema import CodeSandboxArgs
from flywheel.sandbox.bwrap import check_sandbox, run_sandboxed
from flywheel.tools.base import ToolError, ToolTimeout, required_str

# bwrap reports death by signal N as 128 + N: RLIMIT_CPU sends SIGXCPU, then SIGKILL
CPU_LIMIT_CODES = (128 + signal.SIGKILL, 128 + signal.SIGXCPU)


@dataclass(frozen=True)
class PythonToolSettings:
    """`tool_args` of the python tool: the sandbox's limits per call."""

    timeout_s: float = 5.0  # wall clock of one program; its process tree is killed after
    cpu_seconds: int = 4  # RLIMIT_CPU
    memory_mb: int = 512  # RLIMIT_AS per process, MiB
    max_processes: int = 16  # RLIMIT_NPROC of the sandbox user
    max_file_mb: int = 4  # RLIMIT_FSIZE (stdout included) and the private /tmp size
    max_code_chars: int = 8000  # a longer program is refused unrun
    max_output_chars: int = 4000  # stdout kept for the observation

    def __post_init__(self) -> None:
        for name in ("timeout_s", "cpu_seconds", "memory_mb", "max_processes", "max_file_mb",
                     "max_code_chars", "max_output_chars"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    def sandbox_args(self) -> CodeSandboxArgs:
        return CodeSandboxArgs(test_timeout_s=self.timeout_s, cpu_seconds=self.cpu_seconds,
                               memory_mb=self.memory_mb, max_processes=self.max_processes,
                               max_file_mb=self.max_file_mb)


class PythonTool:
    name = "python"
    description = ("Run a Python 3 program in a sandbox without network or files and return "
                   "what it prints. Print the values you need.")
    parameters = {"type": "object", "required": ["code"],
                  "properties": {"code": {"type": "string",
                                          "description": "the program, e.g. print(4821 * 739)"}}}

    def __init__(self, settings: PythonToolSettings) -> None:
        self.settings = settings
        self.sandbox = settings.sandbox_args()

    def run(self, arguments: dict[str, Any]) -> str:
        code = required_str(arguments, "code", self.settings.max_code_chars)
        outcome = run_sandboxed(code, "", self.sandbox)
        stdout = outcome.stdout.decode(errors="replace")[: self.settings.max_output_chars]
        if outcome.status == "timed_out":
            raise ToolTimeout(f"program killed after {self.settings.timeout_s:g}s")
        if outcome.exit_code in CPU_LIMIT_CODES:
            raise ToolTimeout(f"program killed at its CPU limit of "
                              f"{self.settings.cpu_seconds}s")
        if outcome.exit_code != 0:
            err = outcome.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise ToolError(f"program exited with {outcome.exit_code}: {' | '.join(err)}"
                            + (f"\nstdout: {stdout}" if stdout else ""))
        return stdout if stdout.strip() else "(no output: print the result)"


def build(settings: PythonToolSettings) -> PythonTool:
    tool = PythonTool(settings)
    check_sandbox(tool.sandbox)
    return tool
