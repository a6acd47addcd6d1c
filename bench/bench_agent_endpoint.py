"""The agent endpoint's overhead per call: the same prompt generated directly on the
engine and through the endpoint with the real `openai` client (HTTP on loopback, request
checks, rendering, token ledger, reply parsing). Prints ms per call for both and their
difference; writes JSON with --out.

    PYTHONPATH=. python bench/bench_agent_endpoint.py --calls 50
    PYTHONPATH=. python bench/bench_agent_endpoint.py --model builtin://smollm2-135m-instruct

The engine is hf_infer in this process (generator.py StrategyGenerator): the figure is the
endpoint's own cost; in a run the call also crosses Ray to actor_infer (~1 ms, BACKENDS.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import openai

from flywheel.config.schema import WorkerConfig
from flywheel.pipelines.agent.endpoint import AgentEndpoint, EndpointLimits
from flywheel.pipelines.agent.generator import StrategyGenerator
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.platform.models.text_tokens import chat_ids
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy

TINY_TEMPLATE = ("{% for m in messages %}<bos>{{ m['role'] }}\n{{ m['content'] }}<eos>\n"
                 "{% endfor %}{% if add_generation_prompt %}<bos>assistant\n{% endif %}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="builtin://tiny-qwen2")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    strategy = HFInferStrategy(resolve_pretrain(args.model), WorkerConfig(), seed=0)
    tok = strategy.tokenizer
    if not tok.chat_template:
        tok.chat_template = TINY_TEMPLATE
    sampling = SamplingParams(max_new_tokens=args.max_tokens)
    messages = [{"role": "user", "content": "What is 12 + 34?"}]
    prompt = chat_ids(tok, messages, add_generation_prompt=True)

    endpoint = AgentEndpoint(StrategyGenerator(strategy), tok, "policy", sampling,
                             EndpointLimits(max_tokens_per_call=args.max_tokens,
                                            max_calls=args.calls + 1))
    endpoint.start()
    episode = endpoint.open_episode("bench", seed=0)
    client = openai.OpenAI(base_url=endpoint.base_url, api_key=episode.key, max_retries=0)
    direct, served = [], []
    for k in range(args.calls):  # interleaved: load on the machine hits both alike
        start = time.perf_counter()
        strategy.generate([prompt], SamplingParams(max_new_tokens=args.max_tokens, seed=k))
        direct.append(time.perf_counter() - start)
        start = time.perf_counter()
        client.chat.completions.create(model="policy", messages=messages, seed=k)
        served.append(time.perf_counter() - start)
    endpoint.stop()

    result = {"model": args.model, "calls": args.calls,
              "direct_ms": 1000 * statistics.median(direct),
              "endpoint_ms": 1000 * statistics.median(served)}
    result["overhead_ms"] = result["endpoint_ms"] - result["direct_ms"]
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
