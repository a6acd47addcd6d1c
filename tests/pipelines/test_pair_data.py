"""Preference pairs from files (pipelines/dpo/pair_data.py): layout and bad data.

Each bad record is one line naming file:line, or dropped and counted as configured;
nothing is trained silently.
"""

from __future__ import annotations

import json
import logging

import pytest

from flywheel.config.schema import DataArgs
from flywheel.pipelines.data.prompt_data import DataError
from flywheel.pipelines.dpo.pair_data import encode_pairs, load_pairs
from flywheel.workers.strategies.hf_model import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    return load_tokenizer(tiny_model_path)


def write(tmp_path, rows, name="pairs.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return DataArgs(file_name=[str(path)]), path


def pairs(tmp_path, tokenizer, rows, length=64, **kw):
    args, _ = write(tmp_path, rows)
    return encode_pairs(load_pairs(args, "actor_train", "chosen", "rejected"), args,
                        "actor_train", tokenizer, length, **kw)


def test_a_pair_is_two_rows_prompt_then_reply_eos(tmp_path, tokenizer):
    rows = [{"prompt": "2*3=", "chosen": "6", "rejected": "7"},
            {"prompt": "4*5=", "chosen": [{"role": "assistant", "content": "20"}],
             "rejected": "21!"}]
    enc = pairs(tmp_path, tokenizer, rows)
    batch = enc.batch([1, 0], tokenizer.pad_token_id)
    texts = [tokenizer.decode(batch.input_ids[i][batch.response_mask[i].bool()])
             for i in range(4)]
    eos = tokenizer.eos_token
    assert texts == ["20" + eos, "21!" + eos, "6" + eos, "7" + eos]  # chosen, rejected, ...
    prompt = batch.input_ids[0][(batch.attention_mask[0] - batch.response_mask[0]).bool()]
    assert prompt.tolist() == enc.prompts[1]
    assert enc.counts.metrics("dpo") == {"dpo/pairs_dropped_overlong": 0.0,
                                         "dpo/pairs_truncated": 0.0,
                                         "dpo/pairs_dropped_equal": 0.0}


def test_a_record_missing_a_response_names_its_line(tmp_path, tokenizer):
    args, path = write(tmp_path, [{"prompt": "a", "chosen": "b", "rejected": "c"},
                                  {"prompt": "a", "chosen": "b"}])
    with pytest.raises(DataError, match=rf"^{path}:2: no column 'rejected'"):
        load_pairs(args, "actor_train", "chosen", "rejected")
    args, path = write(tmp_path, [{"prompt": "a", "chosen": 3, "rejected": "c"}])
    with pytest.raises(DataError, match=rf"^{path}:1: column 'chosen' is neither text"):
        load_pairs(args, "actor_train", "chosen", "rejected")


def test_equal_responses_are_refused_or_dropped_and_counted(tmp_path, tokenizer, caplog):
    rows = [{"prompt": "a", "chosen": "b", "rejected": "c"},
            {"prompt": "a", "chosen": "same", "rejected": "same"}]
    with pytest.raises(DataError, match=r"pairs.jsonl:2: chosen and rejected are the same"):
        pairs(tmp_path, tokenizer, rows)
    with caplog.at_level(logging.WARNING):
        enc = pairs(tmp_path, tokenizer, rows, equal="drop")
    assert len(enc) == 1 and enc.counts.dropped_equal == 1
    assert "pairs.jsonl:2" in caplog.text


def test_an_overlong_pair_is_dropped_truncated_or_refused(tmp_path, tokenizer):
    # the tiny tokenizer is char-level: bos + 3 prompt tokens, replies of 2 and 9 (+ eos)
    rows = [{"prompt": "abc", "chosen": "ok", "rejected": "ab"},
            {"prompt": "abc", "chosen": "ok", "rejected": "very long"}]
    enc = pairs(tmp_path, tokenizer, rows, length=8)  # 4 + 10 > 8: dropped
    assert len(enc) == 1 and enc.counts.dropped_overlong == 1
    enc = pairs(tmp_path, tokenizer, rows, length=8, overlong="truncate")
    assert len(enc) == 2 and enc.counts.truncated == 1
    assert len(enc.rejected[1]) == 4 and len(enc.chosen[1]) == 3  # cut to 8 - 4
    with pytest.raises(DataError, match=r"pairs.jsonl:2: a pair of 14 tokens .* "
                                        r"sequence_length=8 \(overlong_pairs: error\)"):
        pairs(tmp_path, tokenizer, rows, length=8, overlong="error")
    with pytest.raises(DataError, match="no pair is left"):
        pairs(tmp_path, tokenizer, rows, length=4)


def test_a_margin_column_is_read_and_a_bad_one_names_its_line(tmp_path):
    args, path = write(tmp_path, [{"prompt": "a", "chosen": "b", "rejected": "c", "m": 2},
                                  {"prompt": "a", "chosen": "b", "rejected": "c", "m": "x"}])
    with pytest.raises(DataError, match=rf"^{path}:2: column 'm' \(margin_key\) is a number"):
        load_pairs(args, "actor_train", "chosen", "rejected", "m")
    args, _ = write(tmp_path, [{"prompt": "a", "chosen": "b", "rejected": "c", "m": 2}])
    assert load_pairs(args, "actor_train", "chosen", "rejected", "m")[0].margin == 2.0
