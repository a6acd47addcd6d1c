"""The prefetch generator: generation that runs ahead of training by a bounded amount.

A background thread in the driver keeps actor_infer busy. It draws work batch by batch
from a `RolloutSource`, sends each work item to a worker of the source's pool, turns each
finished item into groups (with their scoring in flight, so scoring overlaps generation)
and puts scored groups into the replay buffer. The trainer takes batches from the buffer.

Sources (`loop/seams.RolloutSource`): RLVR (`rollout.ChunkSource`) cuts a batch's prompts
into chunks run by actor_infer itself and scored by the reward workers; agentic
(`agentic_rollout.EnvSource`) cuts a batch's env groups into jobs run by env workers,
which call actor_infer once per turn and come back already scored by their envs. A source
may also drop groups as they arrive (a failed env): they are released at once and reported
through `on_dropped`.

How far ahead: the window of `loop/async_window.py` (`async_generation_ratio` = r): at
most floor((1 + r) · B) groups may be outstanding — started but not yet released by a
finished training step (or dropped). At r = 0 the next batch starts only after the step
that consumed the previous one has published its weights. Dropped groups leave the window
at once (filtered ones when scored, stale ones at the trainer's first take attempt that
finds them too old), and when fewer than a batch remain outstanding the next item goes out
even if it overshoots the window: that is dynamic sampling's over-sampling, and it never
waits for room that no take would ever free.

Ordering, so no weight update is ever missed or reordered: for RLVR every call to
actor_infer goes out from this one thread, and Ray runs the calls of one caller to one
actor in submission order. A weight update published by the trainer is therefore applied
before every chunk submitted after it, and each result carries the version that produced
it. When the pool is not actor_infer (env workers call it themselves, from other
processes), that order does not hold, so the source sets `waits_for_weights` and new items
go out only once pending updates have been applied.

Streaming (a backend whose engine takes many calls at once, vllm): the source sends one
call per prompt group and keeps up to `per_worker` of them on each worker, sized by the
engine's capacity, so the engine decodes them in one batch and each group is scored the
moment its samples are done. Such calls run beside weight updates on the worker, not
after them; each carries the version of the newest update sent before it, and the worker
starts it only once that update is loaded, which keeps the ordering above.

Partial rollout: a finished request may hand back its item's continuation (the unfinished
responses of a segmented chunk, see rlvr/generation.py) instead of groups. It goes out before any
new item, paused or not, without counting against capacity again (its groups were counted
when the item started), and by the ordering above after any weight update published
meanwhile: that is the pause, swap and continue of a long generation, with no backend call
beyond `generate`.

Resume: items go out in seq order and `paused()` waits for every started one, so at a
checkpoint every group below some seq is finished (trained, dropped, or in the buffer) and
none above it was started. The checkpoint keeps that seq; a resumed generator starts at
its batch and skips the items below it, so nothing is generated twice or lost.

Pausing (validation): `paused()` stops new chunks, waits for in-flight chunks (and their
continuations), their scoring and any weight update to finish (their groups stay in the
buffer: nothing is lost or generated twice), lets the caller use actor_infer alone, then
resumes.

Failures: any error in this thread (a WorkerError naming role and rank, a stalled worker,
with the work item it was running) is stored and re-raised in the trainer by the next
`take` or `paused`. Stalled means no progress (platform/liveness.py): a work item whose
worker's progress counter has not moved for `stall_timeout_s` (timeouts.generate_s), or a
scoring request for `score_timeout_s` (timeouts.score_s); a worker is asked only once its
item has been quiet for a fifth of the limit.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic

import ray

from flywheel.pipelines.loop.async_window import AsyncWindow
from flywheel.pipelines.loop.replay_buffer import ReplayBuffer
from flywheel.pipelines.loop.seams import G, RolloutSource, Scoring, Taken, W
from flywheel.platform.cluster import Cluster, WorkerError
from flywheel.platform.liveness import ProgressClock
from flywheel.workers.role_worker import pin_thread
from flywheel.workers.weight_transfer import SyncedWeights

POLL_S = 0.02
# A reward worker in a score call is asked for its progress after this long without news,
# so that what it has to say (its first timeout: workers/reward_worker.py) reaches the
# console within seconds, not after a fifth of timeouts.score_s
SCORE_ASK_S = 2.0


@dataclass
class _InFlight(Generic[W]):
    item: W
    rank: int
    clock: ProgressClock  # the worker's progress since the item went out


@dataclass(frozen=True)
class PrefetchSettings:
    """The generator's inputs, fixed for its life."""

    window: AsyncWindow  # how many groups may be outstanding (async_generation_ratio)
    stall_timeout_s: float = 600.0  # timeouts.generate_s
    score_timeout_s: float = 600.0  # timeouts.score_s
    cpu_affinity: list[int] | None = None  # pin the generator thread (prefetch_cpu_affinity)
    first_batch: int = 0  # batch index to draw first (a resumed run continues from it)
    # Groups below this seq are done (a resumed run's checkpoint holds them): items of the
    # first batch that start below it are not sent again.
    first_seq: int = 0
    started_groups: int = 0  # outstanding at start: groups restored into the buffer


