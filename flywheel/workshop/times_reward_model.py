"""A small reward model for the SmolLM2 times tables: `builtin://smollm2-135m-times-rm`.

Why: the reward_model reward needs a real sequence-classification checkpoint to show an RLVR
run on, and none can be downloaded here. This one is SmolLM2-135M-Instruct with a scalar
head, trained on synthetic preferences over the times tables of examples/rlvr_smollm2.yaml:
for "What is a * b?" (and the other wordings of that example's data), a reply giving the
right product is preferred to one giving a wrong product or none (a sentence stopped before
its answer, the way SmolLM2 starts, or a non-answer). Replies come in several forms ("56",
"7 * 8 = 56", "The answer is 56."). Half the prompts are written as the example's reward
receives them (POLICY_PROMPT): a model trained on bare questions alone read that text as
another distribution, and a policy trained on it learned to say "The answer is 18" to
"Compute 7 times 4." for a score of +6.7 (exact-answer accuracy 0.14 -> 0.02 in 9 steps).
The (a, b) pairs are split: a fifth are held out, and the held-out pairwise accuracy (the
chosen reply scored above the rejected one) is printed and recorded in `reward_model.json`;
the build fails below `min_accuracy`.

Loss: Bradley-Terry (Bradley & Terry 1952), -log sigmoid(r_chosen - r_rejected), as reward
models for RLHF are trained (Ouyang et al. 2022, eq. 1).

Cost on a 2-core CPU: only the last `trained_layers` decoder layers, the final norm and the
head train, so the lower layers run once per sequence (their outputs are cached) and the
training steps run the top layers alone. One thread (`max_threads`): a thread count changes
the order of float sums, and so the trained weights. Measured on this idle 2-core machine:
20 minutes (caching 4.3 min, 10 epochs of ~87 s), held-out pairwise accuracy 0.840 on 144
pairs (0.68, 0.69, 0.77, 0.80, 0.79, 0.82, 0.80, 0.81, 0.82, 0.84 after epochs 1-10). Built
on first use into the model cache (platform/models/builtin.py) or ahead of a run with
`python -m flywheel.workshop.times_reward_model`.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

BASE = "builtin://smollm2-135m-instruct"
# The wordings of examples/data/times_tables.py (its train and val sets), so that the model
# judges the questions the RLVR example asks.
QUESTIONS = ("What is {a} * {b}?", "Compute {a} times {b}.", "Multiply {a} by {b}.",
             "What is the product of {a} and {b}?", "What is {a} x {b}?",
             "How much is {a} times {b}?", "Calculate {a} * {b}.")
# How a reward receives the prompt in examples/rlvr_smollm2_reward_model.yaml: the text the
# policy saw (its chat template with the example's system prompt), special tokens skipped.
POLICY_PROMPT = "system\nGive only the final number.\nuser\n{question}\nassistant\n"
ANSWERS = ("{n}", "{a} * {b} = {n}", "The answer is {n}.", "{a} times {b} is {n}.")
# Replies without the product: a sentence stopped before its answer (the way SmolLM2 starts),
# and the non-answers a policy drifts to under a reward model that never saw them.
NON_ANSWERS = ("To calculate {a} * {b}, we need to multiply {a} by", "I am not sure.",
               "Coincidence.", "Let me think about it.", "eleven", "thirteen", "seventeen")
# (11, 13 and 17 are no product of two factors in 2..12: a word reply is never right)


@dataclass(frozen=True)
class TimesRewardModelConfig:
    """Every field enters the built-in model's cache key (changing one rebuilds it)."""

    low: int = 2
    high: int = 12
    held_out: float = 0.2  # fraction of (a, b) pairs kept for the accuracy check
    pairs_per_product: int = 6
    unfinished_share: float = 0.25  # rejected replies without a number (NON_ANSWERS)
    policy_prompt_share: float = 0.5  # prompts written as POLICY_PROMPT, the rest bare
    trained_layers: int = 4
    epochs: int = 10
    batch_pairs: int = 16
    lr: float = 1e-4
    head_lr: float = 1e-3
    seed: int = 0
    min_accuracy: float = 0.8
    max_threads: int = 1  # the thread count changes the weights a build ends with


def wrong_product(a: int, b: int, rng: random.Random) -> int:
    """A plausible mistake: a neighbouring table entry or the product off by a little."""
    right = a * b
    candidates = {a * (b + 1), a * (b - 1), (a + 1) * b, (a - 1) * b, right + 1, right - 1,
                  right + 10, right - 10, a + b}
    return rng.choice(sorted(c for c in candidates if c > 0 and c != right))


def preference_pairs(cfg: TimesRewardModelConfig) -> tuple[list, list]:
    """(train, held_out) lists of (prompt, chosen, rejected), split by (a, b)."""
    rng = random.Random(cfg.seed)
    products = [(a, b) for a in range(cfg.low, cfg.high + 1) for b in range(cfg.low, cfg.high + 1)]
    rng.shuffle(products)
    cut = int(len(products) * cfg.held_out)
    split = {"held_out": products[:cut], "train": products[cut:]}
    out: dict[str, list] = {}
    for name, chosen_products in split.items():
        pairs = []
        for a, b in chosen_products:
            for _ in range(cfg.pairs_per_product):
                prompt = rng.choice(QUESTIONS).format(a=a, b=b)
                if rng.random() < cfg.policy_prompt_share:
                    prompt = POLICY_PROMPT.format(question=prompt)
                chosen = rng.choice(ANSWERS).format(a=a, b=b, n=a * b)
                if rng.random() < cfg.unfinished_share:
                    rejected = rng.choice(NON_ANSWERS).format(a=a, b=b)
                else:
                    rejected = rng.choice(ANSWERS).format(a=a, b=b, n=wrong_product(a, b, rng))
                pairs.append((prompt, chosen, rejected))
        out[name] = pairs
    return out["train"], out["held_out"]


