"""Images in the data path (issue 29 item 1): data_args' image keys reach `load_prompts`;
records keep their images as JSON (paths, bytes as data URIs); the model's own processor
renders them and prompt_length counts the image tokens; bad images are refused or skipped
and counted; a text-only model is refused; ROLL's image keys convert. A tiny random
Idefics3 (built once per session), images drawn with PIL, JSONL and parquet files."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from PIL import Image

from flywheel.config.schema import DataArgs
from flywheel.pipelines.config import convert_roll, load_config_dict
from flywheel.pipelines.data.prompt_data import load_prompts
from flywheel.pipelines.data.qwen_vl_pieces import load_vl_processor
from flywheel.pipelines.data.records import DataError
from flywheel.platform.models.tiny_idefics3 import IMAGE_SEQ_LEN

PER_IMAGE = IMAGE_SEQ_LEN + 3  # <fake><global-img> 4 x <image> <fake>


def png(colour=(200, 30, 30), size=(40, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def processor(tiny_idefics3_path):
    return load_vl_processor(tiny_idefics3_path)


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def args(files: list[str], **kw) -> DataArgs:
    return DataArgs(file_name=files, template="chat", **kw)


def test_records_keep_their_images_and_prompt_length_counts_image_tokens(tmp_path, processor):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "red.png").write_bytes(png())
    rows = [{"id": "a", "prompt": "what colour?", "answer": "red", "images": ["red.png"]},
            {"id": "b", "prompt": "<image> or <image>?", "answer": "blue",
             "images": ["red.png", "red.png"]},
            {"id": "t", "prompt": "no image here", "answer": "x"}]
    data = args([write_jsonl(tmp_path / "d.jsonl", rows)], image_folder=str(tmp_path / "img"))
    loaded = load_prompts(data, "actor_train", processor.tokenizer, 200, lambda: processor)
    assert [r.id for r in loaded.records] == ["a", "b", "t"]
    assert loaded.records[0].images == ["red.png"] and loaded.records[2].images == []
    assert "images" not in loaded.records[0].row  # rewards get the record without them
    encoded = {r.id: loaded.image_encoder(item(r)) for r in loaded.records}
    image_id = processor.tokenizer.convert_tokens_to_ids("<image>")
    assert encoded["b"].prompt_ids.count(image_id) == 2 * IMAGE_SEQ_LEN
    assert len(encoded["a"].engine_ids) == len(encoded["a"].prompt_ids) - PER_IMAGE + 1
    assert set(encoded["a"].features) == {"pixel_values", "pixel_attention_mask"}
    # prompt_length counts the image tokens: "a" fits as text, not with its image
    text_length = len(encoded["a"].engine_ids) - 1
    cut = load_prompts(data, "actor_train", processor.tokenizer,
                       text_length + PER_IMAGE - 1, lambda: processor)
    assert "a" not in [r.id for r in cut.records] and cut.dropped_overlong >= 1
    with pytest.raises(DataError, match=r"record a has \d+ prompt tokens with its images"):
        load_prompts(DataArgs(**{**data.__dict__, "overlong_prompts": "error"}),
                     "actor_train", processor.tokenizer, text_length + PER_IMAGE - 1,
                     lambda: processor)


def item(record):
    from flywheel.pipelines.data.image_prompts import ImageItem

    return ImageItem(record.id, record.prompt, record.images)


def test_parquet_image_bytes_become_data_uris_and_bounds_resize(tmp_path, processor):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"prompt": ["count"], "answer": ["1"],
                      "pics": [[{"bytes": png(size=(200, 100)), "path": None}]]})
    pq.write_table(table, tmp_path / "d.parquet")
    data = args([str(tmp_path / "d.parquet")], image_key="pics", image_max_pixels=50 * 25)
    loaded = load_prompts(data, "actor_train", processor.tokenizer, 200, lambda: processor)
    (record,) = loaded.records
    assert record.images[0].startswith("data:image/") and "pics" not in record.row
    json.dumps(record.images)  # checkpoints as JSON
    (image,) = loaded.image_encoder(item(record)).images
    assert image.size == (50, 25)


def test_bad_images_are_refused_naming_the_record_or_skipped_and_counted(tmp_path, processor):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "ok.png").write_bytes(png())
    (tmp_path / "img" / "bad.png").write_bytes(b"not a png")
    rows = [{"id": "good", "prompt": "p", "answer": "a", "images": "ok.png"},
            {"id": "broken", "prompt": "p", "answer": "a", "images": "bad.png"},
            {"id": "gone", "prompt": "p", "answer": "a", "images": "missing.png"},
            {"id": "escape", "prompt": "p", "answer": "a", "images": "../img/../../x.png"}]
    files = [write_jsonl(tmp_path / "d.jsonl", rows)]
    folder = str(tmp_path / "img")
    with pytest.raises(DataError, match=r"^actor_train: record broken, image 0 .*not an "
                                        r"image PIL can read"):
        load_prompts(args(files, image_folder=folder), "actor_train", processor.tokenizer,
                     200, lambda: processor)
    loaded = load_prompts(args(files, image_folder=folder, bad_images="skip"), "actor_train",
                          processor.tokenizer, 200, lambda: processor)
    assert [r.id for r in loaded.records] == ["good"] and loaded.skipped_bad_images == 3


def test_images_inside_chat_message_parts_are_the_records_images(tmp_path, processor):
    """transformers'/Qwen-VL's {"type": "image", "image": ...} and OpenAI's
    {"type": "image_url", "image_url": {"url": ...}} parts: their images, in order, where
    the parts stand; a URL is refused when the record loads (workers fetch nothing)."""
    import base64

    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "red.png").write_bytes(png())
    uri = "data:image/png;base64," + base64.b64encode(png((20, 20, 220))).decode()
    parts = [{"type": "text", "text": "first"}, {"type": "image", "image": "red.png"},
             {"type": "text", "text": "then"}, {"type": "image_url", "image_url": {"url": uri}}]
    rows = [{"id": "m", "prompt": [{"role": "user", "content": parts}], "answer": "red"}]
    data = args([write_jsonl(tmp_path / "d.jsonl", rows)], image_folder=str(tmp_path / "img"),
                messages="prompt")
    (record,) = load_prompts(data, "actor_train", processor.tokenizer, 200,
                             lambda: processor).records
    assert record.images == ["red.png", uri]
    assert [p["type"] for p in record.prompt[0]["content"]] == ["text", "image", "text", "image"]
    assert uri not in json.dumps(record.row)  # rewards get the messages without the image
    encoded = load_prompts(data, "actor_train", processor.tokenizer, 200,
                           lambda: processor).image_encoder(item(record))
    text = processor.tokenizer.decode(encoded.engine_ids)
    assert text.index("first") < text.index("<image>") < text.index("then")
    assert [i.getpixel((0, 0)) for i in encoded.images] == [(200, 30, 30), (20, 20, 220)]
    parts[1]["image"] = "https://example.com/red.png"
    data.file_name = [write_jsonl(tmp_path / "u.jsonl", rows)]
    with pytest.raises(DataError, match=r"record m, image 0.*is a URL; workers do not fetch"):
        load_prompts(data, "actor_train", processor.tokenizer, 200, lambda: processor)
    rows[0]["images"] = ["red.png"]
    data.file_name = [write_jsonl(tmp_path / "b.jsonl", rows)]
    with pytest.raises(DataError, match=r"images both in column 'images' and inside"):
        load_prompts(data, "actor_train", processor.tokenizer, 200, lambda: processor)


def test_a_text_only_model_is_refused_with_the_reason(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    rows = [{"id": "r1", "prompt": "p", "answer": "a",
             "images": "data:image/png;base64,AAAA"}]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    with pytest.raises(DataError, match="record r1 has images .* no image processor: a "
                                        "text-only model takes no images"):
        load_prompts(args([write_jsonl(tmp_path / "d.jsonl", rows)]), "actor_train",
                     tokenizer, 200, lambda: load_vl_processor(tiny_model_path))


def test_text_data_keeps_the_tokenizer_path(tmp_path, processor):
    """No image column: no processor is loaded, prompts encode as before."""
    rows = [{"id": "t", "prompt": "hi", "answer": "x"}]
    loaded = load_prompts(args([write_jsonl(tmp_path / "d.jsonl", rows)]), "actor_train",
                          processor.tokenizer, 200, processor=None)
    assert loaded.image_encoder is None and loaded.records[0].images == []


def test_rolls_image_keys_convert_to_flywheel_keys_that_act(tmp_path):
    roll = Path(__file__).parents[1] / "data" / "configs" / "roll" / "mechanics" / "roll_rlvr.yaml"
    data = yaml.safe_load(roll.read_text())
    data.pop("hydra", None)
    data["actor_train"]["data_args"].update(image_max_pixels=1048576, image_min_pixels=3136,
                                            image_folder="./img", video_fps=2.0)
    data["actor_train"]["data_args"]["template"] = "qwen2_5"
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(data))
    conversion = convert_roll(tmp_path / "r.yaml")
    written = conversion.data["actor_train"]["data_args"]
    assert (written["image_max_pixels"], written["image_min_pixels"], written["image_folder"]) \
        == (1048576, 3136, "./img")
    assert "video_fps" not in written
    assert any(d.startswith("actor_train.data_args.video_fps") for d in conversion.dropped)
    cfg = load_config_dict(conversion.data)  # hf_infer + hf_train: the keys act
    assert cfg.actor_train.data_args.image_max_pixels == 1048576


def test_sft_refuses_image_records_instead_of_training_on_their_text(tmp_path):
    from flywheel.pipelines.sft.run import load_sft_records

    rows = [{"prompt": "p", "answer": "a", "images": ["x.png"]}]
    with pytest.raises(DataError, match="column 'images' holds images; SFT trains on text"):
        load_sft_records(args([write_jsonl(tmp_path / "d.jsonl", rows)]), "actor_train")
