"""Do the two agent paths succeed equally often from one checkpoint? The built-in agentic
pipeline's multiply episode (ToolEnv over MultiplyEnv, agent_smollm2_multiply_tools.yaml)
and the `openai` client agent through the endpoint (examples/agents/multiply_agent.py,
agent_smollm2_multiply_openai.yaml), on the same products, sampled by the same engine in
this process (no Ray, no training).

The two pipelines train the same rows for the same replies
(tests/pipelines/test_agent_token_continuity.py); this checks the other half, what they
sample. Prints each path's success count and the replies of the episodes that failed.

    PYTHONPATH=. .venv/bin/python bench/compare_agent_paths.py \
        --pretrain <an HF model folder: the SFT warm start, or `platform export` of an RL
        checkpoint> --groups 8 --group-size 8 --engine vllm
"""

from __future__ import annotations

import argparse
import asyncio
import time

from examples.agents.multiply_agent import SYSTEM, agent
from flywheel.config.schema import StrategyArgs, WorkerConfig
from flywheel.envs.chat_turns import ChatTurns
from flywheel.envs.env_manager import EnvManager, EnvManagerConfig
from flywheel.envs.multiply import MultiplyEnv
from flywheel.pipelines.agent.endpoint import AgentEndpoint, EndpointLimits
from flywheel.pipelines.agent.episodes import AgentLimits, run_episode
from flywheel.pipelines.agent.generator import StrategyGenerator
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.tools.calculator import Calculator
from flywheel.tools.tool_env import ToolEnv
from flywheel.tools.toolbox import ToolBox
from flywheel.workers.env_worker import _TextCodec
from flywheel.workers.strategies.base import SamplingParams

MAX_TOKENS, TURNS, TOOL_USES = 48, 3, 2  # both examples' budgets


def engine(name: str, path: str):
    if name == "vllm":
        from flywheel.workers.strategies.vllm_infer import VLLMInferStrategy
        return VLLMInferStrategy(path, WorkerConfig(strategy_args=StrategyArgs("vllm")),
                                 seed=0, context_length=512)
    from flywheel.workers.strategies.hf_infer import HFInferStrategy
    return HFInferStrategy(path, WorkerConfig(), seed=0)


def builtin_path(strategy, groups: int, size: int, temperature: float, seed: int):
    """The built-in env manager's episodes: (trajectories, the products they played)."""
    tok = strategy.tokenizer
    box = ToolBox([Calculator()], 10.0)
    config = EnvManagerConfig(env_type="multiply", tag="Multiply", group_size=size,
                              num_env_groups=groups, max_steps=TURNS,
                              max_tokens_per_step=MAX_TOKENS, system_template=SYSTEM,
                              turn_template="{observation}", chat_template=True,
                              max_tool_output_tokens=64)
    manager = EnvManager(config, ChatTurns(tok, box.schemas()), lambda: ToolEnv(
        MultiplyEnv(format_penalty=0.0, min_digits=3, max_digits=4), box, TOOL_USES))
    turns = [0]

    def generate(prompts, max_tokens):
        turns[0] += 1
        sampling = SamplingParams(max_new_tokens=max_tokens, temperature=temperature,
                                  do_sample=temperature > 0, seed=seed + turns[0])
        return [(g.token_ids, g.log_probs) for g in strategy.generate(prompts, sampling)]
    played = manager.rollout(generate, _TextCodec(tok), seed=seed)
    return played, [env.env.factors for env in manager.envs]


def endpoint_path(strategy, products, temperature: float, seed: int):
    sampling = SamplingParams(max_new_tokens=MAX_TOKENS, temperature=temperature,
                              do_sample=temperature > 0)
    endpoint = AgentEndpoint(StrategyGenerator(strategy), strategy.tokenizer, "policy",
                             sampling, EndpointLimits(max_tokens_per_call=MAX_TOKENS,
                                                      max_calls=TURNS), "hermes")
    endpoint.start()

    async def play():
        return await asyncio.gather(*[
            run_episode(endpoint, {"a": a, "b": b}, i, f"episode {i}", seed + i,
                        AgentLimits(600.0), agent) for i, (a, b) in enumerate(products)])
    try:
        return asyncio.run(play())
    finally:
        endpoint.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pretrain", required=True)
    parser.add_argument("--engine", choices=["vllm", "hf_infer"], default="vllm")
    parser.add_argument("--groups", type=int, default=8, help="products")
    parser.add_argument("--group-size", type=int, default=8, help="episodes per product")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    strategy = engine(args.engine, resolve_pretrain(args.pretrain))
    tok = strategy.tokenizer
    began = time.time()
    played, products = builtin_path(strategy, args.groups, args.group_size,
                                    args.temperature, args.seed)
    wins = sum(t.score == 1.0 for t in played)
    print(f"built-in env: {wins}/{len(played)} succeeded ({time.time() - began:.0f} s)")
    for t in played:
        if t.score != 1.0:
            print("   failed:", repr(tok.decode(t.input_ids[t.prompt_length:])[:300]))
    began = time.time()
    outcomes = endpoint_path(strategy, products, args.temperature, 1000 * args.seed)
    finished = [o for o in outcomes if o.failure is None]
    wins = sum(o.reward == 1.0 for o in finished)
    print(f"endpoint agent: {wins}/{len(finished)} succeeded, "
          f"{len(outcomes) - len(finished)} failed episodes ({time.time() - began:.0f} s)")
    for o in finished:
        if o.reward != 1.0:
            print("   failed:", " | ".join(repr(tok.decode(r.token_ids))[:120] for r in o.rows))


if __name__ == "__main__":
    main()
