"""The hard per-sample time limit every reward runs under (issues 14 and 17).

A reward is never called in the reward worker's own process. `TimeLimitedScorer` keeps
`scoring_processes` children (`python -m flywheel.workers.rewards.scoring_process`), each
with the reward built once, and hands them one sample at a time. A sample whose answer has
not come back within `sample_timeout_s` has its child's whole process group killed with
SIGKILL, which stops C code too (math-verify's signal.alarm cannot interrupt sympy or a
big-integer power; a sandboxed program's bwrap dies with its parent), and scores 0 with
`timed_out` in its metadata; a fresh child takes the next sample. A child that dies on its
own (a segfault, the OOM killer) costs its sample the same way (`crashed`). An exception
raised by the reward itself is a bug, not a verdict on the sample: it is re-raised here
(a user's function is another matter: python_reward.py counts its failures as scores of 0,
and the first report of one, `fn_traceback` in a result's metadata, is written to this
process's output once, which is the reward worker's log).

A batched reward (registry.SampleReward, e.g. a TRL-style user function) is handed a
batch instead: the samples of one `score` call, cut into one contiguous part per scoring
process. A part's limit is `sample_timeout_s` times its number of samples; past it, the
child is killed and every sample of the part scores 0 with `timed_out`, since one call
answers for all of them.

Why processes kept alive, not one per sample: importing math-verify (sympy) takes about a
second, paid again only after a kill. Why not threads or signals: neither stops C code.

Wire format: JSON both ways, each message a 4-byte big-endian length and the payload.
The parent sends the RewardConfig as a dict (rebuilt by the child with the config loader's
strict conversion), then per request a list of samples, each [prompt, response, reference,
record]; the child answers {"ready": true, "batched": bool} / {"error": ...} once, then
{"results": [{"score", "metadata"}, ...]} (one per sample) or {"error"} per request.
No pickle: nothing that crosses this pipe can run code on the other side.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from flywheel.config.schema import RewardConfig
from flywheel.platform.liveness import tick
from flywheel.workers.process_tree import CLEANUP_S
from flywheel.workers.rewards.registry import Sample, reward_spec
from flywheel.workers.rewards.result import RewardResult
from flywheel.workers.rewards.reward_limits import memory_limit_mb

# A child's start: imports and building the reward (a sandbox probe, a judge model's load);
# reward workers pass the run's timeouts.startup_s instead.
START_TIMEOUT_S = 120.0


class ScorerError(RuntimeError):
    """A reward could not be started or raised while scoring (one line: what and why)."""


class RewardHangs(ScorerError):
    """A reward's samples timed out `max_consecutive_timeouts` times in a row
    (reward_limits.py): the function hangs, and every sample would cost the full limit."""


def write_frame(fd: int, payload: bytes) -> None:
    data = struct.pack(">I", len(payload)) + payload
    while data:
        data = data[os.write(fd, data):]


def read_frame(fd: int) -> bytes | None:
    """One message, or None at end of file (the other side is gone)."""
    header = _read_exact(fd, 4)
    return None if header is None else _read_exact(fd, struct.unpack(">I", header)[0])


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


@dataclass
class _Child:
    proc: subprocess.Popen
    batched: bool = False  # its reward takes many samples a request (ready message)
    items: list[int] = field(default_factory=list)  # indices it is scoring; empty: idle
    deadline: float = 0.0

    @property
    def out_fd(self) -> int:
        return self.proc.stdout.fileno()

    def send(self, obj: object) -> None:
        """`obj` as JSON (plain data: strings, numbers, lists, dicts)."""
        write_frame(self.proc.stdin.fileno(), json.dumps(obj).encode())

    def kill(self) -> None:
        """SIGTERM the child's supervisor, which SIGKILLs the scorer and every process
        below it, `setsid` ones included (process_tree.py), then exits; if it has not
        within its cleanup time, SIGKILL the child's process group (it leads its own
        session). Then reap it."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=CLEANUP_S + 1.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


