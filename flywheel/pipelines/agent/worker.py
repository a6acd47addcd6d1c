"""Agent workers: Ray actors that serve the endpoint and run the user's agents against it.

Why a worker of its own: the user's agent code must not run in the driver (a crash or a
hang there would be the run's), and its episodes must run beside generation. Each worker
serves two endpoints on 127.0.0.1 (training sampling and validation sampling), each
asking actor_infer's workers for every call (generator.py), and runs a job's episodes on
an event loop of its own, apart from the servers' loops, so an agent that blocks its loop
does not stop the endpoint from answering the others.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import ray

from flywheel.config.schema.agent import AgentConfig
from flywheel.pipelines.agent.endpoint import AgentEndpoint, EndpointLimits
from flywheel.pipelines.agent.episodes import AgentLimits
from flywheel.pipelines.agent.generator import ActorsGenerator
from flywheel.pipelines.agent.jobs import AgentGroup, AgentJob, run_job
from flywheel.platform.cluster import Cluster
from flywheel.platform.user_code import import_user_object
from flywheel.workers.role_worker import RoleWorker
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_model import load_tokenizer

MODEL_NAME = "policy"  # the model id the endpoint serves (`/v1/models`)
AGENT_ROLE = "agent_workers"


def load_agent(path: str) -> Any:
    """The async agent function `path` names; ValueError saying what it is otherwise."""
    agent = import_user_object(path)
    if not inspect.iscoroutinefunction(agent):
        raise ValueError(f"agent.import_path: {path} is not an async function "
                         "(async def agent(task, client) -> float)")
    return agent


def agent_tokenizer(model_path: str, cfg: AgentConfig) -> Any:
    tokenizer = load_tokenizer(model_path)
    if cfg.chat_template:
        tokenizer.chat_template = Path(cfg.chat_template).read_text()
    return tokenizer


class AgentWorker(RoleWorker):
    def __init__(self, role: str, rank: int, world_size: int, model_path: str,
                 infer_actors: list[Any], infer_streams: bool, agent: AgentConfig,
                 sampling: SamplingParams, val_sampling: SamplingParams,
                 context_length: int | None, log_path: str | None = None):
        super().__init__(role, rank, world_size, 1, None, log_path)
        tokenizer = agent_tokenizer(model_path, agent)
        generator = ActorsGenerator(infer_actors, infer_streams)
        limits = EndpointLimits(agent.max_body_bytes, agent.max_tokens_per_call,
                                agent.max_calls, agent.max_episode_tokens, context_length)
        self.endpoints = {split: AgentEndpoint(generator, tokenizer, MODEL_NAME, s, limits,
                                               agent.tool_format)
                          for split, s in (("train", sampling), ("val", val_sampling))}
        for endpoint in self.endpoints.values():
            endpoint.start()
        self.agent_fn = load_agent(agent.import_path) if agent.import_path else None
        self.command = list(agent.command) or None
        self.answers = agent.reward == "rewards"  # the rewards score answers (answers.py)
        self.limits = AgentLimits(agent.wall_clock_s)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="agents", daemon=True).start()

    def play(self, job: AgentJob, split: str = "train") -> list[AgentGroup]:
        """Every episode of `job`; a job whose episodes outlive their wall clock by a
        minute (an agent blocking its loop) is an error naming the job."""
        run = run_job(self.endpoints[split], job, self.limits, self.agent_fn, self.command,
                      self.answers)
        future = asyncio.run_coroutine_threadsafe(run, self.loop)
        try:
            return future.result(timeout=self.limits.wall_clock_s + 60)
        except FutureTimeout:
            raise RuntimeError(f"{self.role} rank {self.rank}: {job.describe()} did not end "
                               f"within agent.wall_clock_s + 60 s: an agent function blocks "
                               "its event loop (run such an agent as agent.command)") from None

    def base_urls(self) -> dict[str, str]:
        return {split: e.base_url for split, e in self.endpoints.items()}


class AgentRole(Cluster):
    def play(self, rank: int, job: AgentJob, split: str = "train") -> ray.ObjectRef:
        return self.submit_one(rank, "play", job, split)
