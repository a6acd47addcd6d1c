"""The answer part of a reasoning model's response: what follows its last `</think>`.

ROLL's rule rewards (ifeval, CrossThinkQA) judge only this part (their
`extract_after_last_think`): the text after the last `</think>` with its leading newlines
removed, or the whole response when it has no `</think>`. Their repetition penalty, unlike
the check itself, reads the whole response.
"""

from __future__ import annotations

END_THINK = "</think>"


def after_last_think(response: str) -> str:
    cut = response.rfind(END_THINK)
    return response if cut < 0 else response[cut + len(END_THINK):].lstrip("\n")
