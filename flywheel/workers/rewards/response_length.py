"""ROLL's response length reward, `rewards.<name>.response_length_penalty_coef` times it.

From roll/pipeline/rlvr/rewards/crossthinkqa_rule_reward_worker.py
(`get_response_length_reward(min_len=100, max_len=400)`), with n the response's tokens:

    r(n) = -0.5                            n < 100
         = -0.5 * (400 - n) / (400 - 100)  100 <= n <= 400
         = 0                               n > 400

so short answers lose up to 0.5 and anything past 400 tokens nothing. ROLL passes the
response row of its padded batch tensor, whose length is the batch's padded width and so
the same for every sample; here n is each response's own token count (the penalty's
evident intent). It needs token counts, which only the pipeline has (rewards receive
text), so the pipeline adds it when it combines a sample's scores
(pipelines/rlvr/generation.py `ScoringJob.finish`), for any reward_type.
"""

from __future__ import annotations

MIN_TOKENS, MAX_TOKENS, SHORTEST = 100, 400, -0.5


def response_length_reward(n_tokens: int) -> float:
    if n_tokens < MIN_TOKENS:
        return SHORTEST
    if n_tokens > MAX_TOKENS:
        return 0.0
    return SHORTEST * (MAX_TOKENS - n_tokens) / (MAX_TOKENS - MIN_TOKENS)
