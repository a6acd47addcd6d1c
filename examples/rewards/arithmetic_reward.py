"""Reward functions of one's own for builtin://arithmetic (examples/rlvr_python_reward.yaml).

Each record of builtin://arithmetic has the columns prompt ("84+48="), answer ("132") and
id ("add-84-48"). These functions show the three forms `reward_type: python` accepts; the
config names one with `reward_import_path`. Run from the repository root, so that
`examples.rewards` is importable (the working directory is on the scoring process's path).
"""

from __future__ import annotations


def digit_credit(prompt: str, response: str, reference: str, record: dict) -> dict:
    """flywheel's form: partial credit per digit, the sum worked out from the record's id
    (not from the reference), with metadata kept beside the score."""
    _, a, b = record["id"].split("-")
    want = f"{int(a) + int(b):03d}"
    got = response.strip()[:len(want)]
    right = sum(x == y for x, y in zip(got, want))
    return {"score": right / len(want), "exact": got == want, "digits_right": right}


def compute_score(data_source: str, solution_str: str, ground_truth: str,
                  extra_info: dict | None = None) -> float:
    """verl's form, as a verl user has it: 1 for the exact answer."""
    return float(solution_str.strip() == ground_truth)


def exact_answers(prompts: list[str], completions: list[str], answer: list[str],
                  **columns) -> list[float]:
    """TRL's batched form: `answer` is the records' answer column, one per completion."""
    return [float(c.strip() == a) for c, a in zip(completions, answer)]
