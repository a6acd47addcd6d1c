"""What the image-prompt backend tests share: a drawn test image, and one engine's sampled
image rows as the batch the trainer scores (the sampler's log-probs recorded)."""

from __future__ import annotations

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
