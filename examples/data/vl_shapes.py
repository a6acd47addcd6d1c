"""Writes the shape-image data of examples/rlvr_tiny_vl_shapes.yaml and
examples/rlvr_tiny_vl_grounding.yaml (run from the repo root: `python
examples/data/vl_shapes.py`; the PNG files and JSONL it writes are committed, ~0.4 MB).

The items are flywheel/pipelines/data/shape_images.py's, from the same seed streams as the
warm start of `builtin://tiny-idefics3-shapes`: the validation items are the first 100 per
task of its held-out `val` stream (so step 0 of a run reproduces warm_start.json's
figures), the training items the first 200 per task of its `train` stream. Each split is
written twice by task: the exact-answer tasks (count, colour, position: 300 held-out
images) and grounding (box answers, scored by the `detection` reward) apart, so each
example trains and validates on its own tasks. Images: `vl_shapes/images/<split>/<id>.png`,
paths in the JSONL relative to `vl_shapes/images` (the examples' `image_folder`).
"""

import json
from pathlib import Path

from flywheel.pipelines.data.shape_images import make_items, record

PER_TASK = {"train": 200, "val": 100}
EXACT_TASKS = ("count", "colour", "position")


def main() -> None:
    root = Path(__file__).parent / "vl_shapes"
    for split, per_task in PER_TASK.items():
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        rows: dict[str, list[str]] = {"exact": [], "grounding": []}
        for item in make_items(split, per_task):
            relative = f"{split}/{item.id}.png"
            item.image().save(root / "images" / relative, optimize=True)
            kind = "exact" if item.tag in EXACT_TASKS else "grounding"
            rows[kind].append(json.dumps(record(item, relative)))
        for kind, lines in rows.items():
            (root / f"{kind}_{split}.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
