"""Where a sampled response ends: the one rule every generation backend applies.

A response ends at its first stop token (the tokenizer's eos or a `stop_token_ids` entry)
or at the token whose text completes one of `stop_strings`; that token is kept, so its
log-prob is trained like any other. hf_infer cuts its padded rows with `response_end`;
vllm and sglang stop by themselves and are cut with it too, so the three agree on a
response's last token whichever way the engine counts a stop string.
"""

from __future__ import annotations


def response_end(token_ids: list[int], stop_ids: set[int], stop_strings: list[str],
                 decode) -> int | None:
    """Length of the response up to and including its first stop; None: no stop in it.
    `decode(ids) -> str` is the tokenizer's (only called when stop_strings are given)."""
    for t, tok in enumerate(token_ids):
        if tok in stop_ids:
            token_end: int | None = t + 1
            break
    else:
        token_end = None
    if not stop_strings:
        return token_end
    ids = token_ids[:token_end] if token_end is not None else token_ids
    if not any(s in decode(ids) for s in stop_strings):  # the common case: one decode
        return token_end
    for t in range(len(ids)):  # the first prefix whose text holds a stop string
        if any(s in decode(ids[:t + 1]) for s in stop_strings):
            return t + 1
    return token_end
