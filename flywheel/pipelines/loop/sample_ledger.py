"""Where every generated group went: trained at a step, or dropped with a reason.

One JSON line per group in `samples.jsonl`, written as its fate is decided, so an
off-policy run can be audited afterwards: which policy version generated each prompt's
responses, at which step they were trained, how stale they were, and which were dropped
(stale, filtered, env_error) or abandoned when the run stopped (aborted). Every group
generated in a run appears exactly once. Agentic groups (envs sharing a seed) are recorded
the same way, by their start version (the policy of their first turn).

A resumed run first cuts the ledger back to its checkpoint (`cut_back`): rows of later
steps were lost with the process that wrote them (a kill after the checkpoint) and those
groups are trained again, and `aborted` rows name groups the resumed run restores or
generates again; without the cut the ledger would say they were trained twice.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

from flywheel.pipelines.loop.seams import TrainableGroup
from flywheel.platform.resume import rewrite_jsonl

LEDGER_FILE = "samples.jsonl"


def cut_back(run_dir: Path, step: int) -> int:
    """Before a resume from the checkpoint of `step`: the rows still true; returns how
    many were removed."""
    return rewrite_jsonl(run_dir / LEDGER_FILE,
                         lambda row: row["step"] <= step and row["fate"] != "aborted")


class SampleLedger:
    def __init__(self, path: Path):
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the run)
        self._lock = threading.Lock()
        self._open: dict[int, TrainableGroup] = {}  # generated, fate not yet written
        # Told of every trained batch, after it is recorded (sample texts for the trackers:
        # `launch.run` sets it to `SampleTextLog.trained`).
        self.on_trained: Callable[[list[TrainableGroup], int], None] | None = None

    def generated(self, groups: list[TrainableGroup]) -> None:
        with self._lock:
            for g in groups:
                self._open[g.seq] = g

    def trained(self, groups: list[TrainableGroup], step: int) -> None:
        self._close(groups, "trained", step)
        if self.on_trained is not None:
            self.on_trained(groups, step)

    def dropped(self, groups: list[TrainableGroup], reason: str, step: int) -> None:
        self._close(groups, reason, step)

    def close(self, step: int) -> None:
        """Whatever is still open was generated but never used: aborted."""
        with self._lock:
            leftover = list(self._open.values())
        self._close(leftover, "aborted", step)
        self._file.close()

    def _close(self, groups: list[TrainableGroup], fate: str, step: int) -> None:
        with self._lock:
            for g in groups:
                self._open.pop(g.seq, None)
                record = {"seq": g.seq, "id": g.id, "version": g.version,
                          "fate": fate, "step": step, "staleness": step - 1 - g.version,
                          "samples": g.num_samples}
                self._file.write(json.dumps(record) + "\n")
            self._file.flush()
