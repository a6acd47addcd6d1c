"""Synthetic shape images with questions and exact answers: the data of the built-in tiny VL
model (`builtin://tiny-idefics3-shapes`) and of its RLVR examples.

Why synthetic: a VL model that learns on this CPU in minutes needs images it can read with
a tiny vision tower, answers a string comparison can score, and no download. Every item
is drawn from a seeded `random.Random`, so the same seed gives the same images and answers
on every machine (PIL draws integer pixels the same everywhere).

Images are 64x64 RGB: the tiny Idefics3's image processor is set to 64 px tiles
(`max_image_size` 64, no splitting), so a 64x64 image is exactly one tile, 64 patches of
8 px, 16 image tokens after the 2x2 pixel shuffle; a larger image would only be scaled
down to it, a smaller one scaled up. Shapes are 14-22 px on a plain light background, so
each covers several patches and no two overlap.

Tasks (the record's `tag`; the answer is the exact string a correct reply is):
- `count`: 1-4 shapes of any kind and colour: "How many shapes are there?" -> "3";
- `colour`: 1 or 2 shapes of different kinds and colours: "What colour is the circle?" ->
  "red" (with two, the model must tell the kinds apart);
- `position`: two shapes of different kinds, one in each half: "Is the square on the left
  or the right?" -> "left";
- `grounding`: one shape; its box in ROLL's detection answer form (the form ROLL's
  DetectionRewardWorker parses, `<answer>` around a JSON list of `bbox_2d` + `label`), in
  0-1000 coordinates relative to the image size, as the Orsta data ROLL's VL grounding
  configs train on writes them (and as ROLL's verifier reads them for every processor
  other than Qwen2.5-VL's). `box_answer` makes that text; `shape_box` is the pixel box.

The writer lays out ROLL's VL data: `<folder>/images/<split>/<n>.png` and
`<folder>/<split>.jsonl` with `id`, `images` (paths relative to `image_folder`, which is
`<folder>/images`), `prompt` (ROLL's `<image>` mark first, then the question), `answer`
(flywheel's answer column), `reward_model.ground_truth` (ROLL's), `tag` and `data_source`
(ROLL's VL tag column). Not here: processors, prompt tokens, rewards.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw

SIZE = 64  # image side, px: one 64 px tile of the tiny Idefics3 (module doc)
BACKGROUND = (235, 235, 235)
COLOURS = {"red": (210, 40, 40), "green": (40, 160, 60), "blue": (40, 80, 210),
           "yellow": (225, 195, 30)}
KINDS = ("circle", "square", "triangle")
TASKS = ("count", "colour", "position", "grounding")
MAX_COUNT = 4
MIN_SIDE, MAX_SIDE = 14, 22  # shape box side, px
IMAGE_MARK = "<image>"  # ROLL's prompt_image_token
QUESTIONS = {
    "count": "How many shapes are there? Answer with a number.",
    "colour": "What colour is the {kind}? Answer with one word.",
    "position": "Is the {kind} on the left or the right? Answer with one word.",
    "grounding": "Give the bounding box of the {kind} in JSON.",
}
# Seed streams of the splits: the warm start's dev checks draw from a third stream, apart
# from the written train and val sets.
SPLIT_STREAMS = {"train": 0, "val": 1, "dev": 2}


@dataclass(frozen=True)
class Shape:
    kind: str  # one of KINDS
    colour: str  # a key of COLOURS
    box: tuple[int, int, int, int]  # x1, y1, x2, y2 in pixels, inclusive-exclusive


@dataclass(frozen=True)
class ShapeItem:
    """One question about one image."""

    id: str
    tag: str  # the task, one of TASKS
    question: str
    answer: str  # the exact correct reply
    shapes: tuple[Shape, ...]

    def image(self) -> Image.Image:
        return draw_shapes(self.shapes)

    def prompt(self) -> str:
        """ROLL's layout: the image mark where the image goes, then the question."""
        return IMAGE_MARK + self.question


def draw_shapes(shapes: tuple[Shape, ...] | list[Shape]) -> Image.Image:
    image = Image.new("RGB", (SIZE, SIZE), BACKGROUND)
    pen = ImageDraw.Draw(image)
    for shape in shapes:
        x1, y1, x2, y2 = shape.box
        fill = COLOURS[shape.colour]
        if shape.kind == "circle":
            pen.ellipse((x1, y1, x2 - 1, y2 - 1), fill=fill)
        elif shape.kind == "square":
            pen.rectangle((x1, y1, x2 - 1, y2 - 1), fill=fill)
        else:
            pen.polygon([((x1 + x2 - 1) / 2, y1), (x1, y2 - 1), (x2 - 1, y2 - 1)], fill=fill)
    return image


def place(rng: random.Random, taken: list[tuple[int, int, int, int]],
          x_range: tuple[int, int] = (0, SIZE)) -> tuple[int, int, int, int] | None:
    """A square box of random side inside `x_range` (left edge to right edge), 2 px clear of
    every box in `taken`; None if 100 tries found no room."""
    for _ in range(100):
        side = rng.randint(MIN_SIDE, MAX_SIDE)
        x1 = rng.randint(x_range[0], x_range[1] - side)
        y1 = rng.randint(0, SIZE - side)
        box = (x1, y1, x1 + side, y1 + side)
        if all(box[2] + 2 <= t[0] or t[2] + 2 <= box[0] or box[3] + 2 <= t[1]
               or t[3] + 2 <= box[1] for t in taken):
            return box
    return None


