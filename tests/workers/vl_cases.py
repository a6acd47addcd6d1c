"""What the image-prompt backend tests share: a drawn test image, and one engine's sampled
image rows as the batch the trainer scores (the sampler's log-probs recorded)."""

from __future__ import annotations

import torch
from PIL import Image

from flywheel.workers.batch import TokenBatch, pack_sequences
from flywheel.workers.image_inputs import PromptImages, RowImages
from flywheel.workers.strategies.base import Generation, InferStrategy, SamplingParams


def image(colour, size=(48, 40)) -> Image.Image:
    """A coloured square in the corner of a white image (not symmetric: a flip shows)."""
    img = Image.new("RGB", size, (255, 255, 255))
    img.paste(Image.new("RGB", (size[0] // 2, size[1] // 2), colour), (4, 6))
    return img


def sampled_batch(engine: InferStrategy, ids: list[list[int]],
                  inputs: list[PromptImages | None], sampling: SamplingParams
                  ) -> tuple[list[Generation], TokenBatch]:
    """`sampling.n` samples of each prompt, and the same packed with their images and
    recorded log-probs, in prompt order."""
    gens = engine.generate(ids, sampling, inputs)
    return gens, pack_sequences([ids[g.prompt_index] for g in gens], [g.token_ids for g in gens],
                          pad_id=0, infer_log_probs=[g.log_probs for g in gens],
                          images=RowImages.of(inputs).repeat(sampling.n))


def greedy_with_scores(engine, ids: list[list[int]], inputs: list[PromptImages | None],
                       max_new_tokens: int) -> tuple[list[Generation], torch.Tensor]:
    """hf_infer's greedy generations and what its `generate` itself scored them with
    ([B, T, V] log-softmax of the raw logits, step by step with the KV cache): the
    recorded log-probs come from a separate full forward, which would not show how the
    prompt was embedded for decoding."""
    generate, scores = engine.model.generate, []

    def recording(*args, **kwargs):
        result = generate(*args, **kwargs | {"output_scores": True,
                                             "return_dict_in_generate": True})
        scores.append(torch.stack(result.scores, 1).log_softmax(-1))
        return result

    engine.model.generate = recording
    try:
        gens = engine.generate(ids, SamplingParams(max_new_tokens=max_new_tokens,
                                                   do_sample=False), inputs)
    finally:
        engine.model.generate = generate
    return gens, scores[0]


def decoded_logprobs(scores: torch.Tensor, row: int, tokens: list[int]) -> torch.Tensor:
    """The log-probs `generate` gave the tokens it chose in `row`."""
    return scores[row, torch.arange(len(tokens)), torch.tensor(tokens)]


def check_continuation(engine, trainer, prompts) -> None:
    """A partial rollout continues a response in segments: hf_infer gets the prompt and the
    response so far as its prompt. An image token the policy sampled there is text, as it
    was when sampled; before hf_infer read it so, the model's image lookup failed (Idefics3:
    "Number of elements of source < number of ones in mask"). The new tokens' decoding
    scores and recorded log-probs equal the trainer's over the whole response."""
    ids, inputs = prompts
    so_far = [40, engine.model.config.image_token_id, 41]
    gens, scores = greedy_with_scores(engine, [ids[0] + so_far], inputs[:1], max_new_tokens=3)
    (g,) = gens
    batch = pack_sequences([ids[0]], [so_far + g.token_ids], pad_id=0,
                           images=RowImages.of(inputs[:1]))
    start = len(ids[0]) + len(so_far)
    scored = trainer.forward_logprobs(batch)[0, start:start + len(g.token_ids)]
    assert torch.allclose(torch.tensor(g.log_probs), scored, atol=1e-5)
    assert torch.allclose(decoded_logprobs(scores, 0, g.token_ids), scored, atol=1e-4)
