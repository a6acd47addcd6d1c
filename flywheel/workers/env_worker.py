"""Env workers: Ray actors that play episodes and ask actor_infer for every turn.

Why a worker of its own: env stepping (Python game logic, maybe a slow simulator) must run
beside generation, not in the driver, and a misbehaving env must be containable. Each
worker owns the envs of the jobs it is sent (one `flywheel.envs.EnvManager` per env
config, built once and reused) and plays a job's episodes in lock-step: one batched
`generate` call to its actor_infer rank per turn. Several env workers (and two queued jobs
per worker) keep actor_infer fed while envs step. An env tag with `tool_use` has its envs
wrapped in a `flywheel.tools.ToolEnv` built from the config (a reply holding a tool call is
answered by the tool, inside the step's time limit); one with `chat_template` renders its
turns with the model's chat template (`flywheel.envs.ChatTurns`).

Versions: every `generate` result carries the weights version that produced it. Turn k of
every episode in a job comes from call k, so `EnvJobResult.turn_versions[k]` is the version
of turn k; per-token versions follow from the trajectories' turn spans. An episode that
straddles a weight update is continued on the new weights (its later turns carry the newer
version); its start version is that of turn 0, which is what the staleness bound uses.

Failures, in two layers:
- every env (with its tools) runs in a child process of its own (workers/env_process.py),
  built there from its spec: the user's env and tool code never runs in this worker. An
  env that raises, whose reset/step runs past `step_timeout_s` (its process is killed), or
  whose process dies (os._exit, a segfault) ends only its own episode: the env manager
  records the error with the tag, env id, group and seed, and a fresh process replaces
  it. The run goes on without that episode's group (the pipeline drops and counts it).
- a worker that dies or stops answering altogether is the prefetch generator's to report:
  a WorkerError naming this role, the rank and the job.
Errors from actor_infer are re-raised naming actor_infer and its rank.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from flywheel.config.schema import ToolUseConfig
from flywheel.envs import (
    ChatTurns,
    EnvManager,
    EnvManagerConfig,
    Trajectory,
)
from flywheel.platform.liveness import tick
from flywheel.platform.models.text_tokens import content_ids
from flywheel.workers.env_process import EnvSpec, ProcessEnv, tool_schemas
from flywheel.workers.role_worker import RoleWorker
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_model import load_tokenizer

TURN_SEED_STRIDE = 7919  # sampling seed of turn k = job seed + k * stride


@dataclass(frozen=True)
class EnvJob:
    """Play one episode in each env of `manager` (num_env_groups groups of group_size)."""

    batch_index: int  # the training step it was drawn for; -1 for validation
    first_seq: int  # run-wide sequence number of its first group
    tag: str
    manager: EnvManagerConfig
    seed: int  # rollout seed: group g of the job plays flywheel.envs.group_seed(seed, g)
    sampling: SamplingParams  # per-turn sampling; max_new_tokens comes from the manager
    infer_rank: int  # the actor_infer worker this job's turns go to
    step_timeout_s: float
    # One turn's generation (timeouts.generate_s); beyond it the job fails, naming the rank.
    generate_timeout_s: float = 600.0
    tool_use: ToolUseConfig | None = None  # the tag's tools (custom_envs.<tag>.tool_use)

    @property
    def num_groups(self) -> int:
        return self.manager.num_env_groups

    def describe(self) -> str:
        last = self.first_seq + self.num_groups - 1
        where = "validation" if self.batch_index < 0 else f"batch {self.batch_index}"
        return (f"{self.tag} env groups {self.first_seq}..{last} of {where} (env ids "
                f"0..{self.num_groups * self.manager.group_size - 1}, rollout seed {self.seed})")


@dataclass
class EnvJobResult:
    trajectories: list[Trajectory]  # ordered by env id
    turn_versions: list[int]  # weights version of turn k (every episode's turn k)
    busy: list[tuple[int, float, float]]  # actor_infer (rank, start, end) per turn


class _TextCodec:
    """The env manager's Tokenizer on raw-text turns: text is tokenized as text (its
    special-token strings split, platform/models/text_tokens.py), so an observation or tool
    result cannot open a role; specials dropped on decode (the eos a turn ends with is not
    part of the action text)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return content_ids(self.tokenizer, text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def chat_turns(tokenizer: Any, tool_schemas: list[dict[str, Any]],
               tool_use: ToolUseConfig | None) -> ChatTurns:
    """The chat rendering of a tag (envs/chat_turns.py) on the model's HF tokenizer."""
    tags = (tool_use.call_start, tool_use.call_end) if tool_use else ("<tool_call>",
                                                                       "</tool_call>")
    return ChatTurns(tokenizer, tool_schemas, tags)


class EnvWorker(RoleWorker):
    def __init__(self, role: str, rank: int, world_size: int, model_path: str,
                 infer_actors: list[Any], user_envs: dict[str, str] | None = None,
                 env_import_allowlist: Sequence[str] = (), num_threads: int = 1,
                 infer_streams: bool = False, log_path: str | None = None):
        super().__init__(role, rank, world_size, num_threads, log_path=log_path)
        self.infer_actors = infer_actors
        # A streaming actor_infer (vllm) decodes the turns of every env worker in one
        # batch when they come through generate_stream (workers/infer_worker.py).
        self.infer_streams = infer_streams
        self.codec = _TextCodec(load_tokenizer(model_path))
        self.import_allowlist = list(env_import_allowlist)
        self.user_envs = dict(user_envs or {})  # env_type -> import path, imported by envs
        # (config repr, tools repr, timeout) -> its manager, built once and reused
        self.managers: dict[tuple[str, str, float], EnvManager] = {}

    def play(self, job: EnvJob) -> EnvJobResult:
        manager = self._manager(job)
        actor = self.infer_actors[job.infer_rank]
        versions: list[int] = []
        busy: list[tuple[int, float, float]] = []

        def generate(prompts: list[list[int]], max_tokens: int) -> list[tuple[list[int],
                                                                              list[float]]]:
            sampling = replace(job.sampling, max_new_tokens=max_tokens, n=1,
                               seed=job.sampling.seed + len(versions) * TURN_SEED_STRIDE)
            result = self._generate(actor, job.infer_rank, prompts, sampling,
                                    job.generate_timeout_s)
            tick()  # a turn played: progress, for the driver's liveness check
            versions.append(result.version)
            busy.append((job.infer_rank, result.started, result.finished))
            return [(g.token_ids, g.log_probs) for g in result.generations]

        trajectories = manager.rollout(generate, self.codec, job.seed)
        return EnvJobResult(trajectories, versions, busy)

    def _manager(self, job: EnvJob) -> EnvManager:
        """The job's env manager: each env, wrapped with the tag's tools (ToolEnv), in a
        process of its own under the step time limit (a step includes its tool call)."""
        config, timeout_s, tool_use = job.manager, job.step_timeout_s, job.tool_use
        key = (repr(config), repr(tool_use), timeout_s)
        if key not in self.managers:
            spec = EnvSpec(job.tag, config.env_type, dict(config.env_config),
                           self.user_envs.get(config.env_type), tuple(self.import_allowlist),
                           tool_use)
            envs = [ProcessEnv(spec, timeout_s)
                    for _ in range(config.num_env_groups * config.group_size)]
            chat = (chat_turns(self.codec.tokenizer, tool_schemas(spec, envs[0]), tool_use)
                    if config.chat_template else None)
            self.managers[key] = EnvManager(config, chat, make_env=iter(envs).__next__)
        return self.managers[key]

    def close(self) -> None:
        """Stop every env's process."""
        for manager in self.managers.values():
            manager.close()

    def _generate(self, actor: Any, rank: int, prompts: list[list[int]],
                  sampling: SamplingParams, timeout_s: float) -> Any:
        started = time.monotonic()
        call = (actor.generate_stream.remote(prompts, sampling, 0) if self.infer_streams
                else actor.generate.remote(prompts, sampling))
        try:
            return ray.get(call, timeout=timeout_s)
        except RayTaskError as error:
            cause = error.cause or error
            raise RuntimeError(f"actor_infer rank {rank}: {type(cause).__name__}: "
                               f"{cause}") from None
        except RayActorError:
            raise RuntimeError(f"actor_infer rank {rank}: worker process died") from None
        except ray.exceptions.GetTimeoutError:
            waited = time.monotonic() - started
            raise RuntimeError(f"actor_infer rank {rank}: no answer within {waited:.0f}s") from None
