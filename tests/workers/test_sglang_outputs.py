"""sglang's answers → Generations (workers/strategies/sglang_outputs.py), over engine outputs
built in the shape of sglang's `meta_info` from known logits: sglang cannot be installed
here (CUDA-only kernels), so the live engine path is unverified. The renormalised log-probs
are held against algorithms/sampled_distribution.py (the trainer's distribution); the stop
cut against a stop string that began in an earlier partial-rollout segment."""

from __future__ import annotations

import pytest
import torch

from flywheel.algorithms.sampled_distribution import SampledDistribution
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.model_head import policy_head
from flywheel.workers.strategies.sglang_outputs import generation_of


def engine_output(z: torch.Tensor, temperature: float, top_k: int, dist, seed: int = 0):
    """What sglang answers for tokens drawn from `dist` at logits z [T, V]: each token's
    log-softmax(z / T) and its position's top_k of them (RETURN_ORIGINAL_LOGPROB 0)."""
    full = torch.log_softmax(z / temperature, dim=-1)  # [T, V]
    probs = torch.softmax(dist.logits(z), dim=-1)
    tokens = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed))[:, 0]
    top = torch.topk(full, top_k, dim=-1)
    return {"meta_info": {
        "output_token_logprobs": [(float(full[t, a]), int(a), None)
                                  for t, a in enumerate(tokens)],
        "output_top_logprobs": [[(float(v), int(i), None) for v, i in zip(vs, ids)]
                                for vs, ids in zip(top.values, top.indices)],
        "finish_reason": {"type": "length"}}}, tokens


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 10, 0.9), (1.0, 5, 1.0),
                                                        (0.9, 40, 0.5), (1.3, 100, 0.99)])
def test_the_top_k_log_probs_give_the_trained_distributions_log_prob(temperature, top_k,
                                                                     top_p):
    z = torch.randn(64, 300, generator=torch.Generator().manual_seed(top_k),
                    dtype=torch.float64) * 3
    dist = SampledDistribution(temperature, top_k, top_p, joint=True)
    out, tokens = engine_output(z, temperature, top_k, dist)
    sampling = SamplingParams(max_new_tokens=64, temperature=temperature, top_k=top_k,
                              top_p=top_p)
    got = generation_of(out, 0, sampling, [1, 2], decode=lambda ids: "").log_probs
    expected = torch.log_softmax(dist.logits(z), dim=-1).gather(-1, tokens[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(got, dtype=torch.float64), expected,
                               rtol=0, atol=1e-9)
    untruncated = torch.log_softmax(z / temperature, -1).gather(-1, tokens[:, None])[:, 0]
    assert not torch.allclose(torch.tensor(got, dtype=torch.float64), untruncated)


def test_sglang_cuts_top_k_and_top_p_jointly_and_the_trainer_follows():
    # the nucleus of the untruncated distribution, not of the top-k renormalised one
    z = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.1]], dtype=torch.float64))
    joint = SampledDistribution(1.0, 2, 0.5, joint=True).logits(z)
    sequential = SampledDistribution(1.0, 2, 0.5).logits(z)
    assert torch.isinf(joint).tolist() == [[False, False, True, True]]  # 0.4 before: < 0.5
    assert torch.isinf(sequential).tolist() == [[False, True, True, True]]  # 4/7 >= 0.5
    assert policy_head(1.0, 2, 0.5, True, "sglang").distribution.joint
    assert not policy_head(1.0, 2, 0.5, True, "vllm").distribution.joint


def test_a_stop_string_begun_in_an_earlier_segment_ends_the_response():
    """A partial rollout's next segment: its prompt ends with the response so far, which
    ends with "</ans"; sglang sees only this request's "wer> more" and says length."""
    def decode(ids):
        return "".join(chr(i) for i in ids)

    so_far = [ord(c) for c in "abc</ans"]
    new = [ord(c) for c in "wer> more"]
    out = {"meta_info": {"output_token_logprobs": [(-0.5, t, None) for t in new],
                         "finish_reason": {"type": "length"}}}
    sampling = SamplingParams(max_new_tokens=16, stop_strings=["</answer>"],
                              continued=[len(so_far)])
    generation = generation_of(out, 0, sampling, [7, 7] + so_far, decode)
    assert decode(generation.token_ids) == "wer>" and generation.finish_reason == "stop"
    assert len(generation.log_probs) == 4
    fresh = generation_of(out, 0, SamplingParams(max_new_tokens=16, stop_strings=[
        "</answer>"]), [7, 7] + so_far, decode)  # not continued: nothing to complete
    assert len(fresh.token_ids) == len(new) and fresh.finish_reason == "length"
