"""Scoring an agent's final answer with `rewards:` (issue 47, agent.reward: rewards).

Agents run against the endpoint on the tiny model in this process and return answers (a
string, AgentResult(answer=...), or None: their last reply); a real math_rule reward
worker scores them by RLVR's path (answers.py -> rlvr submit_texts / ScoringJob). Each
episode's reward is the score checked by hand, the reward got the task as its record,
the task's answer as its reference and the prompt of the call the answer closes; an agent
that returns a reward under rewards, or an answer under agent, is its episode's
bad_reward, said in words."""

from __future__ import annotations

import asyncio
import math

from flywheel.config.schema import RewardConfig
from flywheel.pipelines.agent.answers import score_answers
from flywheel.pipelines.agent.episodes import AgentLimits, AgentResult
from flywheel.pipelines.agent.jobs import AgentJob, run_job
from flywheel.workers.rewards.math_rule import score as math_rule_score
from tests.pipelines.test_agent_endpoint import MODEL
from tests.pipelines.test_agent_episodes import endpoint  # noqa: F401 - the fixture
from tests.pipelines.test_message_prompts_scored import SentItems, math_rule  # noqa: F401

REPLIES: dict[str, list] = {}  # task id -> per episode, the last reply (content, prompt ids)


async def agent(task, client):
    """One agent; what it returns is chosen by the task."""
    messages = [{"role": "user", "content": "2+3="}]
    reply = await client.chat.completions.create(model=MODEL, messages=messages)
    if task["how"] == "last":  # a second call, on a rewritten history: its reply answers
        messages = [{"role": "user", "content": "4+4="}]
        reply = await client.chat.completions.create(model=MODEL, messages=messages)
    REPLIES.setdefault(task["id"], []).append((reply.choices[0].message.content,
                                               reply.model_extra["prompt_token_ids"]))
    return {"says": task.get("says"), "last": None,
            "result": AgentResult(answer=task.get("says"), info={"own": 1.0}),
            "reward": 1.0, "result_reward": AgentResult(1.0)}[task["how"]]


TASKS = [{"id": "right", "how": "says", "says": "5", "answer": "5"},
         {"id": "wrong", "how": "says", "says": "7", "answer": "5"},
         {"id": "boxed", "how": "result", "says": "so \\boxed{12}", "answer": 12},
         {"id": "last", "how": "last", "answer": "8", "tag": "math"},
         {"id": "reward", "how": "reward"},
         {"id": "result_reward", "how": "result_reward"}]


def test_the_rewards_score_each_episodes_final_answer(endpoint, math_rule):  # noqa: F811
    REPLIES.clear()
    job = AgentJob(0, 0, TASKS, group_size=2, seed=7)
    groups = asyncio.run(run_job(endpoint, job, AgentLimits(wall_clock_s=60.0), agent=agent,
                                 answers=True))
    assert [g.failure for g in groups] == [None] * 4 + ["bad_reward"] * 2
    for group in groups[4:]:
        assert "agent.reward is rewards" in group.episodes[0].message
    kept = groups[:4]
    assert all(math.isnan(e.reward) for g in kept for e in g.episodes)  # not scored yet
    sent = SentItems(math_rule)
    assert score_answers(kept, {"math_rule": sent}, {"math_rule": RewardConfig()},
                         endpoint.tokenizer).finish() is kept
    # by hand: "5" is 5, "7" is not, \boxed{12} is the task's int 12; the last case is
    # whatever the tiny model replied to its second call, as math_rule itself scores it
    last = [math_rule_score("", content, "8").score for content, _ in REPLIES["last"]]
    assert [g.scores for g in kept] == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0], last]
    assert [[e.reward for e in g.episodes] for g in kept] == [g.scores for g in kept]
    assert kept[2].episodes[0].info == {"own": 1.0}
    assert all(i["parsed"] for i in kept[0].reward_info) and len(kept[3].reward_info) == 2
    # what the reward got: per episode its prompt (the call the answer closes, decoded),
    # its answer, the task's answer as text, the task as its record
    decode = endpoint.tokenizer.decode
    items = {(item.record["id"], item.response): item for item in sent.items}
    assert len(sent.items) == 8
    for content, prompt_ids in REPLIES["last"]:
        item = items["last", content]
        assert item.prompt == decode(prompt_ids, skip_special_tokens=True)
        assert "4+4=" in item.prompt and "2+3=" not in item.prompt
        assert item.reference == "8" and item.record["tag"] == "math"
        assert item.messages == [{"role": "user", "content": "4+4="}]
    assert items["boxed", "so \\boxed{12}"].reference == "12"
    assert items["right", "5"].record == TASKS[0]


def test_an_answer_under_agent_reward_agent_is_a_bad_reward_naming_the_key(
        endpoint):  # noqa: F811
    job = AgentJob(0, 0, TASKS[:1] + TASKS[3:4], group_size=1, seed=8)
    groups = asyncio.run(run_job(endpoint, job, AgentLimits(wall_clock_s=60.0), agent=agent))
    assert [g.failure for g in groups] == ["bad_reward", "bad_reward"]
    for group in groups:
        assert "set agent.reward: rewards" in group.episodes[0].message
