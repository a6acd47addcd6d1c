"""A Cluster: the Ray actors of one role, and fan-out over them.

The cluster owns placement (one actor per worker, on the bundle of its first device) and
the three ways pipelines talk to a role: call every worker with the same arguments,
scatter one shard per data-parallel rank, and gather results. Every result comes back
through `gather`, which turns a dead actor or an exception inside a worker into a
`WorkerError` that names the role and rank, and which never waits forever: a worker that
makes no progress for `timeout_s` (its progress counter, liveness.py, polled while the
call runs) is reported as stalled, with what it was doing; a slow call that keeps making
progress is waited for. Starting a worker has its own limit (`startup_timeout_s`).

Worker classes are plain Python classes; the cluster wraps them with `ray.remote`, so the
resources an actor gets come from the config, never from a decorator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from flywheel.platform.backend_logs import worker_log_path
from flywheel.platform.liveness import PROGRESS_GROUP, ProgressClock
from flywheel.platform.resources import DevicePlacement, RoleDevices

DEFAULT_TIMEOUT_S = 600.0  # timeouts.call_s
DEFAULT_STARTUP_S = 1800.0  # timeouts.startup_s


class WorkerError(RuntimeError):
    """A worker of `role` at `rank` failed, died, or stalled."""

    def __init__(self, role: str, rank: int, message: str):
        super().__init__(f"{role} rank {rank}: {message}")
        self.role = role
        self.rank = rank
        self.remote_traceback: str | None = None

    def at_step(self, step: int) -> WorkerError:
        """The same failure, saying at which (1-based) train step it happened."""
        error = WorkerError(self.role, self.rank,
                            f"step {step}: {str(self).partition(': ')[2]}")
        error.remote_traceback = self.remote_traceback
        return error


@dataclass
class Cluster:
    role: str
    devices: RoleDevices
    actors: list[Any] = field(default_factory=list)
    timeout_s: float = DEFAULT_TIMEOUT_S
    started: bool = False  # every worker's constructor has returned (`wait_ready`)

    @classmethod
    def create(
        cls,
        role: str,
        worker_cls: type,
        devices: RoleDevices,
        placement: DevicePlacement | None,
        init_kwargs: dict,
        env_vars: dict[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        log_dir: Path | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_S,
    ) -> Cluster:
        """`launch`, then wait until every worker has started (`wait_ready`)."""
        cluster = cls.launch(role, worker_cls, devices, placement, init_kwargs, env_vars,
                             timeout_s, log_dir)
        cluster.wait_ready(startup_timeout_s)
        return cluster

    @classmethod
    def launch(
        cls,
        role: str,
        worker_cls: type,
        devices: RoleDevices,
        placement: DevicePlacement | None,
        init_kwargs: dict,
        env_vars: dict[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        log_dir: Path | None = None,
    ) -> Cluster:
        """The role's actors, created and starting; `wait_ready` waits for them. Launching
        several roles before waiting for any lets their starts (each mostly importing
        torch and transformers and loading a model, on one core) run side by side.
        `log_dir`: each worker's stdout and stderr go to a file there (backend_logs.py)."""
        # `progress` answers in a group of its own while a call runs (liveness.py); a
        # worker class may declare more groups (infer_worker.py's generate_stream)
        groups = {PROGRESS_GROUP: 1, **getattr(worker_cls, "CONCURRENCY_GROUPS", {})}
        remote_cls = ray.remote(concurrency_groups=groups)(worker_cls)
        actors = []
        for rank in range(devices.num_workers):
            options: dict = {"num_cpus": 0}  # deviceless workers (rule rewards) go anywhere
            if placement is not None:
                device = devices.worker_device(rank)
                options = dict(scheduling_strategy=placement.scheduling(device),
                               **placement.actor_resources(device))
            if env_vars:  # merged by Ray with the job's env_vars (ray_runtime.WORKER_ENV)
                options["runtime_env"] = {"env_vars": dict(env_vars)}
            if log_dir is not None:  # an argument, not an env var (backend_logs.py)
                init_kwargs = {**init_kwargs,
                               "log_path": worker_log_path(log_dir, role, rank)}
            actor = remote_cls.options(max_concurrency=1, **options).remote(
                role=role, rank=rank, world_size=devices.num_workers, **init_kwargs)
            actors.append(actor)
        return cls(role=role, devices=devices, actors=actors, timeout_s=timeout_s)

    def wait_ready(self, startup_timeout_s: float = DEFAULT_STARTUP_S) -> None:
        """Wait until every worker's constructor has returned; a failure surfaces here,
        with role and rank, and shuts the role down. Waiting again returns at once."""
        if self.started:
            return
        try:
            self.gather(self.submit_all("ready"), timeout_s=startup_timeout_s)
        except WorkerError:
            self.shutdown()
            raise
        self.started = True

    @property
    def world_size(self) -> int:
        return len(self.actors)

    def submit_all(self, method: str, *args, **kwargs) -> list[ray.ObjectRef]:
        return [getattr(a, method).remote(*args, **kwargs) for a in self.actors]

    def submit_scatter(self, method: str, shards: list, **kwargs) -> list[ray.ObjectRef]:
        if len(shards) != self.world_size:
            raise ValueError(f"{self.role}: {len(shards)} shards for {self.world_size} workers")
        return [getattr(a, method).remote(s, **kwargs) for a, s in zip(self.actors, shards)]

    def submit_one(self, rank: int, method: str, *args, **kwargs) -> ray.ObjectRef:
        return getattr(self.actors[rank], method).remote(*args, **kwargs)

    def call_all(self, method: str, *args, **kwargs) -> list:
        return self.gather(self.submit_all(method, *args, **kwargs))

    def scatter(self, method: str, shards: list, **kwargs) -> list:
        return self.gather(self.submit_scatter(method, shards, **kwargs))

    def gather(self, refs: list[ray.ObjectRef], timeout_s: float | None = None) -> list:
        """Results in rank order; any failure becomes a WorkerError naming role and rank."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        results = []
        for rank, ref in enumerate(refs):
            results.append(self.get(ref, rank, timeout))
        return results

    def get(self, ref: ray.ObjectRef, rank: int, timeout_s: float | None = None) -> Any:
        """The result of a call to worker `rank`; waits as long as the worker makes progress,
        and no longer than `timeout_s` (default: this cluster's) without any."""
        clock = ProgressClock(self.timeout_s if timeout_s is None else timeout_s)
        poll = max(0.05, min(5.0, clock.limit_s / 5))
        while not ray.wait([ref], timeout=poll)[0]:
            clock.saw(self.progress(rank, poll))
            if clock.stalled():
                raise WorkerError(self.role, rank, f"no progress for {clock.limit_s:g}s "
                                                   f"(stalled while {clock.doing})")
        return self.result(ref, rank)

    def progress(self, rank: int, wait_s: float) -> tuple[int, str] | None:
        """Worker `rank`'s (progress counter, what it is doing); None if it does not answer
        within `wait_s`."""
        try:
            return ray.get(self.actors[rank].progress.remote(), timeout=wait_s)
        except Exception:  # noqa: BLE001 (no answer is no progress; the call's own ref says why)
            return None

    def result(self, ref: ray.ObjectRef, rank: int) -> Any:
        """A finished call's result; a failure becomes a WorkerError naming role and rank."""
        try:
            return ray.get(ref, timeout=0)
        except RayTaskError as e:
            cause = e.cause or e
            error = WorkerError(self.role, rank, f"{type(cause).__name__}: {cause}")
            error.remote_traceback = str(e)  # the worker's own traceback, for error.log
            raise error from None
        except RayActorError as e:
            if e.actor_init_failed:  # the message ends with the constructor's exception
                last = [line for line in e.error_msg.splitlines() if line.strip()][-1]
                raise WorkerError(self.role, rank, f"failed to start: {last.strip()}") from None
            raise WorkerError(self.role, rank,
                              f"worker process died ({e.__class__.__name__})") from None
        except GetTimeoutError:  # not finished after all (the caller waited for it)
            raise WorkerError(self.role, rank, "no answer (stalled?)") from None

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []
