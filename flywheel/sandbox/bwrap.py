"""Running untrusted programs: one bubblewrap sandbox per run, nothing left behind.

What a program gets (see `bwrap_argv`):
- its own user, PID, network, IPC, UTS and cgroup namespaces: no network at all (a
  loopback that is down), no other process visible or signalable, no way to ptrace ours;
- an unprivileged user: when we are root, bwrap itself is started as a throwaway uid
  (`sandbox_uid`), so the program has no capabilities, is nobody to the host's files, and
  cannot create further user namespaces (`--disable-userns`) or gain privileges
  (bwrap sets no_new_privs);
- a read-only root with only /usr (the system Python) bound read-only, fresh /proc and
  /dev, a private tmpfs /tmp of `max_file_mb` as the only writable place, the program at
  /sandbox/main.py (read-only), and a clean environment;
- rlimits applied by prlimit inside the sandbox (hard = soft, so it cannot raise them):
  CPU seconds, address space, processes, file size (stdout and stderr included, so an
  endless printer stops there), open files, no core dumps;
- a wall-clock limit: at `test_timeout_s` the outer bwrap and the sandbox's PID 1 are
  killed (`--die-with-parent` would too), and the kernel kills every process in its PID
  namespace; `run_sandboxed` returns only once they are all dead.

Input, output and the program travel through unlinked temporary files (file descriptors),
so nothing is written to a path on the host. We never fall back to running a program
without the sandbox: `check_sandbox` probes it once and raises one line when it cannot be
set up (bubblewrap missing, user namespaces disabled).

Languages: one entry in LANGUAGES (file name and command line inside the sandbox).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Literal

from flywheel.config.schema import CodeSandboxArgs

UID_BASE = 200_000  # throwaway uids for sandboxes started by root, one range per process
UID_SPAN = 100_000


@dataclass(frozen=True)
class Language:
    filename: str  # the program's path inside the sandbox is /sandbox/<filename>
    argv: tuple[str, ...]  # the command that runs it


LANGUAGES = {
    # -I: isolated (no user site, no environment), -B: no .pyc written.
    "python": Language("main.py", ("/usr/bin/python3", "-I", "-B", "/sandbox/main.py")),
}


@dataclass
class RunOutcome:
    status: Literal["exited", "timed_out"]  # timed_out: killed at the wall-clock limit
    exit_code: int  # the program's; bwrap reports death by signal N (a limit) as 128 + N
    stdout: bytes
    stderr: bytes
    seconds: float


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be set up here: refuse to run code at all."""


def sandbox_uid() -> int:
    """The host uid a root-started sandbox runs as: unused by any account, and per process,
    so concurrent scoring processes do not share one RLIMIT_NPROC count."""
    return UID_BASE + os.getpid() % UID_SPAN


def _system_binds() -> list[str]:
    """/usr read-only, and /bin, /lib, /lib64 as on the host (symlinks on merged-/usr)."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/lib", "/lib64"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    return argv


def bwrap_argv(args: CodeSandboxArgs, language: Language, program_fd: int) -> list[str]:
    mib = 1 << 20
    return [
        shutil.which("bwrap") or "bwrap",
        "--unshare-all", "--unshare-user", "--disable-userns",
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        *_system_binds(),
        "--proc", "/proc", "--dev", "/dev",
        "--size", str(args.max_file_mb * mib), "--tmpfs", "/tmp",
        "--dir", "/sandbox", "--ro-bind-data", str(program_fd), f"/sandbox/{language.filename}",
        "--remount-ro", "/",
        "--chdir", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
        "--uid", "65534", "--gid", "65534", "--hostname", "sandbox",
        "--",
        "/usr/bin/prlimit", f"--cpu={args.cpu_seconds}", f"--as={args.memory_mb * mib}",
        f"--nproc={args.max_processes}", f"--fsize={args.max_file_mb * mib}",
        f"--nofile={args.max_open_files}", "--core=0", "--",
        *language.argv,
    ]


def _file_with(data: bytes) -> IO[bytes]:
    f = tempfile.TemporaryFile()  # noqa: SIM115 (returned open; unlinked at once)
    f.write(data)
    f.flush()
    f.seek(0)
    return f


def _wait_namespace_gone(info: bytes, timeout_s: float = 5.0) -> None:
    """Kill the sandbox's PID 1 (host pid from bwrap's --info-fd) and wait until it is
    dead or a zombie: a PID namespace's init finishes dying only after every process in it
    has, so then nothing of the sandbox runs. Its zombie is the host init's to reap."""
    try:
        pid = json.loads(info)["child-pid"]
    except (ValueError, KeyError):
        return  # bwrap failed before starting the sandbox: nothing was started
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                    return
        except (FileNotFoundError, ProcessLookupError):
            return
        time.sleep(0.005)


def run_sandboxed(program: str, stdin: str, args: CodeSandboxArgs,
                  language: str = "python") -> RunOutcome:
    """Run `program` on `stdin` in a fresh sandbox; never raises for what the program does.
    When it returns, no process of the sandbox is left running."""
    lang = LANGUAGES[language]
    as_root = os.geteuid() == 0
    uid = sandbox_uid()
    with (_file_with(program.encode()) as prog, _file_with(stdin.encode()) as inp,
          tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err):
        # The program's stdin is opened read-only (the temporary file itself is read-write).
        stdin_fd = os.open(f"/proc/self/fd/{inp.fileno()}", os.O_RDONLY)
        info_r, info_w = os.pipe()  # bwrap writes the sandbox's host pid here
        argv = bwrap_argv(args, lang, prog.fileno())
        argv[1:1] = ["--info-fd", str(info_w)]
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, stdin=stdin_fd, stdout=out, stderr=err,
                pass_fds=(prog.fileno(), info_w), env={"PATH": "/usr/bin:/bin"},
                start_new_session=True, close_fds=True,
                **(dict(user=uid, group=uid, extra_groups=[]) if as_root else {}))
        finally:
            os.close(stdin_fd)
            os.close(info_w)
        try:
            code, status = proc.wait(timeout=args.test_timeout_s), "exited"
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # bwrap; the sandbox dies with it
            code, status = proc.wait(), "timed_out"
        with os.fdopen(info_r, "rb") as info:
            _wait_namespace_gone(info.read())
        seconds = time.monotonic() - started
        limit = args.max_file_mb << 20
        out.seek(0)
        err.seek(0)
        return RunOutcome(status, code, out.read(limit), err.read(limit), seconds)


def check_sandbox(args: CodeSandboxArgs) -> None:
    """Run a probe program; SandboxUnavailable (one line, with the fix) if it fails."""
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable("code_sandbox: bubblewrap (bwrap) is not installed; install "
                                 "it (apt-get install -y bubblewrap, or make setup)")
    probe = "import os; print(os.getuid(), len(os.listdir('/proc/self/fd')))"
    outcome = run_sandboxed(probe, "", args)
    if outcome.status != "exited" or outcome.exit_code != 0:
        why = outcome.stderr.decode(errors="replace").strip().splitlines() or [outcome.status]
        raise SandboxUnavailable(f"code_sandbox: cannot set up the bubblewrap sandbox "
                                 f"({why[-1]}); user namespaces must be enabled "
                                 f"(sysctl user.max_user_namespaces > 0)")