def layout(rng: random.Random, n: int) -> list[tuple[int, int, int, int]]:
    """`n` boxes clear of each other (a crowded start is redrawn from scratch)."""
    for _ in range(100):
        boxes: list[tuple[int, int, int, int]] = []
        while len(boxes) < n and (box := place(rng, boxes)) is not None:
            boxes.append(box)
        if len(boxes) == n:
            return boxes
    raise RuntimeError(f"no layout of {n} shapes found")  # never seen at n <= MAX_COUNT


def make_item(task: str, rng: random.Random, item_id: str) -> ShapeItem:
    """One item of `task`, drawn from `rng` (module doc for what each task asks)."""
    colours = list(COLOURS)
    if task == "count":
        boxes = layout(rng, rng.randint(1, MAX_COUNT))
        shapes = tuple(Shape(rng.choice(KINDS), rng.choice(colours), b) for b in boxes)
        return ShapeItem(item_id, task, QUESTIONS[task], str(len(shapes)), shapes)
    if task == "colour":
        kinds = rng.sample(KINDS, rng.randint(1, 2))
        paints = rng.sample(colours, len(kinds))
        boxes = layout(rng, len(kinds))
        shapes = tuple(Shape(k, c, b) for k, c, b in zip(kinds, paints, boxes))
        asked = rng.choice(shapes)
        return ShapeItem(item_id, task, QUESTIONS[task].format(kind=asked.kind),
                         asked.colour, shapes)
    if task == "position":
        asked_kind, other_kind = rng.sample(KINDS, 2)
        side = rng.choice(("left", "right"))
        halves = {"left": (0, SIZE // 2), "right": (SIZE // 2, SIZE)}
        other_side = "right" if side == "left" else "left"
        first = place(rng, [], halves[side])
        second = place(rng, [], halves[other_side])  # halves never overlap
        paints = rng.sample(colours, 2)
        shapes = (Shape(asked_kind, paints[0], first), Shape(other_kind, paints[1], second))
        return ShapeItem(item_id, task, QUESTIONS[task].format(kind=asked_kind), side,
                         tuple(rng.sample(shapes, 2)))
    if task == "grounding":
        shape = Shape(rng.choice(KINDS), rng.choice(colours), layout(rng, 1)[0])
        return ShapeItem(item_id, task, QUESTIONS[task].format(kind=shape.kind),
                         box_answer(shape), (shape,))
    raise ValueError(f"unknown shape task {task!r}; known: {', '.join(TASKS)}")


def to_thousandths(box: tuple[int, int, int, int]) -> list[int]:
    """A pixel box -> 0-1000 coordinates relative to the image side (rounded)."""
    return [round(v * 1000 / SIZE) for v in box]


def box_answer(shape: Shape) -> str:
    """ROLL's detection answer text for one labelled box (0-1000 coordinates)."""
    boxes = [{"bbox_2d": to_thousandths(shape.box), "label": shape.kind}]
    return f"<answer>{json.dumps(boxes)}</answer>"


def make_items(split: str, per_task: int, seed: int = 0,
               tasks: tuple[str, ...] = TASKS) -> list[ShapeItem]:
    """`per_task` items of each task in `tasks`, interleaved (count, colour, ...), from the
    seed stream of `split` (SPLIT_STREAMS): the same arguments give the same items."""
    rng = random.Random(f"shapes/{seed}/{SPLIT_STREAMS[split]}")
    return [make_item(task, rng, f"{split}-{i * len(tasks) + j:05d}")
            for i in range(per_task) for j, task in enumerate(tasks)]


def record(item: ShapeItem, image_path: str) -> dict:
    """The jsonl row of `item` whose image is at `image_path` (relative to image_folder)."""
    return {"id": item.id, "images": [image_path], "prompt": item.prompt(),
            "answer": item.answer, "reward_model": {"ground_truth": item.answer},
            "tag": item.tag, "data_source": item.tag}


def write_shape_dataset(folder: str | Path, train_per_task: int = 1000,
                        val_per_task: int = 100, seed: int = 0) -> dict[str, Path]:
    """Write train and val sets (images and jsonl, module doc) under `folder`; the paths
    of `train.jsonl`, `val.jsonl` and the image folder."""
    folder = Path(folder)
    out = {"image_folder": folder / "images"}
    for split, per_task in (("train", train_per_task), ("val", val_per_task)):
        (folder / "images" / split).mkdir(parents=True, exist_ok=True)
        rows = []
        for item in make_items(split, per_task, seed):
            relative = f"{split}/{item.id}.png"
            item.image().save(folder / "images" / relative)
            rows.append(json.dumps(record(item, relative)))
        out[split] = folder / f"{split}.jsonl"
        out[split].write_text("\n".join(rows) + "\n")
    return out


def parse_box_answer(text: str) -> tuple[float, float, float, float] | None:
    """The first box of a reply in `box_answer`'s form (`<answer>` optional), or None when
    it does not parse: the warm start's grounding yardstick, not ROLL's detection reward
    (which also scores labels, several boxes and the answer tags)."""
    body = text.split("<answer>", 1)[-1].split("</answer>", 1)[0].strip()
    try:
        boxes = json.loads(body)
        x1, y1, x2, y2 = (float(v) for v in boxes[0]["bbox_2d"])
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    return (x1, y1, x2, y2) if x1 <= x2 and y1 <= y2 else None


def box_iou(a: tuple[float, ...], b: tuple[float, ...] | None) -> float:
    """Intersection over union of two x1, y1, x2, y2 boxes (0 when `b` is None)."""
    if b is None:
        return 0.0
    inter = (max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
             * max(0.0, min(a[3], b[3]) - max(a[1], b[1])))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0
