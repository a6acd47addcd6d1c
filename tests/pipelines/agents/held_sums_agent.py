"""The sums agent (examples/agents/sums_agent.py) with a second call, holding each episode
open between its two calls, so a stop or a kill lands mid-episode
(test_agent_resume.py). The second call sends the first reply back as it came and the
sum again: it continues the first call's ids, so agent.rows: episode trains the episode
as one row. The reward is the first reply's. Each episode leaves `<id>.start` in the
task's `flight_dir` when it starts and `<id>.end` when it returns: a start without an
end is an episode in flight (or cut by a kill)."""

import asyncio
import uuid
from pathlib import Path


async def agent(task: dict, client) -> float:
    marks = Path(task["flight_dir"])
    name = uuid.uuid4().hex
    (marks / f"{name}.start").write_text("")
    messages = [{"role": "user", "content": task["prompt"]}]
    reply = (await client.chat.completions.create(model="policy", messages=messages)
             ).choices[0].message
    await asyncio.sleep(task["hold_s"])
    messages += [reply.model_dump(exclude_none=True),
                 {"role": "user", "content": task["prompt"]}]
    await client.chat.completions.create(model="policy", messages=messages)
    (marks / f"{name}.end").write_text("")
    return float((reply.content or "").strip() == task["answer"])
