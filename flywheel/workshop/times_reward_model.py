"""A small reward model for the SmolLM2 times tables: `builtin://smollm2-135m-times-rm`.

Why: the reward_model reward needs a real sequence-classification checkpoint to show an RLVR
run on, and none can be downloaded here. This one is SmolLM2-135M-Instruct with a scalar
head, trained by the reward_model pipeline (pipelines/reward_model/run.py) from the shipped
config `times_reward_model.yaml` beside this file, on synthetic preferences over the times
tables of examples/rlvr_smollm2.yaml: for "What is a * b?" (and the other wordings of that
example's data), a reply giving the right product is preferred to one giving a wrong
product or none (a sentence stopped before its answer, the way SmolLM2 starts, or a
non-answer). Replies come in several forms ("56", "7 * 8 = 56", "The answer is 56.").
Half the prompts are written as the example's reward receives them (POLICY_PROMPT): a
model trained on bare questions alone read that text as another distribution, and a policy
trained on it learned to say "The answer is 18" to "Compute 7 times 4." for a score of +6.7
(exact-answer accuracy 0.14 -> 0.02 in 9 steps).

What this module adds to the pipeline: the pairs (`preference_pairs`, split by (a, b): a
fifth of the products are held out), written as the pipeline's JSONL files, and the
acceptance check: the run's last held-out pairwise accuracy (`val/rm/accuracy`, the chosen
reply scored above the rejected one) is recorded in `reward_model.json` and the build fails
below `min_accuracy`. Loss: Bradley-Terry (Bradley & Terry 1952), as reward models for RLHF
are trained (Ouyang et al. 2022, eq. 1).

Built on first use into the model cache (platform/models/builtin.py) or ahead of a run with
`python -m flywheel.workshop.times_reward_model`; the time and accuracy of a build are in
docs_site/docs/pipelines/dpo.md (Reward-model training).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

BASE = "builtin://smollm2-135m-instruct"
RECIPE = Path(__file__).with_name("times_reward_model.yaml")  # the pipeline's config
# Bump when code changes the built weights without changing the recipe or the pairs.
RECIPE_VERSION = 2  # 2: trained by the reward_model pipeline (1: a loop of its own)
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
    """The pairs and the acceptance bar; the training settings are the recipe YAML's.
    Every field enters the built-in model's cache key (changing one rebuilds it)."""

    low: int = 2
    high: int = 12
    held_out: float = 0.2  # fraction of (a, b) pairs kept for the accuracy check
    pairs_per_product: int = 6
    unfinished_share: float = 0.25  # rejected replies without a number (NON_ANSWERS)
    policy_prompt_share: float = 0.5  # prompts written as POLICY_PROMPT, the rest bare
    seed: int = 0
    min_accuracy: float = 0.8


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


def write_pairs(folder: Path, cfg: TimesRewardModelConfig = TimesRewardModelConfig()
                ) -> tuple[Path, Path]:
    """`folder`/train.jsonl and held_out.jsonl, records the pair pipelines read
    ({"prompt", "chosen", "rejected"})."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "train.jsonl", folder / "held_out.jsonl"
    for path, pairs in zip(paths, preference_pairs(cfg)):
        path.write_text("".join(json.dumps({"prompt": p, "chosen": c, "rejected": r}) + "\n"
                                for p, c, r in pairs))
    return paths


def recipe_dict(train: Path, held_out: Path, output_dir: Path) -> dict:
    """The shipped recipe with the build's pair files and run directory filled in."""
    data = yaml.safe_load(RECIPE.read_text())
    data["actor_train"]["data_args"]["file_name"] = [str(train)]
    data["validation"]["data_args"]["file_name"] = [str(held_out)]
    data["output_dir"] = str(output_dir)
    return data


def build_times_reward_model(out_dir: Path, cfg: TimesRewardModelConfig = TimesRewardModelConfig()
                             ) -> dict:
    """Run the recipe on fresh pairs, check its held-out accuracy, and save its last
    checkpoint (a `*ForSequenceClassification` folder) into `out_dir`; return the record."""
    from flywheel.pipelines.config import load_config_dict
    from flywheel.pipelines.run.launch import run

    began = time.time()
    with tempfile.TemporaryDirectory(prefix="times-rm-") as tmp:
        train, held_out = write_pairs(Path(tmp) / "pairs", cfg)
        run_dir = run(load_config_dict(recipe_dict(train, held_out, Path(tmp) / "run"),
                                       source=str(RECIPE)))
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        evals = [(r["step"], r["val/rm/accuracy"]) for r in rows if "val/rm/accuracy" in r]
        step, accuracy = evals[-1]
        print(f"times reward model: held-out pairwise accuracy {accuracy:.3f} on "
              f"{len(held_out.read_text().splitlines())} pairs after {step} steps "
              f"(by evaluation: {', '.join(f'{a:.2f}' for _, a in evals)})")
        if accuracy < cfg.min_accuracy:
            raise RuntimeError(f"times reward model: held-out pairwise accuracy "
                               f"{accuracy:.3f} is below {cfg.min_accuracy}")
        for item in (run_dir / f"checkpoint-{step}").iterdir():
            if item.is_file():
                shutil.copyfile(item, out_dir / item.name)
        record = {"base": BASE, "recipe": str(RECIPE.name), "pairs": asdict(cfg),
                  "train_pairs": len(train.read_text().splitlines()),
                  "held_out_pairs": len(held_out.read_text().splitlines()),
                  "held_out_accuracy": accuracy, "accuracy_by_evaluation": evals,
                  "seconds": round(time.time() - began)}
    (out_dir / "reward_model.json").write_text(json.dumps(record, indent=2))
    return record


def recipe_key() -> dict:
    """What the built-in model's cache key covers: the pairs, the recipe and its version."""
    return {"times_reward_model": asdict(TimesRewardModelConfig()), "base": BASE,
            "recipe": yaml.safe_load(RECIPE.read_text()), "recipe_version": RECIPE_VERSION}


def main() -> None:
    parser = argparse.ArgumentParser(description="build builtin://smollm2-135m-times-rm "
                                                 "into the model cache")
    parser.add_argument("--write-pairs", type=Path, metavar="DIR",
                        help="only write DIR/train.jsonl and DIR/held_out.jsonl")
    args = parser.parse_args()
    if args.write_pairs:
        for path in write_pairs(args.write_pairs):
            print(path)
        return
    import flywheel.workers.rewards.registry  # noqa: F401  (registers the model's name)
    from flywheel.platform.models.builtin import resolve_pretrain

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    print(resolve_pretrain("builtin://smollm2-135m-times-rm"))


if __name__ == "__main__":
    main()
