"""The policy the gradient is taken of: the distribution actor_infer actually samples from.

A sampler does not draw from softmax(z) of the raw logits z. It draws from

    pi(a | s) = softmax(z / T)[a] / sum_{b in K} softmax(z / T)[b]   for a in K, else 0,

where T is `temperature` and K the kept set: the `top_k` most likely tokens, then, of
those, the smallest set of most likely tokens whose probability reaches `top_p`
(transformers applies temperature, top-k, top-p in this order, and so does vLLM). As in
verl and ROLL the temperature is part of the policy; unlike them the truncation is too,
so the recorded behaviour log-probs (hf_infer's processed scores, vLLM's
`processed_logprobs`) and the trainer's log-probs are the same quantity, and
exp(log-prob) is the frequency with which a token is really drawn. Tokens outside K get
logit -inf: zero probability and no gradient. Greedy decoding (validation) samples from
no distribution; its log-probs are those of T = 1 with nothing truncated.

SGLang cuts both at once (`joint`, its sampler's filter_apply_order "joint", in its
flashinfer and torch paths alike): a token is kept when it is among the top_k AND the more
likely tokens before it hold less than top_p of the untruncated distribution's mass (the
nucleus measured before the top-k cut, not after it). Where both are set the kept set can
differ from the sequential one, so a run sampled by sglang trains on the joint rule
(model_head.policy_head). Its log-probs follow from the top_k log-probs sglang returns
(workers/strategies/sglang_outputs.py): the kept set lies inside them.

Ties: a token whose logit equals the k-th largest is kept (transformers' and vLLM's rule).
A token outside the kept set (sampled earlier, under other weights) has probability 0:
its logit is replaced by `OUTSIDE_LOGIT` when it is picked, so its log-prob is about -1e4,
zero to float precision yet finite, and ratios and losses stay defined.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SampledDistribution:
    temperature: float = 1.0
    top_k: int = -1  # <= 0: no top-k truncation
    top_p: float = 1.0  # 1.0: no top-p truncation
    joint: bool = False  # top-p measured on the untruncated distribution (SGLang's rule)

    @property
    def truncates(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0

    def logits(self, z: Tensor) -> Tensor:
        """[..., V] raw logits -> logits of pi (-inf outside the kept set)."""
        if self.temperature != 1.0:
            z = z / self.temperature
        nucleus = self._outside_nucleus(z) if self.joint and self.top_p < 1.0 else None
        if 0 < self.top_k < z.shape[-1]:
            kth = torch.topk(z, self.top_k, dim=-1).values[..., -1:]  # [..., 1]
            z = z.masked_fill(z < kth, float("-inf"))
        if self.top_p < 1.0:
            z = z.masked_fill(self._outside_nucleus(z) if nucleus is None else nucleus,
                              float("-inf"))
        return z

    def _outside_nucleus(self, z: Tensor) -> Tensor:
        """[..., V] bool: the tokens outside softmax(z)'s top_p nucleus."""
        ascending, order = torch.sort(z, dim=-1)  # [..., V]
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1 - self.top_p  # the least likely tokens, up to 1 - top_p
        drop[..., -1:] = False  # the most likely token always stays
        return drop.scatter(-1, order, drop)


RAW = SampledDistribution()
OUTSIDE_LOGIT = -1.0e4


def picked_logits(logits: Tensor, targets: Tensor) -> Tensor:
    """z[target] from logits [..., V] of pi and targets [...], OUTSIDE_LOGIT where pi
    gives the target no probability."""
    picked = torch.gather(logits, -1, targets[..., None]).squeeze(-1)
    return torch.where(torch.isinf(picked), torch.full_like(picked, OUTSIDE_LOGIT), picked)


def entropy_of_logits(logits: Tensor, log_norm: Tensor) -> Tensor:
    """H = log Z - sum_v p_v z_v for logits [..., V] (entries of -inf contribute 0) and
    log Z = logsumexp(z) [...]."""
    probs = torch.exp(logits - log_norm[..., None])
    # p_v * 0 where z_v = -inf, not where(inf, 0, p_v * z_v): the product's gradient there
    # would be 0 * -inf = nan, which `where` passes on to every logit
    return log_norm - (probs * finite(logits)).sum(-1)


def finite(logits: Tensor) -> Tensor:
    """`logits` with the -inf of truncated tokens as 0 (their probability is 0)."""
    return torch.where(torch.isinf(logits), torch.zeros_like(logits), logits)
