"""ROLL's `val_prompt_length` / `val_sequence_length`: the validation response budget.

What they do in ROLL @ 8eb27cc2: nothing to the validation prompts. rlvr_pipeline.py
filters and pads validation prompts at `prompt_length`, the training limit; the pair only
sets validation's `max_new_tokens = val_sequence_length - val_prompt_length`
(rlvr_config.py) and the validation scheduler's sequence length. ROLL asserts the two are
set together, and both default to the training pair. flywheel's validation generates
`response_length` tokens, like training, so a pair whose budget equals training's converts
(dropped, it changes nothing) and any other budget is reported missing.
"""

from __future__ import annotations

from typing import Any

from flywheel.interop.roll.conversion import Conversion

KEYS = frozenset({"val_prompt_length", "val_sequence_length"})


def fit_val_lengths(data: dict[str, Any], out: Conversion) -> None:
    """Convert the KEYS the ROLL file writes (roll_convert._top leaves them here)."""
    prompt, sequence = data.get("val_prompt_length"), data.get("val_sequence_length")
    if prompt is None and sequence is None:
        out.dropped.extend(f"{key}: null (the training lengths)" for key in KEYS if key in data)
        return
    if prompt is None or sequence is None:
        out.missing.append("val_prompt_length without val_sequence_length or the reverse "
                           "(ROLL refuses one without the other)")
        return
    try:
        budget = int(sequence) - int(prompt)
        train = (int(data["response_length"]) if data.get("response_length") is not None
                 else int(data["sequence_length"]) - int(data.get("prompt_length", 1024)))
    except (KeyError, TypeError, ValueError):
        out.missing.append(f"validation lengths that are not numbers (val_prompt_length = "
                           f"{prompt!r}, val_sequence_length = {sequence!r})")
        return
    if budget != train:
        out.missing.append(f"a validation response budget (val_sequence_length - "
                           f"val_prompt_length = {budget}) other than training's ({train}): "
                           f"flywheel's validation generates response_length tokens")
        return
    out.dropped.append(f"val_prompt_length: {prompt}, val_sequence_length: {sequence}: "
                       f"validation's response budget {budget} is training's (ROLL filters "
                       f"validation prompts at prompt_length either way)")
