"""The n-gram repetition penalty ROLL adds to its ifeval and multiple-choice rule rewards.

From Yeo et al. 2025, "Demystifying Long Chain-of-Thought Reasoning in LLMs" (code:
github.com/eddycmu/demystify-long-cot, openrlhf/openrlhf/reward/repetition.py), as ROLL
applies it (roll/pipeline/rlvr/rewards/ifeval_rule_reward_worker.py and
crossthinkqa_rule_reward_worker.py, n = 3, max_penalty = -0.5):

    words   = response.lower().split()
    ngrams  = the (len(words) - n + 1) runs of n consecutive words
    penalty = (1 - |distinct ngrams| / |ngrams|) * max_penalty       (0 with < n words)

so a response that never repeats a 3-word run gets 0 and one that says the same word over
and over approaches max_penalty. Linear in the response's length (one pass, one set).
"""

from __future__ import annotations


def repetition_penalty(response: str, ngram_size: int = 3, max_penalty: float = -0.5) -> float:
    """In [max_penalty, 0]: `max_penalty` times the share of repeated n-grams."""
    words = response.lower().split()
    total = len(words) - ngram_size + 1
    if total <= 0:
        return 0.0
    distinct = len({tuple(words[i:i + ngram_size]) for i in range(total)})
    return (1.0 - distinct / total) * max_penalty or 0.0  # never -0.0


def check_penalty_args(max_penalty: float, ngram_size: int) -> None:
    """The two settings every reward that applies the penalty declares (reward_args:
    repetition_max_penalty, repetition_ngram_size), checked when the config loads."""
    if not max_penalty <= 0:
        raise ValueError(f"repetition_max_penalty must be <= 0 (a penalty), got {max_penalty}")
    if ngram_size < 1:
        raise ValueError(f"repetition_ngram_size must be >= 1, got {ngram_size}")
