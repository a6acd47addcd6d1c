"""The sums agent (examples/agents/sums_agent.py) under agent.reward: rewards: it returns
its reply as its answer for `rewards:` to score, with its own check of that answer beside
it as info (agent/self_check), so a run can compare the two (test_agent_run.py). `exact`
is the reward function that scores it: the answer equals the task's answer."""

from flywheel.pipelines.agent.episodes import AgentResult


async def agent(task: dict, client) -> AgentResult:
    reply = await client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": task["prompt"]}])
    answer = reply.choices[0].message.content or ""
    return AgentResult(answer=answer, info={"self_check": float(answer.strip() == task["answer"])})


def exact(response: str, reference: str) -> float:
    return float(response.strip() == reference)
