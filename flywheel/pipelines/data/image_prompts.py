"""Image prompts: a record's prompt and images -> the model processor's prompt token ids
(image tokens expanded) and image tensors, and load-time filtering by prompt_length.

What it owns: placing images in chat messages the way ROLL's VL data does, rendering them
with the processor's own chat template, running the processor (its PIL backend: no
torchvision here) and counting the prompt's tokens with the image tokens in. Images come
checked and bounded from image_files.py. What it does not: text-only prompts (prompt_data.py
keeps that path unchanged), batching, the trainer's and engine's use of the tensors.

Where images go in the prompt (ROLL's layout):
- the prompt text (or a message's text) marks each image with `<image>` (ROLL's
  prompt_image_token): the i-th mark is the i-th image of the record's image column;
- no mark at all: every image comes first in the first user message, before its text;
- messages whose content is already a part list keep their `{"type": "image"}` parts.
A mark count that differs from the image count is a BadImageError naming the record.
Contents become part lists (`{"type": "text"}` / `{"type": "image"}`): VL chat templates
(Idefics3, Qwen2-VL) iterate over parts. The native template is refused for image prompts:
only the model's chat template knows how its image tokens are written.

Tokens, two forms of one prompt (the template already wrote bos and control tokens, as
`apply_chat_template(tokenize=True)` does for text prompts, so neither adds special tokens;
the messages' text is tokenized as text, its `<|im_start|>` characters, not a turn:
platform/models/text_tokens.py, spliced in where the processor saw a marker token):
- `prompt_ids`: `processor(text=..., images=...)`'s input_ids, every image expanded to its
  image tokens (Idefics3: tiles of `<image>` runs; Qwen2-VL: one `<|image_pad|>` per merged
  patch). What the trainer scores, and what prompt_length counts.
- `engine_ids`: the tokenizer's ids of the same text, one placeholder per image. What vLLM
  gets token-in with the images as `multi_modal_data`: it expands them itself, and hands
  back `prompt_token_ids` equal to `prompt_ids`. Given the expanded ids, vLLM 0.32 expands
  them again (a 48-id Idefics3 prompt became 80 and generated other tokens):
  bench/vl_feasibility.py checks both.

Plugging in: `load_prompts` (prompt_data.py) calls `encode_image_prompts` for data with
images, with the policy's processor; the RLVR rollout encodes each batch with the same
encoder, and `ImagePrompt.inputs()` (workers/image_inputs.py) travels with the request:
`features` to hf_infer and, per row, to the trainer; `images` with `engine_ids` to vllm.
Qwen2-VL's processor object cannot be built without torchvision in transformers 5.19;
`qwen_vl_pieces.load_vl_processor` gives such a checkpoint a stand-in with the same outputs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from PIL import Image

from flywheel.pipelines.data.image_files import BadImageError, ImageArgs, record_images
from flywheel.pipelines.data.prompt_templates import TEMPLATES
from flywheel.pipelines.data.records import DataError, Prompt
from flywheel.platform.models.text_tokens import (
    content_ids,
    marker_token,
    render_pieces,
    splice,
)

if TYPE_CHECKING:
    from flywheel.workers.image_inputs import PromptImages

log = logging.getLogger(__name__)

IMAGE_MARK = "<image>"  # ROLL's prompt_image_token: where an image sits in prompt text
TEXT_KEYS = ("input_ids", "attention_mask")
# Image placeholders a template writes (never a content marker).
IMAGE_PLACEHOLDERS = ("<image>", "<|image_pad|>", "<|vision_start|>", "<|vision_end|>",
                      "<fake_token_around_image>", "<global-img>")


@dataclass
class ImageItem:
    """One record as the image path needs it: its id (for errors), prompt and the raw value
    of its image column (paths, bytes, structs or PIL images; see image_files.py)."""

    id: str
    prompt: Prompt
    images: Any


@dataclass
class ImagePrompt:
    prompt_ids: list[int]  # image tokens expanded: the trainer's ids
    engine_ids: list[int]  # one placeholder per image: vLLM's token-in ids (module doc)
    images: list[Image.Image]  # checked, bounded RGB: the engine's multi_modal_data
    features: dict[str, Any]  # the processor's image tensors (pixel_values, ...)

    def inputs(self) -> PromptImages | None:
        """What a generation request carries beside `prompt_ids` (workers/image_inputs.py);
        None for a record without images."""
        if not self.images:
            return None
        from flywheel.workers.image_inputs import PromptImages  # imports torch: not at the top

        return PromptImages(self.features, self.images, self.engine_ids, len(self.prompt_ids))


def image_messages(prompt: Prompt, n_images: int, label: str) -> list[dict[str, Any]]:
    """Chat messages with part-list contents and one image part per image (module doc)."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    out = [{**m, "content": content_parts(m["content"])} for m in messages]
    marks = sum(part["type"] == "image" for m in out for part in m["content"])
    if marks == 0 and n_images:
        first_user = next((m for m in out if m["role"] == "user"), None)
        if first_user is None:
            raise BadImageError(f"{label}: {n_images} image(s) but no user message to put "
                                f"them in")
        first_user["content"] = [{"type": "image"}] * n_images + first_user["content"]
    elif marks != n_images:
        raise BadImageError(f"{label}: the prompt marks {marks} image(s) ({IMAGE_MARK}) but "
                            f"the record has {n_images}")
    return out


