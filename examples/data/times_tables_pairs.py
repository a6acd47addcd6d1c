"""Writes the times-table preference pairs of examples/dpo_smollm2.yaml (run from the repo
root: `python examples/data/times_tables_pairs.py`; the JSONL files it writes are
committed).

From the training prompts only (times_tables_train.jsonl): chosen is the short correct
answer, rejected alternates between a wrong product (a neighbour: a x (b +- 1), never the
right number) and a wordy answer that the 16-token budget of the RL example cuts before
the number. The validation pairs come from the validation prompts the same way (held-out
wordings, for val/dpo/* and greedy val/accuracy). Seeded: the same files every time.
"""

import json
import random
import re
from pathlib import Path

HERE = Path(__file__).parent
# the RL example's 16-token budget ends inside this before the number appears
WORDY = "Let me think about this step by step. First I multiply the two numbers, giving {p}."


def pair(record: dict, rng: random.Random, index: int) -> dict:
    a, b = (int(x) for x in re.findall(r"\d+", record["prompt"])[:2])
    right = int(record["answer"])
    if index % 2:
        wrong = a * (b + rng.choice((-1, 1)))
        rejected = str(wrong if wrong != right else right + a)
    else:
        rejected = WORDY.format(p=right)
    return {"prompt": record["prompt"], "chosen": record["answer"], "rejected": rejected}


def main() -> None:
    for name in ("train", "val"):
        rng = random.Random(f"times-tables-pairs-{name}")
        rows = [json.loads(line) for line in
                (HERE / f"times_tables_{name}.jsonl").read_text().splitlines()]
        lines = [json.dumps(pair(r, rng, i)) for i, r in enumerate(rows)]
        (HERE / f"times_tables_pairs_{name}.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