def _lower_states(model, tokenizer, texts: list[tuple[str, str]], start: int):
    """Each rendered (prompt, reply)'s hidden states entering layer `start`, and lengths."""
    import torch

    from flywheel.workers.rewards.reward_model import render_ids

    rows = [render_ids(tokenizer, p, r) for p, r in texts]
    states = []
    with torch.no_grad():
        for i in range(0, len(rows), 32):
            chunk = rows[i:i + 32]
            width = max(map(len, chunk))
            ids = torch.full((len(chunk), width), model.config.pad_token_id)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for j, r in enumerate(chunk):
                ids[j, :len(r)], mask[j, :len(r)] = torch.tensor(r), 1
            hidden = model.model(input_ids=ids, attention_mask=mask,
                                 output_hidden_states=True).hidden_states[start]
            states += [hidden[j, :len(r)] for j, r in enumerate(chunk)]
    return states


def _top_scores(model, states: list) -> torch.Tensor:  # noqa: F821
    """Scores at each sequence's last token, running the top layers on cached states."""
    import torch

    width = max(s.shape[0] for s in states)
    x = torch.zeros((len(states), width, states[0].shape[1]))
    mask = torch.zeros((len(states), width), dtype=torch.long)
    for j, s in enumerate(states):
        x[j, :s.shape[0]], mask[j, :s.shape[0]] = s, 1
    hidden = model.model(inputs_embeds=x, attention_mask=mask).last_hidden_state
    last = torch.tensor([s.shape[0] - 1 for s in states])
    return model.score(hidden[torch.arange(len(states)), last])[:, 0]


def pairwise_accuracy(model, chosen: list, rejected: list) -> float:
    import torch

    with torch.no_grad():
        return float((_top_scores(model, chosen) > _top_scores(model, rejected)).float().mean())


def build_times_reward_model(out_dir: Path, cfg: TimesRewardModelConfig = TimesRewardModelConfig()
                             ) -> dict:
    """Train the head and top layers, save the checkpoint into `out_dir`, return the record."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from flywheel.platform.models.builtin import resolve_pretrain

    began = time.time()
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.max_threads)
    base = resolve_pretrain(BASE)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1,
                                                               dtype=torch.float32)
    model.config.pad_token_id = tokenizer.pad_token_id
    train, held = preference_pairs(cfg)
    layers = model.model.layers
    start = len(layers) - cfg.trained_layers

    def states(pairs, which):
        return _lower_states(model, tokenizer, [(p[0], p[which]) for p in pairs], start)

    train_c, train_r, held_c, held_r = (states(train, 1), states(train, 2),
                                        states(held, 1), states(held, 2))
    logger.info("cached lower-layer states of %d pairs in %.0fs", len(train) + len(held),
                time.time() - began)
    model.model.layers = torch.nn.ModuleList(layers[start:])  # the top alone from here
    for p in model.parameters():
        p.requires_grad_(False)
    top = [p for m in (model.model.layers, model.model.norm) for p in m.parameters()]
    for p in [*top, *model.score.parameters()]:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW([{"params": top, "lr": cfg.lr},
                                   {"params": model.score.parameters(), "lr": cfg.head_lr}],
                                  weight_decay=0.0)
    before = pairwise_accuracy(model, held_c, held_r)
    rng = random.Random(cfg.seed)
    order = list(range(len(train)))
    for epoch in range(cfg.epochs):
        rng.shuffle(order)
        model.train()
        for i in range(0, len(order), cfg.batch_pairs):
            idx = order[i:i + cfg.batch_pairs]
            margin = (_top_scores(model, [train_c[k] for k in idx])
                      - _top_scores(model, [train_r[k] for k in idx]))
            loss = -torch.nn.functional.logsigmoid(margin).mean()  # Bradley-Terry
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        logger.info("epoch %d: loss %.3f, held-out pairwise accuracy %.3f", epoch + 1,
                    float(loss), pairwise_accuracy(model, held_c, held_r))
    accuracy = pairwise_accuracy(model, held_c, held_r)
    print(f"times reward model: held-out pairwise accuracy {accuracy:.3f} on {len(held)} "
          f"pairs (before training {before:.3f}); train accuracy "
          f"{pairwise_accuracy(model, train_c, train_r):.3f} on {len(train)} pairs")
    if accuracy < cfg.min_accuracy:
        raise RuntimeError(f"times reward model: held-out pairwise accuracy {accuracy:.3f} "
                           f"is below {cfg.min_accuracy}")
    model.model.layers = layers
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    record = {"base": BASE, "recipe": asdict(cfg), "held_out_pairs": len(held),
              "train_pairs": len(train), "held_out_accuracy": accuracy,
              "accuracy_before_training": before, "seconds": round(time.time() - began)}
    (out_dir / "reward_model.json").write_text(json.dumps(record, indent=2))
    return record


def recipe_key() -> dict:
    """What the built-in model's cache key covers."""
    return {"times_reward_model": asdict(TimesRewardModelConfig()), "base": BASE}


if __name__ == "__main__":
    from flywheel.platform.models.builtin import resolve_pretrain

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    print(resolve_pretrain("builtin://smollm2-135m-times-rm"))
