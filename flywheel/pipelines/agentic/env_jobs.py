"""Agentic rollout: env groups → episodes played by env workers → groups for the buffer.

The unit that flows through the replay buffer and the ledger is an `EpisodeGroup`: the
`group_size` episodes of envs reset with one seed (GRPO compares them), stamped with the
policy version of their first turn. A training step takes rollout_batch_size / group_size
of them; which tag each group plays follows `num_groups_partition` over the pool, and every
group's seed is a pure function of (run seed, batch, job), so sync runs replay exactly.

Work is cut into `EnvJob`s of at most one worker's envs (`max_env_num_per_worker`), sent
by the prefetch generator's thread to env workers (`EnvSource`, a `RolloutSource`). Env
workers call actor_infer themselves, so the source sets `waits_for_weights`: a job goes
out only after pending weight updates have landed, and its start version is at least the
version published before it was submitted.

In-flight episodes across a weight update are continued, not restarted: turns generated
after the update carry the new version (`EpisodeGroup.turn_versions`; per-token versions
via `token_versions`), the behaviour log-probs are those of the weights that sampled each
token, and the staleness bound is applied to the oldest one (the start version). Restarting
would waste every turn played so far for no gain in correctness, since the loss already
uses per-token behaviour log-probs.

A group with a failed episode (an env raised or hung: see workers/env_worker.py) is dropped
whole, so GRPO groups stay complete; it is logged with the env's error (env id, seed) and
recorded in the ledger as "env_error". An env that fails every episode would drop groups
forever with no step completing: after `max_consecutive_env_failures` groups of a pool in
a row dropped (training) or failed (validation) with no complete group between them, the
run stops with one line naming the env, the count and the last error (`EnvFailureLimit`).

The first observation cut to max_observation_chars, tool result cut to
max_tool_output_chars and episode truncated at the context of each tag is said once on the
console (the counts are metrics: env/observation_cut, env/tool_output_cut,
env/context_truncated).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import ray

from flywheel.config.checks.import_allowlist import allowed_prefixes
from flywheel.config.derived import context_length
from flywheel.config.schema import CustomEnvConfig, EnvManagerArgs, GeneratingArgs, PipelineConfig
from flywheel.envs import EnvManagerConfig, Trajectory
from flywheel.pipelines.loop.seams import Completion, Scored
from flywheel.pipelines.rlvr.generation import sampling_params
from flywheel.pipelines.roles.handles import EnvRole
from flywheel.pipelines.roles.roles import streams
from flywheel.platform.cluster import Cluster
from flywheel.platform.resources import RoleDevices
from flywheel.workers.env_process import (
    EnvCallError,
    EnvProcessDied,
    EnvSpec,
    ProcessEnv,
    tool_schemas,
)
from flywheel.workers.env_worker import EnvJob, EnvJobResult, EnvWorker, chat_turns
from flywheel.workers.strategies.hf_model import load_tokenizer

log = logging.getLogger(__name__)

VAL_STREAM = 2**31 - 1  # seed stream of validation jobs, apart from every batch index
ENV_ROLE = "env_workers"


@dataclass
class EpisodeGroup:
    seq: int  # position of the group in the run's stream of groups
    tag: str
    trajectories: list[Trajectory]
    version: int  # start version: the weights of every episode's first turn
    turn_versions: list[int]  # version of turn k (shared by the episodes of one job)
    scores: list[float] = field(default_factory=list)  # episode returns

    @property
    def id(self) -> str:
        return f"{self.tag}/seed{self.trajectories[0].seed}"

    @property
    def num_samples(self) -> int:
        return len(self.trajectories)

    @property
    def num_tokens(self) -> int:
        return sum(sum(t.response_mask) for t in self.trajectories)

    def token_versions(self, i: int) -> list[int]:
        """Per-token weights version of episode i (-1 on env tokens)."""
        t = self.trajectories[i]
        versions = [-1] * len(t.input_ids)
        for turn, (start, end) in enumerate(t.turn_spans):
            versions[start:end] = [self.turn_versions[turn]] * (end - start)
        return versions


def episode_group_to_dict(g: EpisodeGroup) -> dict:
    return asdict(g)


def episode_group_from_dict(d: dict) -> EpisodeGroup:
    trajectories = [Trajectory(**{**t, "turn_spans": [tuple(s) for s in t["turn_spans"]]})
                    for t in d["trajectories"]]
    return EpisodeGroup(**{**d, "trajectories": trajectories})


# ---- from config to env manager configs and jobs ----------------------------------------
def env_manager_config(tag: str, env: CustomEnvConfig, pool: EnvManagerArgs,
                       num_groups: int, context: int | None = None) -> EnvManagerConfig:
    """The flywheel.envs config of `num_groups` groups of tag `tag` in `pool`; `context`:
    the run's sequence_length (context_length), which no episode may outgrow."""
    env_config = dict(env.env_config)
    if pool.format_penalty is not None:
        env_config.setdefault("format_penalty", pool.format_penalty)
    templates = {}
    if env.agent_system_template is not None:
        templates["system_template"] = env.agent_system_template
    if env.agent_template is not None:
        templates["turn_template"] = env.agent_template
    return EnvManagerConfig(env_type=env.env_type, env_config=env_config, tag=tag,
                            group_size=pool.group_size, num_env_groups=num_groups,
                            max_steps=env.max_steps,
                            max_tokens_per_step=env.max_tokens_per_step,
                            chat_template=env.chat_template,
                            max_tool_output_tokens=(env.tool_use.max_tool_output_tokens
                                                    if env.tool_use else 0),
                            max_observation_chars=env.max_observation_chars,
                            max_context_tokens=context, **templates)


