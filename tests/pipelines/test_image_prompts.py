"""Image prompts (issue 29, item 1): images placed in chat messages as ROLL's VL data places
them, encoded by the model's own processor (transformers' Idefics3 processor, PIL backend,
built in memory from the char tokenizer: no model, no files), prompt_length counting the
image tokens, and overlong or bad-image records filtered, skipped or refused by choice."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from flywheel.pipelines.data.image_files import BadImageError, ImageArgs
from flywheel.pipelines.data.image_prompts import (
    ImageItem,
    ImagePromptEncoder,
    encode_image_prompts,
    image_messages,
)
from flywheel.pipelines.data.records import DataError

IMAGE_SEQ_LEN = 4  # <image> tokens per image (64 px image, 16 px patches, pixel shuffle 2)
# one image = <fake_token_around_image><global-img> 4 x <image> <fake_token_around_image>
TOKENS_PER_IMAGE = IMAGE_SEQ_LEN + 3
# A ChatML-like template that writes part-list contents, as VL chat templates do.
TEMPLATE = ("{% for m in messages %}{{ m.role }}: {% for p in m.content %}"
            "{% if p.type == 'image' %}<image>{% else %}{{ p.text }}{% endif %}{% endfor %}"
            "{{ '\\n' }}"
            "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")


@pytest.fixture(scope="module")
def processor():
    from transformers import Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    from flywheel.platform.models.char_tokenizer import make_char_tokenizer
    tokenizer = make_char_tokenizer()
    tokenizer.split_special_tokens = False  # the image tokens must stay whole
    tokenizer.add_special_tokens({"additional_special_tokens": [
        "<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]})
    image_processor = Idefics3ImageProcessorPil(
        size={"longest_edge": 64}, max_image_size={"longest_edge": 64}, do_image_splitting=False)
    return Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer,
                             image_seq_len=IMAGE_SEQ_LEN, chat_template=TEMPLATE)


def png(colour=(200, 30, 30), size=(40, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def test_images_go_where_the_prompt_marks_them_or_first():
    marked = image_messages("left <image> right <image>", 2, "record a")
    assert marked == [{"role": "user", "content": [
        {"type": "text", "text": "left "}, {"type": "image"}, {"type": "text", "text": " right "},
        {"type": "image"}]}]
    unmarked = image_messages([{"role": "system", "content": "be brief"},
                               {"role": "user", "content": "what colour?"}], 1, "record a")
    assert unmarked[1]["content"] == [{"type": "image"}, {"type": "text", "text": "what colour?"}]
    assert unmarked[0]["content"] == [{"type": "text", "text": "be brief"}]
    parts = [{"type": "image"}, {"type": "text", "text": "count"}]
    assert image_messages([{"role": "user", "content": parts}], 1, "r")[0]["content"] == parts
    with pytest.raises(BadImageError, match=r"record b: the prompt marks 1 image\(s\) .* has 2"):
        image_messages("one <image> only", 2, "record b")


def test_the_processor_expands_each_image_and_length_counts_it(processor):
    encode = ImagePromptEncoder(processor, system_prompt="sys")
    text_only = encode(ImageItem("t", "what colour?", None))
    one = encode(ImageItem("a", "what colour?", [png()]))
    two = encode(ImageItem("b", "<image> or <image>: which is red?", [png(), png((0, 0, 255))]))
    image_id = processor.tokenizer.convert_tokens_to_ids("<image>")
    assert one.prompt_ids.count(image_id) == IMAGE_SEQ_LEN
    assert two.prompt_ids.count(image_id) == 2 * IMAGE_SEQ_LEN
    assert len(one.prompt_ids) == len(text_only.prompt_ids) + TOKENS_PER_IMAGE
    # the ids are the processor's own for the template's text: system prompt first
    text = processor.apply_chat_template(
        [{"role": "system", "content": [{"type": "text", "text": "sys"}]},
         {"role": "user",
          "content": [{"type": "image"}, {"type": "text", "text": "what colour?"}]}],
        add_generation_prompt=True, tokenize=False)
    assert text.startswith("system: sys\nuser: <image>what colour?\nassistant: ")
    direct = processor(text=[text], images=[[Image.open(io.BytesIO(png()))]],
                       add_special_tokens=False, return_tensors="pt")
    assert one.prompt_ids == direct["input_ids"][0].tolist()
    # the engine's ids: the same text, one placeholder per image (vLLM expands it)
    assert one.engine_ids == processor.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert one.engine_ids.count(image_id) == 1 and two.engine_ids.count(image_id) == 2
    assert len(one.engine_ids) == len(text_only.engine_ids) + 1 == len(text_only.prompt_ids) + 1
    assert one.features["pixel_values"].shape == direct["pixel_values"].shape == (1, 1, 3, 64, 64)
    assert "input_ids" not in one.features and text_only.features == {}
    assert [image.size for image in two.images] == [(40, 30), (40, 30)]


def test_the_native_template_is_refused_for_image_prompts(processor):
    with pytest.raises(DataError, match="record n: image prompts need a chat template"):
        ImagePromptEncoder(processor, template="native")(ImageItem("n", "x", [png()]))


def test_overlong_and_bad_image_records_are_filtered_skipped_or_refused(processor, tmp_path):
    encode = ImagePromptEncoder(processor, ImageArgs(image_folder=str(tmp_path)))
    short, one = ImageItem("s", "hi", None), ImageItem("one", "hi", [png()])
    limit = len(encode(one).prompt_ids)  # the text fits; one image more does not
    bad = ImageItem("bad", "hi", ["missing.png"])
    many = ImageItem("many", "hi<image><image>", [png(), png()])
    kept = encode_image_prompts([short, one, many], encode, limit)
    assert [i.id for i in kept.items] == ["s", "one"] and kept.dropped_overlong == 1
    assert kept.lengths == [len(encode(short).prompt_ids), limit]
    longer = limit + TOKENS_PER_IMAGE
    with pytest.raises(DataError, match=f"actor_train: record many has {longer} prompt "
                                        f"tokens with its images, more than prompt_length"):
        encode_image_prompts([short, many], encode, limit, overlong="error")
    skipped = encode_image_prompts([bad, one], encode, limit, bad_images="skip")
    assert [i.id for i in skipped.items] == ["one"] and skipped.skipped_bad == 1
    with pytest.raises(BadImageError, match="actor_train: record bad, image 0: image file not "
                                            "found"):
        encode_image_prompts([one, bad], encode, limit)
    with pytest.raises(DataError, match=r"no usable image prompt \(0 overlong, 1 with bad"):
        encode_image_prompts([bad], encode, limit, bad_images="skip")
