"""A prompt record as every prompt source gives it (data files in prompt_data.py,
reasoning-gym tasks in reasoning_gym_data.py), and the error a bad record raises."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Prompt = str | list[dict[str, Any]]


class DataError(ValueError):
    pass


@dataclass
class PromptRecord:
    id: str
    prompt: Prompt  # text, or chat messages
    answer: str
    tag: str
    # The whole row, every column as read (JSON values), with `id` and `tag` added when the
    # row has no column of that name: what a reward function gets as its `record`
    # (workers/rewards/user_function.py), so tags, ids and extra fields reach it.
    row: dict[str, Any] = field(default_factory=dict)


def json_row(row: dict) -> dict[str, Any]:
    """`row` with JSON values only (a parquet date or bytes becomes its text): it travels
    to a reward's scoring process as JSON and is checkpointed with its group."""
    return json.loads(json.dumps(row, default=str))
