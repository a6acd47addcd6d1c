"""A task of the agent kind as the prompt record the rewards see (answers.py scores an
episode's answer against it; jobs.py gives each group its record). Its own module so that
both import it without importing each other."""

from __future__ import annotations

import json

from flywheel.pipelines.data.records import PromptRecord, json_row


def task_record(task: dict, seq: int) -> PromptRecord:
    """A task as the record the rewards see. Its prompt is empty: each episode's is the
    conversation it had (answer_groups)."""
    answer = task.get("answer", "")
    tag = task.get("tag")
    return PromptRecord(id=str(task.get("id", f"agent/task{seq}")), prompt="",
                        answer=answer if isinstance(answer, str) else json.dumps(answer),
                        tag=tag if isinstance(tag, str) else "", row=json_row(task))
