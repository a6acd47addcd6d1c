"""A checkpoint's pipeline_state.json read back with every key checked, or one line naming
the file and the key.

Why: a hand-edited or damaged file gave `TypeError: '<' not supported ...` (a string
step count compared with max_steps) or a bare `JSONDecodeError`, neither naming the file.
The keys are those the step loop writes (pipelines/loop/step_loop.py save_checkpoint).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flywheel.platform.checkpoint import PIPELINE_STATE

# key -> (accepted types, required); an int key never takes a bool
STATE_KEYS: dict[str, tuple[tuple[type, ...], bool]] = {
    "step": ((int,), True),
    "next_batch": ((int,), True),
    "kl_coef": ((int, float), True),
    "buffer": ((list,), True),
    "version": ((int,), False),
    "next_seq": ((int,), False),
    "schedule_steps": ((int, type(None)), False),
    "saved_at": ((int, float), False),
}


class CheckpointStateError(ValueError):
    """A pipeline_state.json that cannot be resumed from: `<file>: <key>: <what>`."""


def read_pipeline_state(checkpoint: Path) -> dict[str, Any]:
    """The checked contents of `checkpoint`/pipeline_state.json."""
    path = checkpoint / PIPELINE_STATE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointStateError(f"{path}: missing; the checkpoint is not one a run "
                                   f"can resume from") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointStateError(f"{path}: not JSON ({error})") from None
    if not isinstance(state, dict):
        raise CheckpointStateError(f"{path}: expected a JSON object, got "
                                   f"{type(state).__name__}")
    for key, (types, required) in STATE_KEYS.items():
        if key not in state:
            if required:
                raise CheckpointStateError(f"{path}: key '{key}' missing")
            continue
        value = state[key]
        if isinstance(value, bool) or not isinstance(value, types) or (
                isinstance(value, int) and key != "kl_coef" and value < 0):
            expected = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise CheckpointStateError(f"{path}: key '{key}': expected {expected}"
                                       f"{' >= 0' if int in types else ''}, got "
                                       f"{json.dumps(value)[:40]}")
    return state