def start_child(cfg: RewardConfig, build: str, timeout_s: float = START_TIMEOUT_S,
                memory_mb: int | None = None) -> _Child:
    """A child with `cfg`'s reward built by `build` (its import path, the child's first
    argument) under an address-space limit of `memory_mb` MiB (its second; None: none),
    or ScorerError with the child's own reason."""
    limit = [] if memory_mb is None else [str(memory_mb)]
    proc = subprocess.Popen([sys.executable, "-m", "flywheel.workers.rewards.scoring_process",
                             build, *limit],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)
    child = _Child(proc)
    child.send(dataclasses.asdict(cfg))
    ready, _, _ = select.select([child.out_fd], [], [], timeout_s)
    answer = read_frame(child.out_fd) if ready else None
    if answer is None or "error" in (msg := json.loads(answer)):
        child.kill()
        why = (msg["error"] if answer is not None else
               f"its scoring process did not start within {timeout_s:.0f}s" if not ready
               else f"its scoring process exited with code {proc.returncode}")
        raise ScorerError(f"reward '{cfg.reward_type}' cannot start: {why}")
    child.batched = bool(msg.get("batched"))
    return child


def _builder(reward_type: str) -> str:
    """The import path of `reward_type`'s builder in this process's catalog."""
    try:
        return reward_spec(reward_type).build
    except ValueError as e:
        raise ScorerError(f"reward '{reward_type}' cannot start: {e}") from None


def wire(sample: Sample) -> list:
    """A sample as the scoring process reads it (scoring_process.samples), as JSON."""
    return [*sample[:3], sample.record or {}, sample.messages]


