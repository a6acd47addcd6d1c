"""`.json` data files holding one JSON array (ROLL's, TRL's DPO and SFT data): every element a
row, named `file.json[i]`, read one element at a time; JSON lines in a `.json` file still
read as before; malformed arrays refused naming the file and the element."""

from __future__ import annotations

import io
import json

import pytest

from flywheel.config.schema import DataArgs
from flywheel.pipelines.data import json_array
from flywheel.pipelines.data.data_files import DataFileError, OversizeRow, read_rows
from flywheel.pipelines.data.prompt_data import load_records

from .rows_in_child import read_rows_in_child

# strings holding every byte the scanner treats specially, escaped quotes and backslashes
# at the end of a string, nesting, unicode
ROWS = [
    {"prompt": "1+1=", "answer": "2"},
    {"prompt": 'a "quoted", [bracketed] {braced} text\\', "answer": "3",
     "meta": {"tags": ["x", "]", "}"], "n": [1, [2, 3]]}},
    {"prompt": "ünïcode ✓ \u2028", "answer": "4"},
    {"prompt": 'an escaped quote before closers: "}], {"', "answer": "5"},
]


@pytest.mark.parametrize("indent", [None, 2])
def test_a_json_array_file_reads_as_its_elements(tmp_path, indent):
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps(ROWS, indent=indent, ensure_ascii=False), encoding="utf-8")
    assert list(read_rows(path)) == [(f"{path}[{i}]", r) for i, r in enumerate(ROWS)]
    records = load_records(DataArgs(file_name=[str(path)]), "actor_train")
    assert [r.prompt for r in records] == [r["prompt"] for r in ROWS]


def test_elements_split_across_reads_scan_the_same(monkeypatch):
    # a 7-byte read size puts every boundary (an escape, a quote, a bracket) between reads
    monkeypatch.setattr(json_array, "CHUNK", 7)
    raw = json.dumps(ROWS).encode()
    got = [json.loads(e) for _, e in json_array.array_elements(io.BytesIO(raw), None)]
    assert got == ROWS


def test_a_json_lines_file_named_json_still_reads_a_line_a_row(tmp_path):
    path = tmp_path / "lines.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert [w for w, _ in read_rows(path)] == [f"{path}:{i + 1}" for i in range(len(ROWS))]


def test_an_element_over_the_limit_is_skipped_unparsed_in_bounded_memory(tmp_path):
    big = 64 << 20
    path = tmp_path / "big.json"
    with open(path, "w") as f:
        f.write('[{"prompt": "1+1=", "answer": "2"},\n {"prompt": "' + "x" * big +
                '", "answer": "1"},\n {"prompt": "2+2=", "answer": "4"}]')
    result = read_rows_in_child(path)
    assert [w for w, _ in result["rows"]] == [f"{path}[{i}]" for i in range(3)]
    assert result["rows"][1][1] > big and result["rows"][2][1]["answer"] == "4"
    assert result["grew_mb"] < 16, result  # the element is 64 MB
    assert isinstance(next(iter(read_rows(path, 16)))[1], OversizeRow)


@pytest.mark.parametrize("text, message", [
    ('[{"a": 1} {"b": 2}]', "[0]: not JSON (Extra data"),  # no comma: one element
    ('[{"a": 1}, {"b": 2}}]', "[1]: not JSON"),
    ('[{"a": 1}, {"b": ', "[1]: the file ends inside this element"),
    ('[{"a": 1}, 3]', "[1]: expected a JSON object, got int"),
    ('[{"a": 1}, {"b": tru}]', "[1]: not JSON"),
    ('[{"a": 1}] trailing', ": text after the array's closing ']'"),
    ('{"a": 1}\n[1]', ":2: expected a JSON object, got list"),  # JSON lines: as before
])
def test_a_malformed_array_names_the_file_and_element(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(DataFileError) as info:
        list(read_rows(path))
    assert str(info.value).startswith(str(path)) and message in str(info.value)
