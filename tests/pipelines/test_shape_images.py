"""Synthetic shape images (pipelines/data/shape_images.py): answers that match the pixels,
determinism by seed, ROLL's data layout, and the box helpers on hand-made boxes."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from flywheel.pipelines.data import shape_images as si


def centre(box):
    """A pixel inside every shape drawn in `box`: the middle column, two thirds down (a
    triangle's apex is at the top middle, its base at the bottom)."""
    return ((box[0] + box[2]) // 2, (box[1] + box[3] * 2) // 3)


@pytest.fixture(scope="module")
def items():
    return si.make_items("train", 40, seed=3)


def test_answers_match_the_drawn_image(items):
    assert {i.tag for i in items} == set(si.TASKS) and len(items) == 40 * len(si.TASKS)
    for item in items:
        image = item.image()
        assert image.size == (si.SIZE, si.SIZE) and image.mode == "RGB"
        for shape in item.shapes:  # every shape is visible in its own colour
            assert image.getpixel(centre(shape.box)) == si.COLOURS[shape.colour], item
        boxes = [s.box for s in item.shapes]
        assert all(a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
                   for n, a in enumerate(boxes) for b in boxes[n + 1:]), item  # no overlap
        kinds = [s.kind for s in item.shapes]
        asked = [s for s in item.shapes
                 if f"the {s.kind}?" in item.question or f"the {s.kind} " in item.question]
        if item.tag == "count":
            assert item.answer == str(len(item.shapes)) and 1 <= len(item.shapes) <= 4
        elif item.tag == "colour":
            assert len(set(kinds)) == len(kinds) and len(asked) == 1
            assert image.getpixel(centre(asked[0].box)) == si.COLOURS[item.answer]
        elif item.tag == "position":
            x = (asked[0].box[0] + asked[0].box[2]) / 2
            assert item.answer == ("left" if x < si.SIZE / 2 else "right")
            other = next(s for s in item.shapes if s is not asked[0])
            assert (other.box[0] >= si.SIZE // 2) == (item.answer == "left")
        else:
            assert len(item.shapes) == 1 and item.question.endswith(
                f"the {kinds[0]} in JSON.")
            assert si.parse_box_answer(item.answer) == tuple(
                round(v * 1000 / si.SIZE) for v in item.shapes[0].box)
    counts = {n: sum(i.answer == str(n) for i in items if i.tag == "count") for n in range(1, 5)}
    assert all(counts.values()), counts  # every count occurs


def test_same_seed_same_items_other_split_or_seed_differs(items):
    again = si.make_items("train", 40, seed=3)
    assert again == items
    assert [a.image().tobytes() for a in again[:8]] == [i.image().tobytes() for i in items[:8]]
    assert si.make_items("val", 40, seed=3) != items and si.make_items("train", 40, seed=4) != items


def test_writer_lays_out_roll_vl_data(tmp_path):
    paths = si.write_shape_dataset(tmp_path / "shapes", train_per_task=3, val_per_task=2)
    train = [json.loads(line) for line in paths["train"].read_text().splitlines()]
    val = [json.loads(line) for line in paths["val"].read_text().splitlines()]
    assert len(train) == 3 * len(si.TASKS) and len(val) == 2 * len(si.TASKS)
    assert not {r["id"] for r in train} & {r["id"] for r in val}
    for row, item in zip(val, si.make_items("val", 2)):
        assert row["prompt"] == "<image>" + item.question and row["answer"] == item.answer
        assert row["reward_model"] == {"ground_truth": item.answer}
        assert row["tag"] == row["data_source"] == item.tag
        stored = Image.open(paths["image_folder"] / row["images"][0])
        assert stored.tobytes() == item.image().tobytes()  # PNG: lossless
    # the default held-out set is large enough for the RL claim (>= 300 exact-answer images)
    assert si.write_shape_dataset.__defaults__[1] * 3 >= 300


def test_box_answer_parses_and_iou_on_hand_made_boxes():
    shape = si.Shape("circle", "red", (8, 16, 24, 32))
    text = si.box_answer(shape)
    assert text == '<answer>[{"bbox_2d": [125, 250, 375, 500], "label": "circle"}]</answer>'
    assert si.parse_box_answer(text) == (125, 250, 375, 500)
    assert si.parse_box_answer('[{"bbox_2d": [1, 2, 3, 4]}]') == (1, 2, 3, 4)
    for bad in ("<answer>[]</answer>", "<answer>[{'bbox_2d': [1,2]}]</answer>", "3",
                '<answer>[{"bbox_2d": [5, 5, 1, 1]}]</answer>'):
        assert si.parse_box_answer(bad) is None, bad
    assert si.box_iou((0, 0, 10, 10), (0, 0, 10, 10)) == 1.0
    assert si.box_iou((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(50 / 150)
    assert si.box_iou((0, 0, 10, 10), (20, 20, 30, 30)) == 0.0
    assert si.box_iou((0, 0, 10, 10), None) == 0.0
