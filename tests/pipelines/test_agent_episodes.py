"""Agent episodes (issue 47 item 4): the user's agent, a function or a command, run against
the endpoint on the tiny model in this process; every way it can fail is counted and
named and drops its group, the others are kept; an ended episode's key stops working."""

from __future__ import annotations

import asyncio
import sys

import pytest

from flywheel.config.schema import WorkerConfig
from flywheel.pipelines.agent.endpoint import AgentEndpoint, EndpointLimits
from flywheel.pipelines.agent.episodes import AgentLimits, AgentResult
from flywheel.pipelines.agent.generator import StrategyGenerator
from flywheel.pipelines.agent.jobs import AgentJob, run_job
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from tests.pipelines.test_agent_endpoint import MODEL, TEMPLATE


@pytest.fixture(scope="module")
def endpoint(tiny_model_path):
    strategy = HFInferStrategy(tiny_model_path, WorkerConfig(infer_batch_size=4), seed=0)
    strategy.tokenizer.chat_template = TEMPLATE
    served = AgentEndpoint(StrategyGenerator(strategy), strategy.tokenizer, MODEL,
                           SamplingParams(max_new_tokens=4),
                           EndpointLimits(max_tokens_per_call=4, max_calls=3))
    served.start()
    yield served
    served.stop()


async def ask(client, task):
    reply = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": task["q"]}])
    return reply.choices[0].message.content


KEYS = []


async def agent(task, client):
    """One agent, its behaviour chosen by the task."""
    kind = task["kind"]
    KEYS.append(client.api_key)
    if kind == "no_call":
        return 0.5
    await ask(client, task)
    if kind == "ok":
        await ask(client, task)
        return AgentResult(1.0, {"turns": 2.0})
    if kind == "error":
        raise KeyError("the agent's own bug")
    if kind == "hang":
        await asyncio.sleep(60)
    if kind == "greedy":
        for _ in range(5):
            await ask(client, task)
    return "yes" if kind == "bad_reward" else 0.0


def test_each_failure_is_counted_named_and_drops_its_group(endpoint):
    kinds = ["ok", "error", "no_call", "bad_reward", "greedy"]
    job = AgentJob(0, 10, [{"kind": k, "q": "1+2="} for k in kinds], group_size=1, seed=3)
    groups = asyncio.run(run_job(endpoint, job, AgentLimits(wall_clock_s=60.0), agent=agent))
    assert [g.seq for g in groups] == list(range(10, 15))
    failures = [g.failure for g in groups]
    assert failures == [None, "error", "no_call", "bad_reward", "over_budget"]
    hang = AgentJob(0, 15, [{"kind": "hang", "q": "1+2="}], group_size=1, seed=5)
    (hung,) = asyncio.run(run_job(endpoint, hang, AgentLimits(wall_clock_s=1.5), agent=agent))
    assert hung.failure == "timeout" and "1.5 s" in hung.episodes[0].message
    ok = groups[0]
    assert ok.scores == [1.0] and all(len(e.rows) == 2 for e in ok.episodes)
    assert ok.episodes[0].info == {"turns": 2.0}
    assert ok.version == 0 and all(r.token_ids for e in ok.episodes for r in e.rows)
    assert "KeyError" in groups[1].episodes[0].message
    assert "not a number" in groups[3].episodes[0].message
    assert groups[4].episodes[0].counts["refused_429"] == 1
    # every episode had its own key, and each is dead now
    assert len(set(KEYS)) == len(KEYS) == 6
    assert all(k in endpoint.ended_keys and k not in endpoint.episodes for k in KEYS)


COMMAND_AGENT = """
import json, os
from openai import OpenAI
task = json.loads(os.environ["FLYWHEEL_TASK"])
client = OpenAI(max_retries=0)
reply = client.chat.completions.create(model=os.environ["OPENAI_MODEL"],
    messages=[{"role": "user", "content": task["q"]}])
if task["q"] == "die":
    raise SystemExit(3)
print(len(reply.choices[0].message.content) >= 0 and 0.75)
"""


def test_a_command_agent_gets_the_endpoint_in_its_environment(endpoint):
    job = AgentJob(0, 0, [{"q": "1+1="}, {"q": "die"}], group_size=1, seed=4)
    groups = asyncio.run(run_job(endpoint, job, AgentLimits(wall_clock_s=60.0),
                                 command=[sys.executable, "-c", COMMAND_AGENT]))
    assert groups[0].failure is None and groups[0].scores == [0.75]
    assert len(groups[0].episodes[0].rows) == 1
    assert groups[1].failure == "error" and "exited with 3" in groups[1].episodes[0].message
