"""Where a sampled response ends: the one rule every generation backend applies.

A response ends at its first stop token (the tokenizer's eos or a `stop_token_ids` entry)
or at the token whose text completes one of `stop_strings`; that token is kept, so its
log-prob is trained like any other. hf_infer cuts its padded rows with `response_end`;
vllm and sglang stop by themselves and are cut with it too, so the three agree on a
response's last token whichever way the engine counts a stop string.

A partial rollout's next segment is a new request whose prompt ends with the response so
far (`SamplingParams.continued`); a stop string may begin in an earlier segment and end in
this one. transformers sees the whole sequence and stops there; sglang sees only this
request's output and does not. `before` (the response so far) makes the scan cross the
boundary, so both are cut at the completing token and marked `stop`, not `length`.
"""

from __future__ import annotations


def response_end(token_ids: list[int], stop_ids: set[int], stop_strings: list[str],
                 decode, before: list[int] | tuple[int, ...] = ()) -> int | None:
    """Length of `token_ids` up to and including its first stop; None: no stop in it.
    `decode(ids) -> str` is the tokenizer's (only called when stop_strings are given).
    `before`: the response's earlier tokens (a partial rollout's earlier segments), whose
    text a stop string may start in; only a stop string completed inside `token_ids`
    counts."""
    for t, tok in enumerate(token_ids):
        if tok in stop_ids:
            token_end: int | None = t + 1
            break
    else:
        token_end = None
    if not stop_strings:
        return token_end
    # enough of the earlier text to hold any stop string's start (a token is >= 1 char,
    # or a part of one: 4 per character covers a UTF-8 character split over byte tokens)
    tail = list(before[len(before) - min(len(before), TAIL_PER_CHAR * max(
        len(s) for s in stop_strings) + TAIL_SLACK):])
    seen = decode(tail) if tail else ""

    def completes(ids: list[int]) -> bool:
        text = decode(tail + ids)
        return any(text.count(s) > seen.count(s) for s in stop_strings)

    ids = token_ids[:token_end] if token_end is not None else token_ids
    if not completes(ids):  # the common case: one decode
        return token_end
    for t in range(len(ids)):  # the first prefix whose text completes a stop string
        if completes(ids[:t + 1]):
            return t + 1
    return token_end


TAIL_PER_CHAR = 4
TAIL_SLACK = 4