def content_parts(content: Any) -> list[dict[str, Any]]:
    """A message content as parts; text is split at each `<image>` mark."""
    if isinstance(content, list):
        return [dict(part) for part in content]
    parts: list[dict[str, Any]] = []
    for i, text in enumerate(str(content).split(IMAGE_MARK)):
        if i:
            parts.append({"type": "image"})
        if text:
            parts.append({"type": "text", "text": text})
    return parts


@dataclass
class ImagePromptEncoder:
    """(record id, prompt, image column value) -> ImagePrompt, with the model's processor."""

    processor: Any  # transformers ProcessorMixin: apply_chat_template + __call__
    image_args: ImageArgs = field(default_factory=ImageArgs)
    template: str = "chat"  # data_args.template; native is refused (module doc)
    system_prompt: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self, item: ImageItem) -> ImagePrompt:
        label = f"record {item.id}"
        if TEMPLATES.get(self.template) != "chat":
            raise DataError(f"{label}: image prompts need a chat template (data_args.template: "
                            f"chat): the model's template writes its image tokens")
        images = record_images(item.images, self.image_args, item.id)
        messages = image_messages(item.prompt, len(images), label)
        if self.system_prompt is not None and messages[0]["role"] != "system":
            messages = [{"role": "system",
                         "content": [{"type": "text", "text": self.system_prompt}]}, *messages]
        # The template's text goes through the processor (it expands the image
        # placeholders) with a marker token where each content was; the contents are
        # tokenized as text and spliced in (platform/models/text_tokens.py).
        tokenizer = self.processor.tokenizer
        split = render_pieces(lambda m: self.processor.apply_chat_template(
            m, add_generation_prompt=True, tokenize=False, **self.chat_template_kwargs),
            messages)
        marker = marker_token(tokenizer, split.pieces, avoid=IMAGE_PLACEHOLDERS)
        marker_id = tokenizer.convert_tokens_to_ids(marker)
        text = marker.join(split.pieces)
        contents = [content_ids(tokenizer, c) for c in split.contents]
        encoded = self.processor(text=[text], images=[images] if images else None,
                                 add_special_tokens=False, return_tensors="pt")
        raw = encoded["input_ids"][0].tolist()
        per_token = [k for k, v in encoded.items() if k not in TEXT_KEYS
                     and tuple(getattr(v, "shape", ())[:2]) == (1, len(raw))]
        if per_token:  # it would no longer line up with the spliced ids
            raise DataError(f"{label}: the processor returns {', '.join(per_token)} per "
                            f"token, which image prompts do not handle")
        ids = splice(raw, marker_id, contents)
        engine_ids = splice(list(tokenizer(text, add_special_tokens=False)["input_ids"]),
                            marker_id, contents)
        return ImagePrompt(ids, engine_ids, images,
                           {k: v for k, v in encoded.items() if k not in TEXT_KEYS})


@dataclass
class ImagePromptSet:
    items: list[ImageItem]  # those that fit prompt_length and whose images load
    lengths: list[int]  # their prompt lengths, image tokens included
    dropped_overlong: int
    skipped_bad: int  # records with a bad image, with bad_images: skip


def encode_image_prompts(items: list[ImageItem], encode: ImagePromptEncoder, prompt_length: int,
                         overlong: Literal["filter", "error"] = "filter",
                         bad_images: Literal["error", "skip"] = "error",
                         role: str = "actor_train") -> ImagePromptSet:
    """The items whose prompt, image tokens included, fits `prompt_length`: an overlong one
    is dropped and counted, or an error (`overlong`), as text prompts are; a record with a
    bad image is an error, or skipped and counted (`bad_images`)."""
    kept, lengths, overlong_count, bad = [], [], 0, 0
    for item in items:
        try:
            length = len(encode(item).prompt_ids)
        except BadImageError as e:
            if bad_images == "error":
                raise BadImageError(f"{role}: {e}") from None
            bad += 1
            log.warning("%s: skipped (bad image): %s", role, e)
            continue
        if length > prompt_length:
            if overlong == "error":
                raise DataError(f"{role}: record {item.id} has {length} prompt tokens with its "
                                f"images, more than prompt_length={prompt_length}")
            overlong_count += 1
            continue
        kept.append(item)
        lengths.append(length)
    if overlong_count:
        log.warning("%s: dropped %d of %d image prompts longer than prompt_length=%d tokens",
                    role, overlong_count, len(items), prompt_length)
    if not kept:
        raise DataError(f"{role}: no usable image prompt ({overlong_count} overlong, {bad} with "
                        f"bad images)")
    return ImagePromptSet(kept, lengths, overlong_count, bad)
