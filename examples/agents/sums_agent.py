"""The tiny model's agent (tests and the CPU example): one call per episode, the model's
reply scored against the task's sum. The built-in tiny-qwen2-arith was warm-started on
`<bos>ab+cd=` -> `xyz<eos>`, so its chat template (sums_template.jinja) writes the
messages' contents after a <bos> and nothing else."""


async def agent(task: dict, client) -> float:
    reply = await client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": task["prompt"]}])
    return float(reply.choices[0].message.content.strip() == task["answer"])
