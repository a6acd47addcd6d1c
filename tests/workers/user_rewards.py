"""Reward functions of a user's own, for tests/workers/test_python_reward.py: imported by
path in a reward's scoring process (a fresh interpreter), so they live in a module of
their own and import nothing heavy."""

from __future__ import annotations

import time


def cases(prompt: str, response: str, reference: str, record: dict):
    """flywheel's form; what it does is the record's `case` column."""
    case = record["case"]
    if case == "by_column":  # scores by a column only the record has
        return {"score": float(response == record["expected"]), "tag": record["tag"]}
    if case == "raise":
        raise ValueError(f"no answer in {response!r}")
    if case == "hang":
        time.sleep(60)
    if case == "garbage":
        return {"text": "not a score", "nan": float("nan"), "no_score": {"value": 1}}[response]
    if case == "none":
        return None
    return 1.0


def verl_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's form: 1 when the answer matches and the record says which source it is."""
    return float(data_source == "math" and solution_str == ground_truth
                 and extra_info["level"] == 2)


def trl_batch(prompts, completions, expected, **columns):
    """TRL's batched form: the records' `expected` column, one per completion."""
    if "hang" in completions:
        time.sleep(60)
    if "nap" in completions:  # longer than one sample's limit, shorter than the batch's
        time.sleep(0.6)
    return [None if c == "skip" else float(c == e) for c, e in zip(completions, expected)]


def trl_short(completions, **columns):
    """TRL's form answering one score too few."""
    return [1.0] * (len(completions) - 1)
