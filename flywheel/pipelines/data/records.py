"""A prompt record as every prompt source gives it (data files in prompt_data.py,
reasoning-gym tasks in reasoning_gym_data.py), and the error a bad record raises."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

Prompt = str | list[dict[str, Any]]


class DataError(ValueError):
    pass


@dataclass
class PromptRecord:
    id: str
    prompt: Prompt  # text, or chat messages
    answer: str
    tag: str
    # The whole row, every column as read (JSON values), with `id` and `tag` added when the
    # row has no column of that name: what a reward function gets as its `record`
    # (workers/rewards/user_function.py), so tags, ids and extra fields reach it.
    row: dict[str, Any] = field(default_factory=dict)
    # The record's images as JSON values (data_args.image_key's column, issue 29): each a
    # path under image_folder or a `data:image/...;base64,` URI (bytes become one), so a
    # record checkpoints as JSON with its images; decoded by image_files.py. Empty: a text
    # prompt. Not in `row`: rewards get the record without its image data.
    images: list[str] = field(default_factory=list)


def json_row(row: dict) -> dict[str, Any]:
    """`row` with JSON values only (a parquet date or bytes becomes its text): it travels
    to a reward's scoring process as JSON and is checkpointed with its group."""
    return json.loads(json.dumps(row, default=str))


def json_images(value: Any, where: str) -> list[str]:
    """An image column's value (one image or a list: paths, bytes, data URIs, or HF
    datasets' {"bytes", "path"} structs) as JSON strings: paths kept, bytes as base64
    data URIs. Nothing is decoded here (image_files.py checks and decodes)."""
    if value is None or (isinstance(value, (str, bytes, list, tuple)) and len(value) == 0):
        return []
    out = []
    for i, item in enumerate(value if isinstance(value, (list, tuple)) else [value]):
        if isinstance(item, dict):  # bytes win over the path, as image_files reads them
            item = item.get("bytes") or item.get("path")
        if isinstance(item, (bytes, bytearray, memoryview)):
            item = "data:image/*;base64," + base64.b64encode(bytes(item)).decode()
        if not isinstance(item, str) or not item:
            raise DataError(f"{where}: image {i} is neither a path nor image bytes "
                            f"({type(item).__name__})")
        out.append(item)
    return out


# Keys a chat-format image part may hold its image under: transformers' and Qwen-VL's
# {"type": "image", "image" | "url" | "path": ...}, OpenAI's {"type": "image_url",
# "image_url": {"url": ...}}
PART_IMAGE_KEYS = ("image", "url", "path", "image_url")


def images_in_parts(messages: list[dict[str, Any]], where: str
                    ) -> tuple[list[dict[str, Any]], list[str]]:
    """Chat messages whose image parts carry their own image: the messages with each such
    part made a plain {"type": "image"} (where the processor's template puts the image
    tokens), and the images in order, as `json_images` gives them. An http(s) URL is kept
    here and refused by image_files.py when the record loads (workers fetch nothing)."""
    out, images = [], []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            source = next((part[k] for k in PART_IMAGE_KEYS if kind in ("image", "image_url")
                           and part.get(k) is not None), None)
            if source is None:
                parts.append(part)
                continue
            if isinstance(source, dict) and "url" in source:  # OpenAI's {"url": ...}
                source = source["url"]
            images += json_images(source, f"{where}: image part {len(images)}")
            parts.append({"type": "image"})
        out.append({**message, "content": parts})
    return out, images
