"""Images of prompt records: a record's image column in, checked RGB PIL images out, each
within ROLL's pixel bounds.

What it owns: reading ROLL's image layout (an `images` column holding one image or a list;
each a file path under `image_folder`, raw bytes, a `data:image/...;base64,` URI, a
`{"bytes": ..., "path": ...}` struct as HF datasets write to parquet, or an in-memory PIL
image), refusing bad ones with a one-line `BadImageError` naming the record and the image,
and resizing to `image_min_pixels <= width * height <= image_max_pixels` (aspect ratio
kept). What it does not: prompts, tokens and model processors (image_prompts.py).

Why the bounds act on the image and not on the processor's settings: the trainer's processor
and vLLM's (which reads the processor config from the model folder) then get the same PIL
image and give the same image tokens. ROLL resizes the image before both sides for the
same reason. A processor may still resize further by its own config (Qwen2-VL rounds to
multiples of 28, Idefics3 tiles by its longest edge); both sides do that alike.

Bad images (every one is an error naming `record <id>, image <i>`):
- a path with no `image_folder` set, or one that resolves (symlinks followed) outside it;
- a missing file, bytes PIL cannot identify, truncated data (PIL fails on load);
- a decompression bomb: more than PIL's `Image.MAX_IMAGE_PIXELS` pixels (read from the
  header, before the pixels are decoded);
- an http(s) URL: workers have no network; download the images into `image_folder`.

How it plugs in: `data_args.image_key`, `image_folder`, `image_min_pixels`,
`image_max_pixels` (ROLL's names where ROLL has them; the converter maps them) make the
`ImageArgs`; `parse_record` keeps the image column as JSON strings (records.py
`json_images`: paths, bytes as data URIs) and image_prompts.py decodes them here when a
prompt is encoded (at load, for prompt_length, and for each batch).
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from flywheel.pipelines.data.records import DataError

URL_PREFIXES = ("http://", "https://")
DATA_URI_PREFIX = "data:image/"


class BadImageError(DataError):
    """An image that cannot be used; the message names the record and the image."""


@dataclass(frozen=True)
class ImageArgs:
    """Where a record's images come from and how large they may be (data_args' VL keys)."""

    # Column holding the record's image or list of images (ROLL's VL data: "images").
    image_key: str = "images"
    # Folder every image path is relative to and must resolve inside; unset: paths refused.
    image_folder: str | None = None
    # Pixel bounds (width * height) an image is resized into, aspect ratio kept; unset:
    # no bound on that side. ROLL's image_max_pixels / image_min_pixels.
    image_max_pixels: int | None = None
    image_min_pixels: int | None = None

    def __post_init__(self) -> None:
        for name in ("image_max_pixels", "image_min_pixels"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"data_args.{name}: must be a positive pixel count, got {value}")
        if (self.image_max_pixels is not None and self.image_min_pixels is not None
                and self.image_min_pixels > self.image_max_pixels):
            raise ValueError(f"data_args.image_min_pixels ({self.image_min_pixels}) is more than "
                             f"image_max_pixels ({self.image_max_pixels})")


def image_sources(value: Any) -> list[Any]:
    """The column's value as a list of single images (None, "" and [] mean no image)."""
    if value is None or (isinstance(value, (str, bytes, list, tuple)) and len(value) == 0):
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def record_images(value: Any, args: ImageArgs, record_id: str) -> list[Image.Image]:
    """Every image of one record's image column, loaded, checked and bounded."""
    return [load_image(source, args, f"record {record_id}, image {i}")
            for i, source in enumerate(image_sources(value))]


def load_image(source: Any, args: ImageArgs, label: str) -> Image.Image:
    """One image source -> an RGB PIL image within the pixel bounds; BadImageError naming
    `label` when it cannot be used."""
    if isinstance(source, Image.Image):
        image = source
        check_pixel_count(image.width, image.height, label)
    else:
        image = decode(source_bytes_or_path(source, args, label), label)
    image = image.convert("RGB")
    size = bounded_size(image.width, image.height, args.image_min_pixels, args.image_max_pixels)
    if size != image.size:
        image = image.resize(size, Image.Resampling.BICUBIC)
    return image


