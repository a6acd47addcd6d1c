"""Look at what the multiply agent and the model say to each other through the endpoint,
in this process (hf_infer, no Ray): why a run's reward is what it is.

For a few held-out products, the agent (examples/agents/multiply_agent.py) plays one
episode against the endpoint (agent.tool_format hermes, max_tokens 48, 3 calls) on the
given checkpoint; printed per episode: its reward, then per call the tail of the prompt
and the model's reply as decoded text. Also checked: the first call's prompt ids equal
the SFT warm start's rendering of the same question (examples/data/multiply_tool_demos.py
`demo`, encoded as the SFT run encodes its prompts: sft/run.py, data_args template
chat), i.e. the endpoint renders the format the warm start learned.

    PYTHONPATH=. python bench/probe_agent_multiply.py --pretrain <checkpoint> \
        --temperature 1.0 --episodes 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from flywheel.config.schema import DataArgs, WorkerConfig
from flywheel.pipelines.agent.endpoint import AgentEndpoint, EndpointLimits
from flywheel.pipelines.agent.episodes import AgentLimits, run_episode
from flywheel.pipelines.agent.generator import StrategyGenerator
from flywheel.pipelines.data.prompt_data import prompt_encoder
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "data"))


async def play(endpoint, tasks, seed):
    from examples.agents.multiply_agent import agent

    return await asyncio.gather(*[
        run_episode(endpoint, task, i, f"probe {i}", seed + i, AgentLimits(300.0), agent)
        for i, task in enumerate(tasks)])


def main() -> None:
    from multiply_tool_demos import demo  # the warm start's own demonstrations

    parser = argparse.ArgumentParser()
    parser.add_argument("--pretrain", default="builtin://smollm2-135m-instruct")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--greedy", action="store_true")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--tasks", default=str(ROOT / "examples/data/multiply_tasks_val.jsonl"))
    args = parser.parse_args()
    strategy = HFInferStrategy(resolve_pretrain(args.pretrain), WorkerConfig(), seed=0)
    tok = strategy.tokenizer
    warm_prompt = prompt_encoder(tok, DataArgs(template="chat"))  # the SFT's prompt encoding
    sampling = SamplingParams(max_new_tokens=48, temperature=args.temperature,
                              do_sample=not args.greedy)
    endpoint = AgentEndpoint(StrategyGenerator(strategy), tok, "policy", sampling,
                             EndpointLimits(max_tokens_per_call=48, max_calls=3), "hermes")
    endpoint.start()
    tasks = [json.loads(line) for line in Path(args.tasks).read_text().splitlines()]
    tasks = tasks[: args.episodes]
    outcomes = asyncio.run(play(endpoint, tasks, 1000))
    endpoint.stop()
    same = 0
    for task, outcome in zip(tasks, outcomes):
        print(f"== {task['a']} * {task['b']} = {task['a'] * task['b']}: reward "
              f"{outcome.reward} {outcome.failure or ''} {outcome.message}")
        asked = demo(task["a"], task["b"])[0]["messages"][:2]
        warm = warm_prompt(asked)
        first = next(r for r in outcome.rows if r.call == 0)
        same += first.prompt_ids == warm
        if first.prompt_ids != warm:
            at = next((i for i, (x, y) in enumerate(zip(first.prompt_ids, warm)) if x != y),
                      min(len(first.prompt_ids), len(warm)))
            print(f"   first prompt differs from the warm start's at id {at}: endpoint "
                  f"{tok.decode(first.prompt_ids[at:at + 20])!r} warm start "
                  f"{tok.decode(warm[at:at + 20])!r}")
        for row in outcome.rows:
            print(f"   call {row.call}: ...{tok.decode(row.prompt_ids[-40:])!r}")
            print(f"     -> {tok.decode(row.token_ids)!r}")
    rewards = [o.reward for o in outcomes if o.failure is None]
    print(f"first prompts equal to the warm start's rendering: {same}/{len(outcomes)}; "
          f"mean reward {sum(rewards) / max(len(rewards), 1):.3f} over {len(rewards)} "
          f"episodes ({len(outcomes) - len(rewards)} failed)")


if __name__ == "__main__":
    main()