def group_tags(pool: EnvManagerArgs, num_groups: int) -> list[str]:
    """Tag of each of `num_groups` groups: the pool's partition, repeated as needed."""
    partition = pool.num_groups_partition or [
        pool.num_env_groups // len(pool.tags) + (i < pool.num_env_groups % len(pool.tags))
        for i in range(len(pool.tags))]
    pattern = [tag for tag, n in zip(pool.tags, partition) for _ in range(n)]
    return [pattern[g % len(pattern)] for g in range(num_groups)]


def groups_per_job(pool: EnvManagerArgs) -> int:
    """Whole groups per worker: as many as max_env_num_per_worker (a cap, as in ROLL's
    agentic_config.py) allows, and never more than the pool."""
    envs = pool.num_env_groups * pool.group_size
    return max(1, min(pool.max_env_num_per_worker or envs, envs) // pool.group_size)


def plan_jobs(cfg: PipelineConfig, pool: EnvManagerArgs, num_groups: int, batch_index: int,
              first_seq: int, seed_stream: list[int], gen_args: GeneratingArgs,
              infer_workers: int) -> list[EnvJob]:
    """Cut `num_groups` groups into jobs of one tag and at most one worker's envs each."""
    tags = group_tags(pool, num_groups)
    size = groups_per_job(pool)
    runs: list[tuple[str, int, int]] = []  # tag, first group, count
    for g, tag in enumerate(tags):
        if runs and runs[-1][0] == tag and runs[-1][2] < size:
            runs[-1] = (tag, runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((tag, g, 1))
    jobs = []
    for j, (tag, first, count) in enumerate(runs):
        seed, sampling_seed = (int(x) for x in
                               np.random.SeedSequence([*seed_stream, j]).generate_state(2))
        sampling = sampling_params(gen_args, 1, seed=sampling_seed)
        manager = env_manager_config(tag, cfg.custom_envs[tag], pool, count,
                                     context_length(cfg))
        jobs.append(EnvJob(batch_index, first_seq + first, tag, manager, seed, sampling,
                           infer_rank=j % infer_workers, step_timeout_s=pool.step_timeout_s,
                           generate_timeout_s=cfg.timeouts.generate_s,
                           tool_use=cfg.custom_envs[tag].tool_use))
    return jobs


def train_jobs(cfg: PipelineConfig, batch_index: int, infer_workers: int) -> list[EnvJob]:
    pool = cfg.train_env_manager
    num_groups = cfg.rollout_batch_size // pool.group_size
    return plan_jobs(cfg, pool, num_groups, batch_index, batch_index * num_groups,
                     [cfg.seed, batch_index], cfg.actor_infer.generating_args, infer_workers)


def val_jobs(cfg: PipelineConfig, gen_args: GeneratingArgs, infer_workers: int) -> list[EnvJob]:
    """Validation: fixed seeds (independent of the run seed and of the step), held out
    from training's seed streams, so every evaluation plays the same maps."""
    pool = cfg.val_env_manager
    num_groups = cfg.val_batch_size // pool.group_size or pool.num_env_groups
    return plan_jobs(cfg, pool, num_groups, -1, 0, [VAL_STREAM], gen_args, infer_workers)


# ---- results --------------------------------------------------------------------------
def episode_groups(job: EnvJob, result: EnvJobResult) -> tuple[list[EpisodeGroup],
                                                                list[EpisodeGroup]]:
    """(complete groups, groups with a failed episode) of one finished job."""
    size = job.manager.group_size
    kept, failed = [], []
    for g in range(job.num_groups):
        episodes = result.trajectories[g * size:(g + 1) * size]
        group = EpisodeGroup(job.first_seq + g, job.tag, episodes,
                             version=result.turn_versions[0] if result.turn_versions else -1,
                             turn_versions=list(result.turn_versions),
                             scores=[t.score for t in episodes])
        _say_cuts(job, episodes)
        errors = [t.error for t in episodes if t.failed]
        if errors:
            log.warning("dropping %s group %d (%s): %s", job.tag, group.seq, job.describe(),
                        "; ".join(errors))
            failed.append(group)
        else:
            kept.append(group)
    return kept, failed


class EnvFailureLimit(RuntimeError):
    """Too many env groups in a row failed: the env is broken, not unlucky."""


@dataclass
class FailureStreak:
    """Groups of one pool that failed for env errors in a row, with no complete group
    between them; `saw` raises EnvFailureLimit when they reach `limit`."""

    pool: str  # train_env_manager or val_env_manager
    limit: int  # max_consecutive_env_failures
    count: int = 0

    def saw(self, kept: list[EpisodeGroup], failed: list[EpisodeGroup]) -> None:
        """One job's groups (kept first: a complete group clears the streak)."""
        self.count = len(failed) if kept else self.count + len(failed)
        if failed and self.count >= self.limit:
            last = next(t.error for t in failed[-1].trajectories if t.failed)
            raise EnvFailureLimit(
                f"{self.pool}: {self.count} env groups in a row failed with env errors and "
                f"none came back complete (max_consecutive_env_failures={self.limit}); the "
                f"last: {last}")


_SAID: set[tuple[str, str]] = set()  # (tag, what) already said on the console


def _say_cuts(job: EnvJob, episodes: list[Trajectory]) -> None:
    """Once per tag and kind: an observation or tool result cut, an episode truncated at
    the context (the counts are metrics; this line says where they come from)."""
    cfg = job.manager
    notes = {
        "observation_cut": f"an observation longer than max_observation_chars="
                           f"{cfg.max_observation_chars} characters was cut (counted in "
                           f"env/observation_cut)",
        "context_truncated": f"an episode was truncated: its next turn would not fit the "
                             f"run's sequence_length {cfg.max_context_tokens} (counted in "
                             f"env/context_truncated)",
    }
    for what, note in notes.items():
        if (job.tag, what) not in _SAID and any(t.counts.get(what) for t in episodes):
            _SAID.add((job.tag, what))
            log.warning("custom_envs.%s (env %s): %s", job.tag, cfg.env_type, note)
    tools = {info["tool_output_cut_by"] for t in episodes for info in t.infos
             if "tool_output_cut_by" in info}
    for tool in sorted(tools):
        if (job.tag, f"tool {tool}") not in _SAID:
            _SAID.add((job.tag, f"tool {tool}"))
            log.warning("custom_envs.%s.tool_use: a result of tool '%s' longer than "
                        "max_tool_output_chars was cut (counted in env/tool_output_cut)",
                        job.tag, tool)


@dataclass
class EnvSource:
    """Agentic RolloutSource (loop/seams.py): env jobs run by env workers."""

    pool: EnvRole  # env workers
    cfg: PipelineConfig
    infer_workers: int
    waits_for_weights: bool = True
    per_worker: int = 2  # a job running and one queued behind it
    streak: FailureStreak | None = None  # set from cfg in __post_init__

    def __post_init__(self) -> None:
        self.streak = FailureStreak("train_env_manager",
                                    self.cfg.train_env_manager.max_consecutive_env_failures)

    def items(self, batch_index: int) -> list[EnvJob]:
        return train_jobs(self.cfg, batch_index, self.infer_workers)

    def submit(self, item: EnvJob, rank: int, version: int) -> ray.ObjectRef:
        return self.pool.play(rank, item)

    def complete(self, item: EnvJob, rank: int,
                 result: EnvJobResult) -> Completion[EnvJob, EpisodeGroup]:
        kept, failed = episode_groups(item, result)
        self.streak.saw(kept, failed)
        return Completion(Scored(kept), result.busy,
                          {"env_error": failed} if failed else {})


def run_jobs(pool: EnvRole, jobs: list[EnvJob]) -> list[tuple[EnvJob, EnvJobResult]]:
    """Run jobs over the pool (at most one queued per worker beyond the running one)."""
    refs = [(i % pool.world_size, pool.play(i % pool.world_size, job))
            for i, job in enumerate(jobs)]
    return [(job, pool.get(ref, rank)) for job, (rank, ref) in zip(jobs, refs)]


# ---- env workers ------------------------------------------------------------------------
def num_env_workers(cfg: PipelineConfig) -> int:
    """One pool serves training and validation (validation pauses training's jobs)."""
    def workers(pool: EnvManagerArgs) -> int:  # ceil(groups / groups per worker), as ROLL
        return -(-pool.num_env_groups // groups_per_job(pool))
    return max(workers(cfg.train_env_manager), workers(cfg.val_env_manager))


def user_envs(cfg: PipelineConfig) -> dict[str, str]:
    return {env.env_type: env.env_import_path for env in cfg.custom_envs.values()
            if env.env_import_path}


def check_envs(cfg: PipelineConfig, model_path: str) -> None:
    """Build one env of every tag and pool the run plays, with its tools, before any worker
    starts: an unknown env_config key or a bad value fails now, naming the tag; so do the
    tag's tools (a user tool's import, the sandbox probe, the search documents) and its chat
    template (a tokenizer without one, a template that cannot be appended to). Each env is
    built in a child process (workers/env_process.py), never in the driver: a user's
    constructor that exits or crashes ends that child, and this says so naming the tag."""
    tags = {*cfg.train_env_manager.tags, *cfg.val_env_manager.tags}
    for tag in sorted(tags):
        env = cfg.custom_envs[tag]
        for pool in (cfg.train_env_manager, cfg.val_env_manager):
            config = env_manager_config(tag, env, pool, 1, context_length(cfg))
            spec = EnvSpec(tag, env.env_type, dict(config.env_config), env.env_import_path,
                           tuple(allowed_prefixes(cfg)), env.tool_use)
            process = ProcessEnv(spec, cfg.timeouts.call_s)
            try:
                process.start()
                schemas = tool_schemas(spec, process)
            except EnvCallError as error:
                said = str(error) if error.type_name in PLAIN_ERRORS else (
                    f"{error.type_name}: {error}")
                raise ValueError(f"custom_envs.{tag}: {said}") from None
            except (EnvProcessDied, TimeoutError) as error:
                raise ValueError(f"custom_envs.{tag}: building its env and tools: "
                                 f"{error}") from None
            finally:
                process.close()
        if env.chat_template:
            try:
                chat_turns(load_tokenizer(model_path), schemas, env.tool_use)
            except (OSError, ValueError, TypeError) as error:
                raise ValueError(f"custom_envs.{tag}: {error}") from None


# Errors whose message says it all (a config mistake): said without their type's name.
PLAIN_ERRORS = frozenset({"ValueError", "TypeError", "ImportError", "ModuleNotFoundError",
                          "OSError", "FileNotFoundError", "ConfigError"})


def start_env_workers(cfg: PipelineConfig, model_path: str, actor_infer: Cluster,
                      log_dir: Path | None = None) -> EnvRole:
    """`log_dir`: where each env worker's output goes (platform/backend_logs.py)."""
    check_envs(cfg, model_path)
    n = num_env_workers(cfg)
    return EnvRole.create(ENV_ROLE, EnvWorker, RoleDevices(ENV_ROLE, tuple(range(n))), None,
                          init_kwargs=dict(model_path=model_path,
                                           infer_actors=list(actor_infer.actors),
                                           user_envs=user_envs(cfg),
                                           env_import_allowlist=allowed_prefixes(cfg),
                                           infer_streams=streams(cfg)),
                          log_dir=log_dir)