def source_bytes_or_path(source: Any, args: ImageArgs, label: str) -> bytes | Path:
    """Bytes to decode, or a checked path inside image_folder."""
    if isinstance(source, dict):  # HF datasets' Image struct: {"bytes": ..., "path": ...}
        if source.get("bytes"):
            return bytes(source["bytes"])
        if source.get("path"):
            return source_bytes_or_path(source["path"], args, label)
        raise BadImageError(f"{label}: an image struct with neither bytes nor path")
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if not isinstance(source, str):
        raise BadImageError(f"{label}: expected a path, bytes or an image, got "
                            f"{type(source).__name__}")
    if source.startswith(DATA_URI_PREFIX):
        try:
            return base64.b64decode(source.split(",", 1)[1], validate=True)
        except (IndexError, binascii.Error):
            raise BadImageError(f"{label}: a data URI that is not base64 image data") from None
    if source.startswith(URL_PREFIXES):
        raise BadImageError(f"{label}: {source[:80]} is a URL; workers do not fetch images "
                            f"(download them into data_args.image_folder)")
    return checked_path(source, args, label)


def checked_path(name: str, args: ImageArgs, label: str) -> Path:
    """`name` resolved under image_folder (symlinks followed), which it may not leave."""
    if args.image_folder is None:
        raise BadImageError(f"{label}: {name!r} is a file path but data_args.image_folder is "
                            f"not set (the folder image paths are read from)")
    folder = Path(args.image_folder).resolve()
    path = (folder / name).resolve()
    if not path.is_relative_to(folder):
        raise BadImageError(f"{label}: {name!r} resolves outside image_folder {folder}")
    if not path.is_file():
        raise BadImageError(f"{label}: image file not found: {path}")
    return path


def decode(data: bytes | Path, label: str) -> Image.Image:
    """PIL decode, after checking the header's size against PIL's decompression-bomb limit."""
    what = data.name if isinstance(data, Path) else f"{len(data)} bytes"
    try:
        image = Image.open(data if isinstance(data, Path) else io.BytesIO(data))
    except Image.DecompressionBombError as e:  # PIL's own check: over twice its limit
        raise BadImageError(f"{label} ({what}): decompression bomb refused ({e})") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        raise BadImageError(f"{label} ({what}): not an image PIL can read") from None
    check_pixel_count(image.width, image.height, f"{label} ({what})")
    try:
        image.load()
    except (OSError, ValueError, SyntaxError) as e:  # truncated or corrupt pixel data
        raise BadImageError(f"{label} ({what}): image data is corrupt ({e})") from None
    return image


def check_pixel_count(width: int, height: int, label: str) -> None:
    """PIL only warns between its limit and twice it; here the limit itself is refused."""
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        raise BadImageError(f"{label}: {width}x{height} pixels is more than PIL's "
                            f"decompression-bomb limit Image.MAX_IMAGE_PIXELS={limit}")


def bounded_size(width: int, height: int, min_pixels: int | None,
                 max_pixels: int | None) -> tuple[int, int]:
    """(width, height) scaled by one factor so that min_pixels <= w * h <= max_pixels
    (rounded down when shrinking, up when growing, so the bound holds); unchanged inside."""
    pixels = width * height
    if max_pixels is not None and pixels > max_pixels:
        scale = math.sqrt(max_pixels / pixels)
        width, height = max(1, math.floor(width * scale)), max(1, math.floor(height * scale))
        while width * height > max_pixels:  # float rounding on the boundary
            width, height = (width - 1, height) if width >= height else (width, height - 1)
    elif min_pixels is not None and pixels < min_pixels:
        scale = math.sqrt(min_pixels / pixels)
        width, height = math.ceil(width * scale), math.ceil(height * scale)
    return width, height
