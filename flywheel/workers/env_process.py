"""One env (with its tools) in a child process of its own, so that nothing it does takes
the env worker down or outlives its time limit.

Why a process per env: user envs and tools are untrusted code. In a thread of the env
worker, an env that calls `os._exit` or segfaults killed the worker (and the run with it),
and one that hung past `step_timeout_s` could only be abandoned, still spinning. Here a
`ProcessEnv` builds its env from an `EnvSpec` in a child (the user's module is imported
there, never in the worker or the driver) and forwards reset / step to it over a pipe:
- a call with no answer within `timeout_s` gets the child stopped with every process it
  started, `setsid` ones included (it runs under a subreaper supervisor,
  workers/process_tree.py; its work really stops) and a TimeoutError;
- a child that dies (os._exit, a segfault, the OOM killer) is an `EnvProcessDied` naming
  its exit code or signal;
- an exception in the env comes back as `EnvCallError` with the env's own type name;
- a step whose tool call timed out (its thread abandoned inside the child) marks the child
  for replacement at the next reset.
Each of these ends only that episode (the env manager records it; its group is dropped and
counted) and a fresh child is started for the next call. Children come from a forkserver
that preloads this module (flywheel.envs and flywheel.tools), so one starts in
milliseconds and shares those pages; each puts itself in its own process group, splits
into a supervisor and the env's server (`supervised`), and the supervisor asks the kernel
to stop it when the forkserver goes (which goes with the worker).

`start_call` / `finish_call` let the env manager start one call on every env of a turn
before it waits for any (envs/env_manager.py `call_all`), so a turn costs the slowest env,
not the sum.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any

from flywheel.config.schema import ToolUseConfig
from flywheel.envs import TextEnv, make, register_from_import_path
from flywheel.tools.from_config import tool_box, with_tools
from flywheel.workers.process_tree import CLEANUP_S, supervised

_PRELOAD = ["flywheel.workers.env_process"]
_context: multiprocessing.context.BaseContext | None = None
PR_SET_PDEATHSIG = 1
# A child's start (its forkserver's first start imports flywheel; a user env module may
# import more) may take this long, whatever a call's limit is.
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class EnvSpec:
    """What a child needs to build one env of a tag: picklable, no live objects."""

    tag: str
    env_type: str
    env_config: dict[str, Any] = field(default_factory=dict)
    import_path: str | None = None  # the user's env class, registered as env_type
    allowlist: tuple[str, ...] = ()
    tool_use: ToolUseConfig | None = None

    def describe(self) -> str:
        return f"custom_envs.{self.tag} (env {self.env_type})"


def build_env(spec: EnvSpec) -> TextEnv:
    """The env of `spec`, wrapped with its tools (in the child)."""
    if spec.import_path:
        register_from_import_path(spec.env_type, spec.import_path, list(spec.allowlist))
    env = make(spec.env_type, **spec.env_config)
    if spec.tool_use is None:
        return env
    box = tool_box(spec.tool_use, list(spec.allowlist), f"custom_envs.{spec.tag}.tool_use")
    return with_tools(env, box, spec.tool_use)


class EnvCallError(RuntimeError):
    """An exception the env raised in its process; `type_name` is its own class's name."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name


class EnvProcessDied(RuntimeError):
    """The env's process ended while it was building or answering a call."""


def _exit_text(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


def _mp() -> multiprocessing.context.BaseContext:
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        _context = ctx
    return _context


@contextlib.contextmanager
def _without_main() -> Any:
    """multiprocessing re-imports the parent's __main__ in every child it starts (a Ray
    worker's default_worker.py, the `platform` script): a bare __main__ while a child is
    launched keeps it out; the child needs only this module."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def _die_with_parent() -> None:
    """SIGKILL this process when its parent (the forkserver) exits (Linux prctl)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _error(exc: BaseException) -> tuple[str, tuple[str, str]]:
    return "error", (type(exc).__name__, str(exc)[:2000])


def _serve(conn: Any, spec: EnvSpec) -> None:
    """The child: build the env, then answer (method, args, kwargs) until closed. It runs
    under a supervisor (process_tree.supervised, the pid the worker holds) that kills
    every process the env starts, a `setsid` one included, when the env's process ends
    or is stopped."""
    with contextlib.suppress(OSError):
        os.setsid()
    _die_with_parent()
    supervised(None, close_fds=(conn.fileno(),))
    try:
        env = build_env(spec)
    except BaseException as exc:  # noqa: BLE001 - sent to the worker, which reports it
        conn.send(_error(exc))
        return
    conn.send(("ready", None))
    while True:
        try:
            method, args, kwargs = conn.recv()
        except (EOFError, OSError):  # the worker went away
            return
        if method == "close":
            with contextlib.suppress(Exception):
                env.close()
            conn.send(("ok", None))
            return
        try:
            reply = ("ok", getattr(env, method)(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - the env's error, reported by the worker
            reply = _error(exc)
        try:
            conn.send(reply)
        except Exception as exc:  # noqa: BLE001 - an unpicklable result
            conn.send(("error", ("TypeError", f"its {method} result cannot be sent back: "
                                              f"{type(exc).__name__}: {exc}")))


class ProcessEnv(TextEnv):
    """A TextEnv whose env lives in a child process (started on first use, replaced after
    a timeout or a death). `timeout_s` bounds each call; the child's start (building the
    env and its tools) gets at least START_TIMEOUT_S."""

    def __init__(self, spec: EnvSpec, timeout_s: float) -> None:
        self.spec = spec
        self.timeout_s = timeout_s
        self._proc: Any = None
        self._conn: Any = None
        self._replace_at_reset = False

    # ---- TextEnv ----------------------------------------------------------------------
    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        return self.finish_call(self.start_call("reset", (), {"seed": seed,
                                                               "options": options}))

    def step(self, action_text: str):
        return self.finish_call(self.start_call("step", (action_text,), {}))

    def call(self, method: str, *args: Any) -> Any:
        """Any other method of the env in the child (e.g. ToolEnv.tool_schemas)."""
        return self.finish_call(self.start_call(method, args, {}))

    def start(self) -> None:
        """Build the env in its process now (EnvCallError, EnvProcessDied, TimeoutError)."""
        self._ensure_started()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.send(("close", (), {}))
                if self._conn.poll(2.0):
                    self._conn.recv()
        self._stop()

    # ---- one call at a time, started before it is waited for ---------------------------
    def start_call(self, method: str, args: tuple, kwargs: dict[str, Any]
                   ) -> tuple[str, float]:
        if method == "reset" and self._replace_at_reset:
            self._stop()
        self._ensure_started()
        with contextlib.suppress(OSError, ValueError):  # a child gone: finish_call says how
            self._conn.send((method, args, kwargs))
        return method, time.monotonic() + self.timeout_s

    def finish_call(self, handle: tuple[str, float]) -> Any:
        method, deadline = handle
        status, value = self._answer(method, deadline)  # {method} gave no answer ...
        if status == "error":
            raise EnvCallError(*value)
        if method == "step" and isinstance(value, tuple) and len(value) == 5 and \
                isinstance(value[4], dict) and value[4].get("tool_timeouts"):
            self._replace_at_reset = True  # a tool's abandoned thread dies with the child
        return value

    # ---- the child ---------------------------------------------------------------------
    def _ensure_started(self) -> None:
        if self._proc is not None:
            return
        ctx = _mp()
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child, self.spec), daemon=True,
                           name=f"env-{self.spec.tag}")
        with _without_main():
            proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        limit = max(self.timeout_s, START_TIMEOUT_S)
        status, value = self._answer("building the env", time.monotonic() + limit, limit)
        if status == "error":
            self._stop()
            raise EnvCallError(*value)

    def _answer(self, what: str, deadline: float, limit: float | None = None
                ) -> tuple[str, Any]:
        """The child's reply to the call under way; kills it past `deadline`."""
        try:
            ready = self._conn.poll(max(0.0, deadline - time.monotonic()))
        except (OSError, ValueError):
            ready = True
        if not ready:
            self._stop()
            raise TimeoutError(f"{what} gave no answer within {limit or self.timeout_s:g}s "
                               f"(the env's process was killed)")
        try:
            return self._conn.recv()
        except (EOFError, OSError, ValueError):
            code = self._stop()
            raise EnvProcessDied(f"the env's process died in {what} "
                                 f"({_exit_text(code)})") from None

    def _stop(self) -> int | None:
        """Stop the child and everything it started; its exit code (negative: the signal).
        SIGTERM asks its supervisor to kill the whole tree (setsid children included);
        its process group is SIGKILLed after that, or if the supervisor does not exit."""
        proc, conn = self._proc, self._conn
        self._proc, self._conn, self._replace_at_reset = None, None, False
        if conn is not None:
            conn.close()
        if proc is None:
            return None
        proc.join(0.2)  # a child that exited by itself: its own code, not our SIGTERM
        if proc.exitcode is None:
            with contextlib.suppress(OSError):
                proc.terminate()
            proc.join(CLEANUP_S + 1)
        with contextlib.suppress(OSError):  # its group: whatever is left of it goes too
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.exitcode is None:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.join(5)
        code = proc.exitcode
        with contextlib.suppress(ValueError):
            proc.close()
        return code


def tool_schemas(spec: EnvSpec, env: ProcessEnv) -> list[dict[str, Any]]:
    """The tools the chat template describes for `spec`'s tag, as its child built them
    (none without tools, or with tags calls: tool_env / from_config.template_tools)."""
    if spec.tool_use is None or spec.tool_use.call_format == "tags":
        return []
    return env.call("tool_schemas")


