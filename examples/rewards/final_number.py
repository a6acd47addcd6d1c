"""A verl-style reward for examples/rlvr_smollm2.yaml's times tables, as a user brings it.

`compute_score` is verl's signature, written as a verl user has it; flywheel calls it with
the record's columns (reward_type python; docs: pipelines/rlvr.md). It scores 1 when the
last number in the response is the answer, which is what the example's system prompt
("Give only the final number.") asks for, and 0 otherwise. Run from the repository root:

    platform run --config examples/rlvr_smollm2.yaml rewards.math_rule.reward_type=python \
        rewards.math_rule.reward_import_path=examples.rewards.final_number:compute_score \
        "import_allowlist=[examples.rewards]"
"""

from __future__ import annotations

import re

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def compute_score(data_source: str, solution_str: str, ground_truth: str,
                  extra_info: dict | None = None) -> float:
    numbers = NUMBER.findall(solution_str.replace(",", ""))
    return float(bool(numbers) and float(numbers[-1]) == float(ground_truth))
