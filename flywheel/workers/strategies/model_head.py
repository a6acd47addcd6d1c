"""What a trained model outputs per token: the policy's log-probs or the critic's values.

The actor, the reference and the critic run the same backends and the same update loop;
they differ only in the head on top of the transformer and in the objective. The head
decides which Hugging Face class is loaded and how the model's output becomes a [B, L]
tensor aligned with `input_ids` (column 0 is 0):

- policy: log pi(x_t | x_<t), from the language-model head (`hf_model.sequence_logprobs`),
  where pi is the distribution actor_infer samples from (its temperature, top-k, top-p:
  `algorithms/sampled_distribution.py`) for actor_train; the reference's pi is its own
  temperature-scaled distribution, untruncated (`ModelHead.for_reference`);
- value:  V(s_t), the value of the state in which token t was chosen: a scalar head on the
  hidden state after tokens < t, so GAE can pair it with token t's reward and log-prob.
  Its body starts from the policy checkpoint; the head starts from `init_value_head`, the
  same numbers on every backend (seeded from the run's seed), so backends can be compared.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F

from flywheel.algorithms.sampled_distribution import RAW, SampledDistribution
from flywheel.config.schema import GeneratingArgs, ModelArgs
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.hf_model import TORCH_DTYPES, load_causal_lm, sequence_logprobs
from flywheel.workers.strategies.sequence_packing import PackingPlan

VALUE_HEAD_STD = 0.02  # transformers' default initializer_range


@dataclass(frozen=True)
class ModelHead:
    kind: Literal["policy", "value"]
    distribution: SampledDistribution = RAW  # the policy head's sampled distribution

    def for_reference(self) -> ModelHead:
        """This policy head as the reference policy's: softmax(z / T) over the whole
        vocabulary, without the sampler's top-k / top-p truncation (as in verl and ROLL).

        Why the two sides differ: actor_train's log-probs enter importance ratios against
        the behaviour log-probs the sampler recorded, so they must be of the distribution
        really sampled, truncation included. The reference is a fixed policy the KL term
        keeps the actor near, not a sampler: truncated, it would give probability 0 to
        every token the actor sampled outside the reference's own kept set, and each such
        token's KL would be ~1e4 (OUTSIDE_LOGIT) instead of a finite log-ratio. The
        temperature stays: it is part of the policy in verl and ROLL too."""
        return replace(self, distribution=SampledDistribution(self.distribution.temperature))

    @property
    def metric_prefix(self) -> str:
        return "actor" if self.kind == "policy" else "critic"

    def load_hf(self, path: str, model_args: ModelArgs, device: torch.device,
                seed: int) -> torch.nn.Module:
        if self.kind == "policy":
            return load_causal_lm(path, model_args, device)
        from transformers import AutoConfig, AutoModelForTokenClassification  # see load_causal_lm

        # No dropout before the head (transformers' default is 0.1): the values the critic
        # is trained on are computed in eval mode, and ranks would draw different masks.
        config = AutoConfig.from_pretrained(path, num_labels=1)
        config.classifier_dropout = 0.0
        model = AutoModelForTokenClassification.from_pretrained(
            path, config=config, dtype=TORCH_DTYPES[model_args.dtype])
        init_value_head(model.score, seed)
        return model.to(device)

    def hf_outputs(self, model: torch.nn.Module, batch: TokenBatch, with_entropy: bool,
                   chunked: bool = True, response_only: bool = False,
                   packing: PackingPlan | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[B, L] outputs (and entropies). `response_only`: the policy head computes
        log-probs on the response mask only, 0 elsewhere (`sequence_logprobs`
        `positions`): what the training forward asks, since every `Objective` reads its
        outputs under the response mask. The value head is one number per position and
        computes them all. `packing`: how the rows are packed
        (sequence_packing.py; None: padded)."""
        if self.kind == "policy":
            positions = batch.response_mask if response_only else None
            return sequence_logprobs(model, batch, with_entropy, self.distribution, chunked,
                                     positions, packing)
        return token_values(model, batch, packing), None


POLICY = ModelHead("policy")
VALUE = ModelHead("value")


def policy_head(temperature: float, top_k: int, top_p: float, do_sample: bool,
                backend: str = "") -> ModelHead:
    """The policy head for actor_infer's generating_args (greedy samples no distribution:
    its tokens are scored at temperature 1, untruncated). `backend`: actor_infer's; sglang
    cuts top-k and top-p jointly (sampled_distribution.py)."""
    if not do_sample:
        return POLICY
    return ModelHead("policy", SampledDistribution(temperature, top_k, top_p,
                                                   joint=backend == "sglang"))


def actor_and_reference_heads(gen: GeneratingArgs,
                              backend: str = "") -> tuple[ModelHead, ModelHead]:
    """actor_train's head (the distribution actor_infer samples, truncation included; its
    backend: `policy_head`) and the reference's (the same temperature, untruncated:
    `ModelHead.for_reference`)."""
    actor = policy_head(gen.temperature, gen.top_k, gen.top_p, gen.do_sample, backend)
    return actor, actor.for_reference()


@torch.no_grad()
def init_value_head(linear: torch.nn.Linear, seed: int) -> None:
    """N(0, 0.02) weights and a zero bias from a generator of its own, so every backend
    (and every rank) starts the critic from the same head whatever ran before."""
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(linear.weight.shape, generator=generator) * VALUE_HEAD_STD
    linear.weight.copy_(weight.to(linear.weight.dtype))
    if linear.bias is not None:
        linear.bias.zero_()


def token_values(model: torch.nn.Module, batch: TokenBatch,
                 packing: PackingPlan | None = None) -> torch.Tensor:
    """V(s_t) for every position t, aligned with input_ids; column 0 is 0 (packed: and
    every padding position)."""
    device = next(model.parameters()).device
    if packing is None:
        logits = model(input_ids=batch.input_ids.to(device),
                       attention_mask=batch.attention_mask.to(device)).logits  # [B, L, 1]
    else:
        packs = packing.pack(batch.input_ids, batch.attention_mask, batch.response_mask)
        logits = packs.unpacked(model(**packs.model_inputs(model)).logits)
    return F.pad(logits[:, :-1, 0].float(), (1, 0))  # [B, L]
