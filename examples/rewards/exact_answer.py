"""An exact-answer reward for examples/rlvr_tiny_vl_shapes.yaml (reward_type python, verl's
form): 1 when the reply, stripped of surrounding space, a final full stop and case, is the
ground truth ("3", "red", "left"), else 0.

Why not math_rule: it compares numbers (and math-verify's expressions); "red" against
"red" is no number. Why this strict: the shape questions ask for one word or one number,
and the tiny model's greedy replies are that word and its end token, so a looser match
(the answer anywhere in the reply) would reward "red blue green yellow".
"""

from __future__ import annotations


def compute_score(data_source: str, solution_str: str, ground_truth: str,
                  extra_info: dict | None = None) -> float:
    reply = solution_str.strip().removesuffix(".").strip().lower()
    return float(reply == str(ground_truth).strip().lower())
