"""Writes the times-table prompts of examples/rlvr_smollm2.yaml (run from the repo root:
`python examples/data/times_tables.py`; the JSONL files it writes are committed).

Every product a x b with 2 <= a, b <= 12, asked in words. Training and validation share
the 121 facts but never a wording: validation measures the policy on phrasings it never
trained on, 363 prompts, so one evaluation's standard error is about 0.026.
"""

import json
from pathlib import Path

TRAIN_WORDINGS = ("What is {a} * {b}?", "Compute {a} times {b}.", "Multiply {a} by {b}.",
                  "What is the product of {a} and {b}?")
VAL_WORDINGS = ("What is {a} x {b}?", "How much is {a} times {b}?", "Calculate {a} * {b}.")
FACTORS = range(2, 13)


def records(wordings: tuple[str, ...]) -> list[dict]:
    return [{"prompt": w.format(a=a, b=b), "answer": str(a * b)}
            for w in wordings for a in FACTORS for b in FACTORS]


def main() -> None:
    here = Path(__file__).parent
    for name, wordings in (("train", TRAIN_WORDINGS), ("val", VAL_WORDINGS)):
        lines = [json.dumps(r) for r in records(wordings)]
        (here / f"times_tables_{name}.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
