"""Writes the shape-image data of examples/rlvr_tiny_vl_shapes.yaml,
examples/rlvr_tiny_vl_colour.yaml and examples/rlvr_tiny_vl_grounding.yaml (run from the
repo root: `python examples/data/vl_shapes.py`; the PNG files and JSONL it writes are
committed, ~1.0 MB).

The items are flywheel/pipelines/data/shape_images.py's, from the same seed streams as the
warm start of `builtin://tiny-idefics3-shapes`: the validation items are the first ones of
its held-out `val` stream (so step 0 of a run reproduces warm_start.json's figures), the
training items the first ones of its `train` stream. Three sets, each trained and validated
on its own tasks:
- `exact`: count, colour and position, 200 train and 100 val items per task (300 held-out
  images);
- `colour`: the colour task alone, 600 train and 300 val items: the task whose warm start
  RL can move (vision_language.md: at step 0 the right colour is often among 8 samples
  while greedy misses it), with 300 held-out images of its own; its first 200 train and
  100 val items are the `exact` set's colour items (the same files);
- `grounding`: box answers, scored by the `detection` reward, 200 train and 100 val items.
Images: `vl_shapes/images/<split>/<id>.png`, paths in the JSONL relative to
`vl_shapes/images` (the examples' `image_folder`).
"""

import json
from pathlib import Path

from flywheel.pipelines.data.shape_images import make_items, record

# set -> (tasks, items per task of the train split, of the val split)
SETS = {"exact": (("count", "colour", "position"), 200, 100),
        "colour": (("colour",), 600, 300),
        "grounding": (("grounding",), 200, 100)}


def main() -> None:
    root = Path(__file__).parent / "vl_shapes"
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        most = max(sets[1 if split == "train" else 2] for sets in SETS.values())
        items = make_items(split, most)  # every task's stream, so the sets share items
        for name, (tasks, train_n, val_n) in SETS.items():
            wanted = train_n if split == "train" else val_n
            lines = []
            for task in tasks:
                for item in [i for i in items if i.tag == task][:wanted]:
                    relative = f"{split}/{item.id}.png"
                    if not (root / "images" / relative).exists():
                        item.image().save(root / "images" / relative, optimize=True)
                    lines.append((item.id, json.dumps(record(item, relative))))
            lines.sort()  # the stream's order: tasks interleaved, as make_items draws them
            (root / f"{name}_{split}.jsonl").write_text(
                "\n".join(line for _, line in lines) + "\n")


if __name__ == "__main__":
    main()
