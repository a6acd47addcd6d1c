"""Rollout dump and replay (`rollout_mock`): train on recorded batches instead of sampling.

Why: a change to the train side (a new backend or parallel layout, dynamic batching,
packing, a precision setting) should leave the numbers of a run unchanged, and sampling
makes two runs differ before training starts. With `mode: dump` a run writes every
training step's groups, as they were generated and scored, to
`<dump_dir>/train/step_<step>.json`; a later run with `mode: mock` and the same
`dump_dir` takes each group from there instead of generating and scoring it, so
advantages, losses and gradients can be compared with the dump run's number for number.
This is ROLL's rollout dump/mock, in a format of our own: the groups' checkpoint form
(`Rollout.group_state`, JSON), never a pickle, so a dump directory is data, not code.

Replay is by group seq, below the loop's prefetch generator: the mock run's generator,
replay buffer, staleness bound and ledger run as in the dump run, only each work item's
groups come from the dump (with the policy version they were started at) and no
actor_infer or reward call is made for them. A dumped step also lists the groups the
buffer dropped at that step (stale, filtered) and those the source dropped (failed
envs), so a mock run drops the same ones. Validation is not replayed: it generates with
the weights being trained, which is what it measures.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic

import ray

from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.loop.seams import Completion, G, RolloutSource, Scored, Taken, W
from flywheel.platform.config.errors import ConfigError

TRAIN_DIR = "train"


def step_file(dump_dir: str | Path, step: int) -> Path:
    return Path(dump_dir) / TRAIN_DIR / f"step_{step:06d}.json"


@dataclass
class RolloutDump(Generic[G]):
    """Writes each training step's groups (dump mode). `dropped` collects the groups the
    source dropped as they arrived (generator thread) until the step that follows."""

    dump_dir: Path
    to_state: Callable[[G], dict]
    _dropped: dict[str, list[dict]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        (Path(self.dump_dir) / TRAIN_DIR).mkdir(parents=True, exist_ok=True)

    def source_dropped(self, groups: list[G], reason: str) -> None:
        with self._lock:
            self._dropped.setdefault(reason, []).extend(self.to_state(g) for g in groups)

    def write(self, step: int, taken: Taken[G]) -> None:
        with self._lock:
            dropped, self._dropped = self._dropped, {}
        record = {"step": step,
                  "groups": [self.to_state(g) for g in taken.groups],
                  "stale": [self.to_state(g) for g in taken.stale],
                  "filtered": [self.to_state(g) for g in taken.filtered],
                  "source_dropped": dropped}
        path = step_file(self.dump_dir, step)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(path)


@dataclass
class Recorded:
    """Every group of a dump by seq, and the reason the source dropped it (or None)."""

    states: dict[int, dict]
    source_dropped: dict[int, str]
    steps: int


def read_dump(dump_dir: str | Path) -> Recorded:
    """All step files of `dump_dir` (steps 1, 2, ... until the first missing one)."""
    states: dict[int, dict] = {}
    dropped: dict[int, str] = {}
    step = 0
    while step_file(dump_dir, step + 1).exists():
        step += 1
        path = step_file(dump_dir, step)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            for key in ("groups", "stale", "filtered"):
                for state in record[key]:
                    states[int(state["seq"])] = state
            for reason, groups in record["source_dropped"].items():
                for state in groups:
                    states[int(state["seq"])] = state
                    dropped[int(state["seq"])] = reason
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}: not a rollout dump step file ({error})") from None
    return Recorded(states, dropped, step)


def recorded_for(cfg: PipelineConfig) -> Recorded | None:
    """The dump a mock run replays, read before any worker starts; None unless mocking."""
    mock = cfg.rollout_mock
    if mock is None or mock.mode != "mock":
        return None
    try:
        recorded = read_dump(mock.dump_dir)
    except ValueError as error:
        raise ConfigError("", "rollout_mock.dump_dir", str(error)) from None
    if recorded.steps < cfg.max_steps:
        raise ConfigError("", "rollout_mock.dump_dir",
                          f"{mock.dump_dir} holds {recorded.steps} step(s) "
                          f"({TRAIN_DIR}/step_<step>.json) and this run has max_steps "
                          f"{cfg.max_steps}: run the dump longer (mode: dump) or lower "
                          f"max_steps")
    return recorded


@dataclass
class ReplayedSource(Generic[W, G]):
    """A `RolloutSource` whose items' groups come from a dump (mock mode): the real
    source's items, in its order and cut, so the generator's accounting is unchanged."""

    real: RolloutSource[W, G]
    recorded: Recorded
    from_state: Callable[[dict], G]
    dump_dir: str

    @property
    def pool(self):
        return self.real.pool

    @property
    def waits_for_weights(self) -> bool:
        return False  # nothing is generated: no weights to wait for

    @property
    def per_worker(self) -> int:
        return self.real.per_worker

    def items(self, batch_index: int) -> list[W]:
        return self.real.items(batch_index)

    def submit(self, item: W, rank: int, version: int) -> ray.ObjectRef:
        return ray.put(None)  # no call: the groups are read in `complete`

    def complete(self, item: W, rank: int, result: object) -> Completion[W, G]:
        kept: list[G] = []
        dropped: dict[str, list[G]] = {}
        for seq in range(item.first_seq, item.first_seq + item.num_groups):
            state = self.recorded.states.get(seq)
            if state is None:
                raise ValueError(
                    f"rollout_mock: {self.dump_dir} holds no group {seq} ({item.describe()}):"
                    f" its dump ran {self.recorded.steps} step(s); a mock run needs the dump"
                    f" run's batch sizes and at most its max_steps")
            group = self.from_state(state)
            reason = self.recorded.source_dropped.get(seq)
            if reason is None:
                kept.append(group)
            else:
                dropped.setdefault(reason, []).append(group)
        return Completion(scoring=Scored(kept), busy=[], dropped=dropped)
