"""Qwen2-VL image prompts without torchvision (issue 29): `load_vl_processor` gives a saved
Qwen2.5-VL folder its `QwenVLPieces`, whose `<|image_pad|>` count follows the image's patch
grid (so ROLL's pixel bounds change it), through image_prompts.py's encoder. Char tokenizer
and transformers' PIL image processor, in a temp folder: no model weights."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from flywheel.pipelines.data.image_files import ImageArgs
from flywheel.pipelines.data.image_prompts import ImageItem, ImagePromptEncoder
from flywheel.pipelines.data.qwen_vl_pieces import QwenVLPieces, load_vl_processor

VISION = "<|vision_start|><|image_pad|><|vision_end|>"
TEMPLATE = ("{% for m in messages %}{{ m.role }}: {% for p in m.content %}"
            "{% if p.type == 'image' %}" + VISION + "{% else %}{{ p.text }}{% endif %}"
            "{% endfor %}{{ '\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}assistant: {% endif %}")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from transformers import Qwen2_5_VLConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    from flywheel.platform.models.char_tokenizer import make_char_tokenizer
    out = tmp_path_factory.mktemp("qwen2_5_vl")
    tokenizer = make_char_tokenizer()
    tokenizer.split_special_tokens = False
    tokenizer.add_special_tokens({"additional_special_tokens": [
        "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]})
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(out)
    Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=112 * 112).save_pretrained(out)
    Qwen2_5_VLConfig().save_pretrained(out)  # config only: the model type
    return out


def png(size=(100, 80)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_pads_follow_the_patch_grid_and_the_pixel_bounds(folder):
    processor = load_vl_processor(folder)
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    full = ImagePromptEncoder(processor)(ImageItem("a", "colour?", [png()]))
    # 100x80 -> 112x84 (multiples of 28): 8x6 patches of 14 px, 2x2 merged -> 12 pads
    assert full.features["image_grid_thw"].tolist() == [[1, 6, 8]]
    assert full.prompt_ids.count(pad) == 12 and full.engine_ids.count(pad) == 1
    assert full.features["pixel_values"].shape == (48, 3 * 2 * 14 * 14)
    bounded = ImagePromptEncoder(processor, ImageArgs(image_max_pixels=56 * 56))(
        ImageItem("b", "colour?", [png()]))
    # 100x80 bounded to 62x50 -> 56x56: 4x4 patches -> 4 pads
    assert bounded.images[0].size == (62, 50)
    assert bounded.features["image_grid_thw"].tolist() == [[1, 4, 4]]
    assert bounded.prompt_ids.count(pad) == 4
    assert len(full.prompt_ids) - len(bounded.prompt_ids) == 8


def test_two_images_expand_in_order_and_counts_must_agree(folder):
    processor = load_vl_processor(folder)
    assert isinstance(processor, QwenVLPieces)
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    two = ImagePromptEncoder(processor)(
        ImageItem("c", "<image> then <image>", [png(), png((28, 28))]))
    first, second = two.features["image_grid_thw"].tolist()
    assert (first, second) == ([1, 6, 8], [1, 2, 2])
    runs = "".join("P" if t == pad else " " for t in two.prompt_ids).split()
    assert [len(run) for run in runs] == [12, 1]
    with pytest.raises(ValueError, match=r"1 image\(s\) but 2 <\|image_pad\|> marks"):
        processor(text=[VISION + VISION], images=[[Image.new("RGB", (28, 28))]])
