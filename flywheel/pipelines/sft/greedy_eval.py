"""Greedy exact-match accuracy: the yardstick for the warm start and the built-in models.

Why our own loop instead of `model.generate`: the arithmetic prompts are fixed width, so
batching by prompt length needs no padding, no attention mask and no position ids, and the
result cannot depend on how a batch happens to be padded. The loop runs every few warm-start
steps, so it is kept cheap (KV cache, last-position logits only).

Correct means: the completion, cut at the first `<eos>`, equals `answer` exactly. With
`max_new_tokens=4` and 3-character answers the model must also stop (emit `<eos>`).
Not here: RL rewards (workers/rewards) and pipeline validation, which score sampled text.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from flywheel.platform.models.tiny_qwen2 import load_causal_lm


@torch.no_grad()
def greedy_complete(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    max_new_tokens: int = 4,
    batch_size: int = 500,
) -> list[str]:
    """Greedy completions, cut at the first `<eos>` (which is not included).

    Prompts are encoded as `<bos> prompt` and batched by length, so no padding is involved
    and positions are implicit. The KV cache makes each new token one position's forward
    (3x cheaper than re-running the prompt: this runs every few training steps).
    """
    encoded = [
        [tokenizer.bos_token_id] + tokenizer.encode(p, add_special_tokens=False) for p in prompts
    ]
    return greedy_complete_ids(model, tokenizer, encoded, max_new_tokens, batch_size)


@torch.no_grad()
def greedy_complete_ids(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    encoded: list[list[int]],
    max_new_tokens: int,
    batch_size: int = 500,
) -> list[str]:
    """`greedy_complete` on prompts already encoded (any template): batched by length."""
    was_training = model.training
    model.eval()
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(encoded):
        by_length.setdefault(len(ids), []).append(i)
    completions = [""] * len(encoded)
    for indices in by_length.values():
        for lo in range(0, len(indices), batch_size):
            chunk = indices[lo : lo + batch_size]
            step_ids = torch.tensor([encoded[i] for i in chunk], device=model.device)  # [B, L]
            past, generated = None, []
            for _ in range(max_new_tokens):
                out = model(
                    input_ids=step_ids, past_key_values=past, use_cache=True, logits_to_keep=1
                )
                past = out.past_key_values
                step_ids = out.logits[:, -1:].argmax(-1)  # [B, 1]
                generated.append(step_ids)
            for i, row in zip(chunk, torch.cat(generated, dim=1).tolist()):  # [B, max_new_tokens]
                if tokenizer.eos_token_id in row:
                    row = row[: row.index(tokenizer.eos_token_id)]
                completions[i] = tokenizer.decode(row)
    model.train(was_training)
    return completions


def accuracy_of(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    records: list[dict],
    max_new_tokens: int = 4,
    batch_size: int = 500,
) -> float:
    """Fraction of records whose greedy completion (up to `<eos>`) equals `answer` exactly."""
    if not records:
        raise ValueError("accuracy needs at least one record")
    outs = greedy_complete(
        model, tokenizer, [r["prompt"] for r in records], max_new_tokens, batch_size
    )
    return sum(o == r["answer"] for o, r in zip(outs, records)) / len(records)


def greedy_accuracy(
    model_dir: str | Path, records: list[dict], max_new_tokens: int = 4, batch_size: int = 500
) -> float:
    """Greedy exact-match accuracy of the checkpoint in `model_dir` on `records`."""
    model = load_causal_lm(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return accuracy_of(model, tokenizer, records, max_new_tokens, batch_size)
