"""The llm_judge reward with a real chat model: SmolLM2-135M-Instruct judges a few
(prompt, response, reference) triples, once as a yes/no judge and once on a 0-10 scale.

It runs exactly as a reward worker runs the reward: in a scoring process
(`TimeLimitedScorer`) on hf_infer (or `--strategy vllm`), greedy, under the per-sample
limit. For each triple it prints whether the response is right, the judge's answer and
its score; then agreement with the truth (yes/no), the parse-failure count and seconds per
sample, with the 1-minute load average before and after. A 135M model is a weak judge:
the figures are what it does, not what a judge should do. Writes JSON (--out, default
bench/results/llm_judge.json).

    .venv/bin/python -m bench.bench_llm_judge [--strategy hf_infer|vllm] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from flywheel.config.schema import LlmJudgeArgs, ModelArgs, RewardConfig, StrategyArgs
from flywheel.workers.rewards.time_limit import TimeLimitedScorer

MODEL = "builtin://smollm2-135m-instruct"
# (prompt, response, reference, is the response right?)
TRIPLES = [
    ("What is 7 + 5?", "7 + 5 = 12.", "12", True),
    ("What is 7 + 5?", "7 + 5 = 13.", "12", False),
    ("What is the capital of France?", "The capital of France is Paris.", "Paris", True),
    ("What is the capital of France?", "The capital of France is Berlin.", "Paris", False),
    ("How many legs does a spider have?", "A spider has 8 legs.", "8", True),
    ("How many legs does a spider have?", "A spider has 6 legs.", "8", False),
    ("What color is the sky on a clear day?", "Blue.", "blue", True),
    ("What color is the sky on a clear day?", "Green.", "blue", False),
]
NUMBER_TEMPLATE = (
    "Question: {prompt}\nReference answer: {reference}\nStudent answer: {response}\n\n"
    "Rate the student answer from 0 (wrong) to 10 (correct). Reply with only the number.")


def judge(strategy: str, args: LlmJudgeArgs) -> dict:
    strategy_config = ({"max_model_len": 1024}
                       if strategy == "vllm" else {})
    cfg = RewardConfig(reward_type="llm_judge", sample_timeout_s=120.0,
                       strategy_args=StrategyArgs(strategy, strategy_config),
                       model_args=ModelArgs(model_name_or_path=MODEL), llm_judge=args)
    load_before, started = os.getloadavg()[0], time.monotonic()
    scorer = TimeLimitedScorer(cfg)
    start_s = time.monotonic() - started
    try:
        started = time.monotonic()
        results = scorer.score([(p, r, ref) for p, r, ref, _ in TRIPLES])
        score_s = time.monotonic() - started
    finally:
        scorer.close()
    rows = []
    for (prompt, response, _, right), result in zip(TRIPLES, results):
        rows.append({"prompt": prompt, "response": response, "right": right,
                     "score": result.score, **result.metadata})
        print(f"  {'right' if right else 'wrong'}  {response!r:42} -> "
              f"{result.score:.2f}  judge said {result.metadata.get('judge_answer', '')!r}")
    failures = sum(bool(r.get("judge_parse_failure")) for r in rows)
    summary = {"parser": args.score_parser, "strategy": strategy, "start_s": start_s,
               "load_before_after": [load_before, os.getloadavg()[0]],
               "s_per_sample": score_s / len(rows), "parse_failures": failures,
               "mean_score_right": sum(r["score"] for r in rows if r["right"]) / 4,
               "mean_score_wrong": sum(r["score"] for r in rows if not r["right"]) / 4}
    if args.score_parser == "yes_no":
        summary["agreement"] = sum((r["score"] == 1.0) == r["right"] for r in rows) / len(rows)
    print("  " + json.dumps({k: round(v, 3) if isinstance(v, float) else v
                             for k, v in summary.items()}))
    return {"summary": summary, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="hf_infer", choices=("hf_infer", "vllm"))
    parser.add_argument("--out", default="bench/results/llm_judge.json")
    opts = parser.parse_args()
    out = {}
    print(f"yes/no judge ({MODEL}, {opts.strategy}, default template):")
    out["yes_no"] = judge(opts.strategy, LlmJudgeArgs(max_new_tokens=8))
    print(f"0-10 judge ({MODEL}, {opts.strategy}):")
    out["number"] = judge(opts.strategy, LlmJudgeArgs(
        prompt_template=NUMBER_TEMPLATE, score_parser="number", score_min=0, score_max=10,
        max_new_tokens=8))
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