@dataclass
class _State(Generic[W, G]):
    """What the generator changes as it runs; guarded by its condition."""

    next_batch: int  # the next batch index to draw items from
    started_groups: int  # outstanding at start, plus every group sent since
    released_groups: int = 0  # consumed by finished steps, or dropped
    busy: list[tuple[int, float, float]] = field(default_factory=list)  # rank, t0, t1
    loads: list[tuple[int, float, float]] = field(default_factory=list)  # weight loads, too
    # scoring requests, from submission until the driver took their scores (one key: their
    # union is the time some scoring was in flight)
    scores: list[tuple[int, float, float]] = field(default_factory=list)
    scoring_since: dict[ray.ObjectRef, float] = field(default_factory=dict)
    pending: list[W] = field(default_factory=list)  # items of the drawn batch not yet sent
    continuations: list[W] = field(default_factory=list)  # started items' next requests
    weights: tuple[SyncedWeights, int] | None = None  # (weights, version) to publish
    sent_version: int = 0  # of the newest update sent to actor_infer
    updates: dict[ray.ObjectRef, int] = field(default_factory=dict)  # ref -> rank
    inflight: dict[ray.ObjectRef, _InFlight[W]] = field(default_factory=dict)
    scoring: dict[ray.ObjectRef, Scoring[G]] = field(default_factory=dict)
    scoring_clocks: dict[ray.ObjectRef, tuple[Cluster, int, ProgressClock]] = field(
        default_factory=dict)
    paused: bool = False
    no_new_batches: bool = False  # the trainer took its last batch (no_more_batches)
    stop: bool = False
    error: BaseException | None = None


