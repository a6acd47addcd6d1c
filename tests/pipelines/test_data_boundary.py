"""Issue 53 items 1 (the data part) and 6, issue 54 item 3: a data line over
data_args.max_record_bytes is dropped (counted, one line naming file:line) or refused, read
in bounded memory (peak RSS of a child process that reads a 64 MB line); invalid UTF-8
names file and line, a deeply nested YAML its file, a bad pipeline_state.json its file and
key; chat records of the wrong shape are refused naming file:line and the field."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from flywheel.config.schema import DataArgs, PipelineConfig
from flywheel.pipelines.config import load_config
from flywheel.pipelines.data.data_files import DataFileError
from flywheel.pipelines.data.prompt_data import load_records
from flywheel.pipelines.data.records import DataError
from flywheel.pipelines.run.resume_rules import schedule_steps
from flywheel.pipelines.sft.run import load_sft_records
from flywheel.platform.checkpoint_state import CheckpointStateError, read_pipeline_state
from flywheel.platform.config.errors import ConfigError

from .rows_in_child import read_rows_in_child

BIG = 64 << 20  # bytes of the oversize line


def row(prompt, answer="1") -> str:
    return json.dumps({"prompt": prompt, "answer": answer}) + "\n"


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "big.jsonl"
    with open(path, "w") as f:
        f.write(row("1+1="))
        f.write('{"prompt": "' + "x" * BIG + '", "answer": "1"}\n')
        f.write(row("2+2="))
    return path


def test_an_oversize_line_is_read_past_in_bounded_memory(big_file):
    result = read_rows_in_child(big_file)
    wheres = [where for where, _ in result["rows"]]
    assert wheres == [f"{big_file}:1", f"{big_file}:2", f"{big_file}:3"]
    assert result["rows"][1][1] > BIG  # its size, counted without holding it
    assert result["grew_mb"] < 16, result  # the line is 64 MB


def test_an_oversize_record_is_dropped_and_counted_or_refused(big_file, caplog):
    args = DataArgs(file_name=[str(big_file)], max_record_bytes=1 << 20)
    oversize: list[str] = []
    with caplog.at_level(logging.WARNING):
        records = load_records(args, "actor_train", oversize)
    assert [r.prompt for r in records] == ["1+1=", "2+2="]
    assert oversize == [f"{big_file}:2"]
    [line] = [r.getMessage() for r in caplog.records if "max_record_bytes" in r.getMessage()]
    assert f"dropped 1 record(s) over data_args.max_record_bytes=1048576 (first at " \
           f"{big_file}:2)" in line
    args.overlong_prompts = "error"
    with pytest.raises(DataFileError, match=rf"{big_file}:2: a record of \d+ bytes, more than "
                                            r"actor_train.data_args.max_record_bytes"):
        load_records(args, "actor_train")
    with pytest.raises(DataFileError, match=rf"{big_file}:2"):
        load_sft_records(args, "actor_train")


def test_invalid_utf8_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(row("ok").encode() + b'{"prompt": "\xff\xfe", "answer": "2"}\n')
    with pytest.raises(DataFileError, match=rf"^{path}:2: not UTF-8 text \(byte 12 "):
        load_records(DataArgs(file_name=[str(path)]), "actor_train")


def test_a_10000_level_nested_yaml_names_its_file(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("pipeline_type: rlvr\nseed: " + "[" * 10000 + "]" * 10000 + "\n")
    with pytest.raises(ConfigError, match=rf"^{path}: nested too deeply"):
        load_config(path)


@pytest.mark.parametrize("text, expected", [
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"step": 2, "next_batch": 2, "kl_coef": 0.1, "buffer": [], "schedule_steps": "10"}',
     "key 'schedule_steps': expected int or null >= 0, got \"10\""),
    ('{"step": true, "next_batch": 2, "kl_coef": 0.1, "buffer": []}',
     "key 'step': expected int >= 0, got true"),
    ('{"step": 2, "kl_coef": 0.1, "buffer": []}', "key 'next_batch' missing")])
def test_a_bad_pipeline_state_names_its_file_and_key(tmp_path, text, expected):
    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    (checkpoint / "pipeline_state.json").write_text(text)
    with pytest.raises(CheckpointStateError) as info:
        schedule_steps(PipelineConfig(max_steps=4), checkpoint)  # resume's first read
    assert str(info.value).startswith(f"{checkpoint / 'pipeline_state.json'}: ")
    assert expected in str(info.value)


def test_a_good_pipeline_state_reads_back(tmp_path):
    (tmp_path / "pipeline_state.json").write_text(json.dumps(
        {"step": 2, "next_batch": 2, "kl_coef": 0.1, "buffer": [], "schedule_steps": 10,
         "version": 2, "next_seq": 64, "saved_at": 1.5}))
    assert read_pipeline_state(tmp_path)["schedule_steps"] == 10


@pytest.mark.parametrize("messages, expected", [
    ([{"role": "hacker", "content": "hi"}], "message 0 role: 'hacker' is not one of system"),
    ([{"role": "user", "content": 123}], "message 0 content: expected text"),
    ([{"role": "system", "content": "s"}, {"role": "user", "content": {"a": 1}}],
     "message 1 content: expected text"),
    ([{"role": "user", "content": [{"type": "text", "text": 5}]}],
     "message 0 content: expected text")])
def test_chat_records_of_the_wrong_shape_are_refused_naming_file_line_and_field(
        tmp_path, messages, expected):
    path = tmp_path / "chat.jsonl"
    path.write_text(row([{"role": "user", "content": "fine"}]) + row(messages))
    args = DataArgs(file_name=[str(path)], template="chat")
    with pytest.raises(DataError, match=rf"^{path}:2: {expected}"):
        load_records(args, "actor_train")
    with pytest.raises(DataError, match=rf"^{path}:2: {expected}"):
        load_sft_records(args, "actor_train")


def test_a_prompt_too_big_for_prompt_length_is_dropped_without_tokenizing(tmp_path):
    from flywheel.pipelines.data.prompt_data import load_prompts
    from flywheel.platform.models.char_tokenizer import make_char_tokenizer

    tokenizer = make_char_tokenizer()
    seen: list[int] = []
    encode = tokenizer.encode

    def counting_encode(text, **kwargs):
        seen.append(len(text))
        return encode(text, **kwargs)

    tokenizer.encode = counting_encode
    path = tmp_path / "long.jsonl"
    path.write_text(row("1+1=") + row("y" * (10 << 20)))  # a 10 MB prompt, under the limit
    args = DataArgs(file_name=[str(path)], max_record_bytes=32 << 20)
    prompts = load_prompts(args, "actor_train", tokenizer, prompt_length=64)
    assert [r.prompt for r in prompts.records] == ["1+1="] and prompts.dropped_overlong == 1
    assert max(seen) < 100  # the 10 MB text never reached the tokenizer
    args.overlong_prompts = "error"
    with pytest.raises(DataError, match=r"record .* has 10485760 bytes of prompt text, more "
                                        r"than prompt_length=64 tokens can hold"):
        load_prompts(args, "actor_train", tokenizer, prompt_length=64)
