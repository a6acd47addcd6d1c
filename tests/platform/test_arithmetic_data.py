"""The synthetic addition dataset: determinism, disjoint splits, correct answers, files."""

from __future__ import annotations

import re

import pytest

from flywheel.pipelines.data.arithmetic_data import (
    NUM_PAIRS,
    NUM_VAL_PAIRS,
    ensure_arithmetic_files,
    format_answer,
    format_prompt,
    make_arithmetic_dataset,
    read_jsonl,
    split_pairs,
    write_jsonl,
)


def test_same_seed_same_records_other_seed_other_order():
    a = make_arithmetic_dataset(200, seed=3, split="train")
    assert a == make_arithmetic_dataset(200, seed=3, split="train")
    b = make_arithmetic_dataset(200, seed=4, split="train")
    assert a != b


def test_splits_are_disjoint_whatever_the_seeds_and_cover_all_pairs():
    train = {r["prompt"] for r in make_arithmetic_dataset(None, seed=1, split="train")}
    val = {r["prompt"] for r in make_arithmetic_dataset(None, seed=2, split="val")}
    assert len(val) == NUM_VAL_PAIRS
    assert len(train) == NUM_PAIRS - NUM_VAL_PAIRS
    assert not train & val
    assert len(train | val) == NUM_PAIRS


def test_partition_and_order_are_pinned():
    # Golden values: if these move, every cached warm start and recorded accuracy is stale.
    assert split_pairs("val")[:3] == [(0, 4), (0, 16), (0, 30)]
    assert [r["id"] for r in make_arithmetic_dataset(2, seed=0, split="val")] == [
        "add-44-99",
        "add-63-46",
    ]


def test_answers_are_correct_and_fixed_width():
    records = make_arithmetic_dataset(None, seed=0, split="val")
    ids = [r["id"] for r in records]
    assert len(set(ids)) == len(ids)
    for r in records:
        m = re.fullmatch(r"(\d\d)\+(\d\d)=", r["prompt"])
        assert m, r
        assert re.fullmatch(r"\d{3}", r["answer"]), r
        assert int(r["answer"]) == int(m.group(1)) + int(m.group(2))
    assert format_prompt(7, 5) == "07+05="
    assert format_answer(7, 5) == "012"
    assert format_answer(99, 99) == "198"


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="split"):
        make_arithmetic_dataset(10, split="test")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n must be"):
        make_arithmetic_dataset(NUM_VAL_PAIRS + 1, split="val")


def test_write_read_jsonl_round_trip_leaves_no_temp_files(tmp_path):
    records = make_arithmetic_dataset(50, seed=0, split="val")
    path = write_jsonl(tmp_path / "sub" / "v.jsonl", records)
    assert read_jsonl(path) == records
    assert [p.name for p in path.parent.iterdir()] == ["v.jsonl"]


def test_ensure_files_writes_full_splits_and_repairs_changed_files(tmp_path):
    train_path, val_path = ensure_arithmetic_files(tmp_path)
    assert len(read_jsonl(train_path)) == NUM_PAIRS - NUM_VAL_PAIRS
    assert read_jsonl(val_path) == make_arithmetic_dataset(None, seed=0, split="val")
    mtime = val_path.stat().st_mtime_ns
    assert ensure_arithmetic_files(tmp_path) == (train_path, val_path)
    assert val_path.stat().st_mtime_ns == mtime  # unchanged content: not rewritten
    val_path.write_text("corrupt\n")
    ensure_arithmetic_files(tmp_path)
    assert read_jsonl(val_path) == make_arithmetic_dataset(None, seed=0, split="val")
