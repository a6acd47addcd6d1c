"""sglang's answers → `Generation`s, without sglang: what sglang_infer.py does with an
engine's output, importable (and tested) where sglang cannot be installed.

Log-probs. SGLang returns log-softmax(z / T) of each sampled token
(`SGLANG_RETURN_ORIGINAL_LOGPROB` 0: after the temperature, before any truncation). With
top-k sampling the policy is the truncated distribution (algorithms/sampled_distribution.py,
SGLang's joint rule), whose log-prob of token a is

    log π(a) = ℓ(a) - log Σ_{b ∈ K} exp ℓ(b)

over the kept set K: the top_k tokens whose more likely predecessors hold less than top_p
of the untruncated mass. K lies inside the top_k tokens, so the request asks for
`top_logprobs_num = top_k` and `renormalised` computes K and its normaliser exactly from
them. top_p without top_k has no such bound (the nucleus may be the whole vocabulary) and
is refused (engine_options.py).

UNVERIFIED on a live engine (see sglang_infer.py); the tests feed this module outputs built
from known logits in the shape sglang's `meta_info` has (tests/workers/test_sglang_outputs.py).

Stops: `stops.response_end`, across a partial rollout's segment boundary (`before`); a stop
string found there marks the response `stop` even where the engine, which sees only this
request's output, said `length`.
"""

from __future__ import annotations

import math
from typing import Any

from flywheel.workers.strategies.base import Generation, SamplingParams
from flywheel.workers.strategies.stops import response_end


def truncates(sampling: SamplingParams) -> bool:
    """Whether the request samples a top-k (and maybe top-p) truncated distribution."""
    return sampling.do_sample and sampling.top_k > 0


def renormalised(chosen: float, top: list[tuple[float, Any, Any]], top_p: float) -> float:
    """log π(a) of the sampled token from its untruncated log-prob `chosen` and the top_k
    (log-prob, token id, text) entries of its position, under SGLang's joint rule: kept
    while the mass before a token is at most top_p (its sampler drops it when above)."""
    ranked = sorted((float(t[0]) for t in top), reverse=True)
    kept, before = [], 0.0
    for logprob in ranked:
        if top_p < 1.0 and before > top_p:
            break
        kept.append(logprob)
        before += math.exp(logprob)
    most = kept[0]
    return chosen - (most + math.log(sum(math.exp(x - most) for x in kept)))


def generation_of(out: dict[str, Any], index: int, sampling: SamplingParams,
                  prompt: list[int], decode) -> Generation:
    """The `Generation` of answer `index` (prompt `index // n`) of one generate call."""
    meta = out["meta_info"]
    pairs = meta["output_token_logprobs"]  # [(logprob, token_id, text|None), ...]
    ids = [int(p[1]) for p in pairs]
    log_probs = [float(p[0]) for p in pairs]
    if truncates(sampling):
        tops = meta["output_top_logprobs"]  # per position: the top_k (logprob, id, text)
        log_probs = [renormalised(lp, top, sampling.top_p)
                     for lp, top in zip(log_probs, tops, strict=True)]
    prompt_index = index // sampling.n
    end = response_end(ids, set(), sampling.stop_strings, decode,
                       sampling.response_so_far(prompt, prompt_index))
    reason = (meta.get("finish_reason") or {}).get("type", "abort")
    if end is not None and end <= len(ids) and sampling.stop_strings and reason == "length":
        reason = "stop"  # a stop string completed across the segment boundary
    return Generation(prompt_index=prompt_index, token_ids=ids[:end],
                      log_probs=log_probs[:end], finish_reason=reason)
