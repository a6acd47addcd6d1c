"""How good is a self-distillation teacher? The model's own accuracy with the privileged
context in its prompt, beside its accuracy without it.

Pure on-policy self-distillation (`teacher.<name>.weights: student` with a
`context_template`) moves the student towards the teacher's distribution, so the teacher's
own accuracy on the validation prompts bounds what it can teach. This scores the model on
`examples/rlvr_smollm2.yaml`'s validation prompts, as the student is prompted there (read
from that config: the chat template, its system prompt, response_length; `math_rule`),
once with the template (bench_distill.py's self stage: '{prompt} (the answer is
{answer})') and once with the plain prompt; greedy, and with --samples N also N samples
per prompt at temperature 1.

    PYTHONPATH=. .venv/bin/python bench/probe_hinted_teacher.py --samples 4

In-process transformers `generate` (no Ray), fp32, batches of 64 prompts.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from flywheel.pipelines.config import load_config
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.workers.rewards.math_rule import score

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rlvr_smollm2.yaml"  # the student's prompt, budget, val data
HINTED = "{prompt} (the answer is {answer})"  # bench_distill.py's SELF_TEMPLATE, unquoted


def accuracy(model, tok, rows: list[dict], template: str, samples: int, system: str,
             max_new: int) -> float:
    """Mean math_rule score over every prompt (and sample): greedy when samples is 0."""
    copies = max(samples, 1)
    right = 0
    for start in range(0, len(rows), 64):
        chunk = rows[start:start + 64]
        texts = [tok.apply_chat_template(
            [{"role": "system", "content": system},
             {"role": "user", "content": template.format(**row)}],
            tokenize=False, add_generation_prompt=True) for row in chunk]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        sampling = (dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                         num_return_sequences=samples) if samples else dict(do_sample=False))
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new, pad_token_id=tok.pad_token_id,
                                 **sampling)
        replies = tok.batch_decode(out[:, enc.input_ids.shape[1]:], skip_special_tokens=True)
        for i, reply in enumerate(replies):
            row = chunk[i // copies]
            right += score(row["prompt"], reply, str(row["answer"])).score == 1.0
    return right / (len(rows) * copies)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pretrain", default="builtin://smollm2-135m-instruct")
    parser.add_argument("--template", default=HINTED)
    parser.add_argument("--samples", type=int, default=0, help="also N samples at T = 1")
    args = parser.parse_args()
    cfg = load_config(str(EXAMPLE), [])
    system, max_new = cfg.actor_train.data_args.system_prompt, cfg.response_length
    val = ROOT / cfg.validation.data_args.file_name[0]
    torch.manual_seed(0)
    path = resolve_pretrain(args.pretrain)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rows = [json.loads(line) for line in val.read_text().splitlines()]
    print(f"| context | greedy |{' T = 1 |' if args.samples else ''}")
    print(f"|---|---|{'---|' if args.samples else ''}")
    for name, template in (("teacher", args.template), ("student", "{prompt}")):
        began = time.time()
        cells = [accuracy(model, tok, rows, template, n, system, max_new)
                 for n in ([0, args.samples] if args.samples else [0])]
        print(f"| {name}: `{template}` | " + " | ".join(f"{c:.3f}" for c in cells)
              + f" |   ({time.time() - began:.0f} s)")


if __name__ == "__main__":
    main()