class PrefetchGenerator(Generic[W, G]):
    def __init__(self, actor_infer: Cluster, source: RolloutSource[W, G],
                 buffer: ReplayBuffer[G], settings: PrefetchSettings,
                 on_generated: Callable[[list[G]], None] = lambda groups: None,
                 on_dropped: Callable[[list[G], str], None] = lambda groups, reason: None):
        self.actor_infer = actor_infer
        self.source = source
        self.buffer = buffer
        self.settings = settings
        self.on_generated = on_generated  # every group as its item finishes (kept or not)
        self.on_dropped = on_dropped  # groups the source dropped as they arrived, and why
        self._cond = threading.Condition()
        self._s: _State[W, G] = _State(settings.first_batch, settings.started_groups)
        self._thread: threading.Thread | None = None

    # ---- trainer side ---------------------------------------------------------------
    @property
    def next_batch(self) -> int:
        """The first batch index with no chunk started yet (chunks are drawn batch-wise)."""
        with self._cond:
            return self._s.next_batch if not self._s.pending else (
                self._s.pending[0].batch_index)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="prefetch", daemon=True)
        self._thread.start()

    def take(self, step: int, should_stop: Callable[[], bool] = lambda: False
             ) -> Taken[G] | None:
        """Block until a batch for 0-based `step` is ready; re-raise generator errors.
        None once `should_stop()` is true while waiting (SIGTERM while no batch can be
        completed, e.g. every env failing: the run must still stop)."""
        with self._cond:
            while True:
                self._raise_if_failed()
                if should_stop():
                    return None
                # Dropped groups free their place at once (filtered ones as they were put):
                # a window full of groups that can no longer be trained would stall.
                stale = self.buffer.drop_stale(step)
                self._s.released_groups += len(stale)
                taken = self.buffer.take(self.settings.window.batch_groups, step)
                if taken is not None or stale:
                    self._cond.notify_all()
                if taken is not None:
                    return taken
                self._cond.wait(timeout=0.1)

    def no_more_batches(self) -> None:
        """The trainer took the run's last batch: start no new chunks. Work already in
        flight still finishes (the final validation and checkpoint wait for it), but a
        batch no step will train is not generated and scored: with a real model and a
        judge reward that cost minutes at the end of every run."""
        with self._cond:
            self._s.no_new_batches = True
            self._cond.notify_all()

    def release(self, groups: int) -> None:
        """A training step is done with `groups` groups (after publishing its weights)."""
        with self._cond:
            self._s.released_groups += groups
            self._cond.notify_all()

    def publish_weights(self, weights: SyncedWeights, version: int) -> None:
        with self._cond:
            self._s.weights = (weights, version)
            self._cond.notify_all()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """actor_infer exclusively for the caller; in-flight work finishes first."""
        with self._cond:
            self._s.paused = True
            self._cond.notify_all()
            while (self._s.inflight or self._s.continuations or self._s.scoring or self._s.updates
                   or self._s.weights):
                self._raise_if_failed()
                self._cond.wait(timeout=0.1)
            self._raise_if_failed()
        try:
            yield
        finally:
            with self._cond:
                self._s.paused = False
                self._cond.notify_all()

    @property
    def busy(self) -> list[tuple[int, float, float]]:
        """actor_infer's (rank, start, end) generation intervals not yet forgotten."""
        with self._cond:
            return list(self._s.busy)

    def busy_seconds(self, since: float, until: float) -> float:
        """Worker-seconds actor_infer spent generating inside [since, until] (wall clock);
        intervals that ended before `since` are forgotten."""
        with self._cond:
            self._s.busy = [b for b in self._s.busy if b[2] > since]
            return _overlap(self._s.busy, since, until)

    def load_seconds(self, since: float, until: float) -> float:
        """Worker-seconds actor_infer spent loading new weights inside [since, until]."""
        with self._cond:
            self._s.loads = [b for b in self._s.loads if b[2] > since]
            return _overlap(self._s.loads, since, until)

    def score_seconds(self, since: float, until: float) -> float:
        """Seconds inside [since, until] during which some reward scoring was in flight."""
        with self._cond:
            self._s.scores = [b for b in self._s.scores if b[2] > since]
            return _overlap(self._s.scores, since, until)

    def queue_depth(self) -> int:
        with self._cond:
            return len(self.buffer)

    def stop(self) -> list[W]:
        """Stop the thread; returns items still in flight (their groups are abandoned)."""
        with self._cond:
            self._s.stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for ref in list(self._s.inflight) + list(self._s.scoring):
            ray.cancel(ref)
        return [f.item for f in self._s.inflight.values()] + self._s.continuations

    def _raise_if_failed(self) -> None:
        if self._s.error is not None:
            raise self._s.error

    # ---- generator thread -----------------------------------------------------------
    def _run(self) -> None:
        try:
            if self.settings.cpu_affinity:
                pin_thread(self.settings.cpu_affinity, key="prefetch_cpu_affinity")
            while True:
                with self._cond:
                    if self._s.stop:
                        return
                    self._publish_pending_weights()
                    self._submit_allowed_chunks()
                    waiting = [*self._s.inflight, *self._s.scoring, *self._s.updates]
                    if not waiting:
                        self._cond.wait(timeout=POLL_S)
                        continue
                done, _ = ray.wait(waiting, num_returns=1, timeout=POLL_S)
                with self._cond:
                    for ref in done:
                        self._complete(ref)
                    self._check_stalls()
                    self._cond.notify_all()
        except BaseException as e:  # handed to the trainer thread, which raises it
            with self._cond:
                self._s.error = e
                self._cond.notify_all()

    def _publish_pending_weights(self) -> None:
        if self._s.weights is None:
            return
        weights, version = self._s.weights
        self._s.weights = None
        refs = self.actor_infer.update_weights(weights, version)
        self._s.sent_version = version
        self._s.updates.update({ref: rank for rank, ref in enumerate(refs)})

    def _submit_allowed_chunks(self) -> None:
        if self.source.waits_for_weights and (self._s.updates or self._s.weights):
            return
        per_worker = {rank: 0 for rank in range(self.source.pool.world_size)}
        for f in self._s.inflight.values():
            per_worker[f.rank] += 1
        most = self.source.per_worker
        while self._s.continuations:  # already started (and counted): first, even when paused
            rank = min(per_worker, key=per_worker.get)
            if per_worker[rank] >= most:
                return
            self._send(self._s.continuations.pop(0), rank)
            per_worker[rank] += 1
        while not (self._s.paused or self._s.no_new_batches):
            while not self._s.pending:
                self._s.pending = [i for i in self.source.items(self._s.next_batch)
                                        if i.first_seq >= self.settings.first_seq]
                self._s.next_batch += 1
            item = self._s.pending[0]
            outstanding = self._s.started_groups - self._s.released_groups
            rank = min(per_worker, key=per_worker.get)
            # Past capacity only to refill: when filtered groups left fewer outstanding than
            # a batch, the next item goes out even if it does not fit whole (at ratio 0 its
            # extra groups go stale and are dropped; waiting would wait forever).
            window = self.settings.window
            full = outstanding + item.num_groups > window.capacity
            if (full and outstanding >= window.batch_groups) or per_worker[rank] >= most:
                return
            self._send(self._s.pending.pop(0), rank)
            per_worker[rank] += 1
            self._s.started_groups += item.num_groups

    def _send(self, item: W, rank: int) -> None:
        ref = self.source.submit(item, rank, self._s.sent_version)
        self._s.inflight[ref] = _InFlight(item, rank, ProgressClock(self.settings.stall_timeout_s))

    def _complete(self, ref: ray.ObjectRef) -> None:
        if ref in self._s.inflight:
            job = self._s.inflight.pop(ref)
            try:
                result = self.source.pool.get(ref, job.rank)
            except WorkerError as e:  # name the work that was lost with the worker
                raise WorkerError(e.role, e.rank, f"{str(e).partition(': ')[2]} (while "
                                                  f"running {job.item.describe()})") from None
            done = self.source.complete(job.item, job.rank, result)
            self._s.busy.extend(done.busy)
            if done.continuation is not None:
                self._s.continuations.append(done.continuation)
                return
            self.on_generated(done.scoring.groups + [g for gs in done.dropped.values()
                                                     for g in gs])
            for reason, groups in done.dropped.items():
                self._s.released_groups += len(groups)
                self.on_dropped(groups, reason)
            if not done.scoring.refs:
                self._put(done.scoring.finish())
            for cluster, rank, part_ref, _ in done.scoring.parts:
                self._s.scoring[part_ref] = done.scoring
                self._s.scoring_since[part_ref] = time.time()
                self._s.scoring_clocks[part_ref] = (cluster, rank,
                                                  ProgressClock(self.settings.score_timeout_s))
        elif ref in self._s.scoring:
            scoring = self._s.scoring.pop(ref)
            self._s.scoring_clocks.pop(ref, None)
            self._s.scores.append((0, self._s.scoring_since.pop(ref), time.time()))
            if not any(r in self._s.scoring for r in scoring.refs):
                self._put(scoring.finish())
        else:
            rank = self._s.updates.pop(ref)
            started, finished = self.actor_infer.get(ref, rank)  # raises if it failed
            self._s.loads.append((rank, started, finished))

    def _put(self, groups: list[G]) -> None:
        """Scored groups into the buffer; those its filter drops free their place now."""
        self._s.released_groups += len(self.buffer.put(groups))

    def _check_stalls(self) -> None:
        for job in self._s.inflight.values():
            if self._quiet(job.clock, self.source.pool, job.rank):
                raise WorkerError(self.source.pool.role, job.rank,
                                  f"generation made no progress for "
                                  f"{self.settings.stall_timeout_s:g}s "
                                  f"(running {job.item.describe()})")
        for cluster, rank, clock in self._s.scoring_clocks.values():
            if self._quiet(clock, cluster, rank, ask_after_s=SCORE_ASK_S):
                raise WorkerError(cluster.role, rank, f"scoring made no progress for "
                                                      f"{self.settings.score_timeout_s:g}s")

    @staticmethod
    def _quiet(clock: ProgressClock, pool: Cluster, rank: int,
               ask_after_s: float | None = None) -> bool:
        """Whether the worker made no progress for the clock's limit (asked only once it
        has been quiet for `ask_after_s`, default a fifth of it, and not more than once a
        second)."""
        quiet = time.monotonic() - clock.since
        ask_after_s = clock.limit_s / 5 if ask_after_s is None else ask_after_s
        if quiet > ask_after_s and time.monotonic() - clock.asked > 1.0:
            clock.asked = time.monotonic()
            clock.saw(pool.progress(rank, min(1.0, clock.limit_s / 5)))
        return clock.stalled()


def _overlap(intervals: list[tuple[int, float, float]], since: float, until: float) -> float:
    """Seconds inside [since, until] covered by the intervals, per rank (a streaming
    worker's calls overlap: their union is the time it was busy), summed over ranks."""
    total = 0.0
    for rank in {r for r, _, _ in intervals}:
        end = since
        for _, t0, t1 in sorted(i for i in intervals if i[0] == rank):
            t0, t1 = max(t0, end), min(t1, until)
            if t1 > t0:
                total += t1 - t0
                end = t1
    return total