class TimeLimitedScorer:
    """Scores samples with `cfg`'s reward in killable children, `sample_timeout_s` each."""

    def __init__(self, cfg: RewardConfig, start_timeout_s: float = START_TIMEOUT_S,
                 build: str | None = None):
        if cfg.sample_timeout_s <= 0 or cfg.scoring_processes < 1:
            raise ValueError(f"rewards: sample_timeout_s must be > 0 and scoring_processes "
                             f">= 1 (got {cfg.sample_timeout_s}, {cfg.scoring_processes})")
        self.cfg = cfg
        self.start_timeout_s = start_timeout_s
        # The reward's builder by import path (registry.py); unset: this process's catalog.
        self.build = build or _builder(cfg.reward_type)
        # Started now, so a reward that cannot run here (no sandbox) fails the worker's start.
        self.memory_mb = memory_limit_mb(cfg) or None  # 0: no limit
        self._children: list[_Child | None] = [self._start() for _ in
                                               range(cfg.scoring_processes)]
        self.batched = self._children[0].batched  # hand out batches, not single samples
        self.reported_failure = False  # a user function's failure report was written
        self.timeouts_in_a_row = 0  # requests timed out since the last one answered
        # What the console should hear of this scorer (the first timeout), newest last;
        # the reward worker hands them to the driver while a call is busy (reward_worker.py)
        self.notices: list[str] = []

    def score(self, items: Sequence[tuple]) -> list[RewardResult]:
        """Samples (or (prompt, response, reference) triples) scored in parallel, results
        in order."""
        samples = [Sample(*item) for item in items]
        results: list[RewardResult | None] = [None] * len(samples)
        todo = self._parts(len(samples))
        while todo or any(c is not None and c.items for c in self._children):
            self._hand_out(samples, todo)
            busy = [c for c in self._children if c is not None and c.items]
            wait_s = max(0.0, min(c.deadline for c in busy) - time.monotonic())
            ready, _, _ = select.select([c.out_fd for c in busy], [], [], wait_s)
            for slot, child in enumerate(self._children):
                if child is None or not child.items:
                    continue
                part = child.items
                if child.out_fd in ready:
                    for i, result in zip(part, self._answer(slot, child), strict=True):
                        results[i] = result
                    tick()  # a scored sample is progress (platform/liveness.py)
                elif time.monotonic() >= child.deadline:
                    for i in part:
                        results[i] = RewardResult(0.0, {"timed_out": True})
                    self._replace(slot)
                    tick()  # so is one given up on
                    self._timed_out(len(part))
        return results

    def close(self) -> None:
        for child in self._children:
            if child is not None:
                child.kill()
        self._children = [None] * len(self._children)

    def _parts(self, n: int) -> deque[list[int]]:
        """Sample indices as requests: one each, or for a batched reward one contiguous
        part per scoring process."""
        if not self.batched:
            return deque([i] for i in range(n))
        k = min(n, len(self._children))
        bounds = [n * j // k for j in range(k + 1)]
        return deque(list(range(a, b)) for a, b in zip(bounds, bounds[1:]))

    def _start(self) -> _Child:
        return start_child(self.cfg, self.build, self.start_timeout_s, self.memory_mb)

    def _timed_out(self, samples: int) -> None:
        """Count a request killed at its limit: the first is said (notices, the worker's
        log); `max_consecutive_timeouts` in a row declare the reward broken."""
        cfg = self.cfg
        self.timeouts_in_a_row += 1
        if len(self.notices) == 0:
            what = "a sample" if samples == 1 else f"a batch of {samples} samples"
            self.notice(f"reward '{cfg.reward_type}': {what} timed out at sample_timeout_s "
                        f"{cfg.sample_timeout_s:g}s (scored 0, counted in reward/timed_out; "
                        f"{cfg.max_consecutive_timeouts or 'no'} timeouts in a row stop "
                        f"the run)")
        k = cfg.max_consecutive_timeouts
        if k and self.timeouts_in_a_row >= k:
            for slot, child in enumerate(self._children):  # nothing left running
                if child is not None and child.items:
                    self._replace(slot)
            what = "batches" if self.batched else "samples"
            raise RewardHangs(f"reward '{cfg.reward_type}': {self.timeouts_in_a_row} "
                              f"{what} in a row timed out at sample_timeout_s "
                              f"{cfg.sample_timeout_s:g}s (max_consecutive_timeouts {k}): "
                              f"it hangs; fix it, or raise sample_timeout_s or "
                              f"max_consecutive_timeouts")

    def notice(self, text: str) -> None:
        self.notices.append(text)
        print(f"WARNING rewards: {text}", file=sys.stderr, flush=True)

    def _hand_out(self, samples: list[Sample], todo: deque[list[int]]) -> None:
        for slot, child in enumerate(self._children):
            if not todo:
                return
            if child is None:
                child = self._children[slot] = self._start()
            if not child.items:
                child.items = todo.popleft()
                child.send([wire(samples[i]) for i in child.items])
                child.deadline = (time.monotonic()
                                  + self.cfg.sample_timeout_s * len(child.items))

    def _answer(self, slot: int, child: _Child) -> list[RewardResult]:
        answer = read_frame(child.out_fd)
        part, child.items = child.items, []
        if answer is None:  # died by itself: the samples are lost, the worker is not
            self._replace(slot)
            return [RewardResult(0.0, {"crashed": True}) for _ in part]
        self.timeouts_in_a_row = 0  # an answer, whatever it says: the reward does not hang
        msg = json.loads(answer)
        if "error" in msg:
            raise ScorerError(f"reward '{self.cfg.reward_type}' raised: {msg['error']}")
        if len(msg["results"]) != len(part):
            raise ScorerError(f"reward '{self.cfg.reward_type}' answered "
                              f"{len(msg['results'])} results for {len(part)} samples")
        results = [RewardResult(float(r["score"]), r["metadata"]) for r in msg["results"]]
        for result in results:
            self._report_failure(result.metadata)
        return results

    def _report_failure(self, metadata: dict) -> None:
        """Write a user function's first failure report to this process's output (the
        worker's log) and pass it on; drop later ones (python_reward.py)."""
        if "fn_traceback" not in metadata:
            return
        if self.reported_failure:
            del metadata["fn_traceback"]
            return
        self.reported_failure = True
        print(f"WARNING rewards ({self.cfg.reward_type}): {metadata['fn_traceback']}",
              file=sys.stderr, flush=True)

    def _replace(self, slot: int) -> None:
        """Kill the child in `slot`; a fresh one starts when the next sample needs it."""
        child, self._children[slot] = self._children[slot], None
        child.kill()
