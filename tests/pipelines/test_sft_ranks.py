"""SFT on deepspeed_train: ROLL's SFT file, CPU-sized, converted and run as two ZeRO ranks.

The converted copy of ROLL's qwen3-30BA3B SFT file (tests/data/configs/roll/pipelines/
sft_fsdp2_tiny.yaml: the same keys, the tiny model, two ranks) trains 3 steps (one epoch of
12 records, 4 per step) as Ray ranks on the shared update loop, and its losses are those
of the same records on hf_train in this process (the loop is the same one: the global
token count is all-reduced, so two ranks of 2 rows are one rank of 4). The in-suite checks
are the pieces in process: ROLL's query column, the sequence_length bound, the epochs'
step count, and the validation forward's padding to the ranks.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from flywheel.pipelines.config import convert_roll, load_config_dict
from flywheel.pipelines.data.prompt_data import DataError
from flywheel.pipelines.roles.handles import Pending
from flywheel.pipelines.run.launch import run
from flywheel.pipelines.sft.run import SFTRecord, encode_sft_records, parse_sft_record, sft_steps
from flywheel.pipelines.sft.trainers import OnRanks
from flywheel.workers.batch import pack_sequences

PIPELINES = Path(__file__).parents[1] / "data" / "configs" / "roll" / "pipelines"
SFT_TINY = PIPELINES / "sft_fsdp2_tiny.yaml"


def converted(tmp_path: Path, **overrides) -> dict:
    data = convert_roll(SFT_TINY).data
    records = str(PIPELINES / "alpaca_tiny.jsonl")
    data["actor_train"]["data_args"]["file_name"] = [records]
    data["validation"]["data_args"]["file_name"] = [records]
    data["output_dir"] = str(tmp_path / "run")
    data["tracking"] = {"backends": ["jsonl"]}
    data.pop("track_with", None)
    for key, value in overrides.items():
        data[key] = value
    return data


def test_roll_query_column_follows_the_prompt_after_a_newline():
    row = {"instruction": "add", "input": "12+34=", "output": "046"}
    assert parse_sft_record(row, "f/1", "instruction", "output", False, "input") == (
        SFTRecord("1", "add\n12+34=", "046"))
    empty = parse_sft_record({**row, "input": ""}, "f:2", "instruction", "output", False,
                             "input")
    assert empty.prompt == "add"  # ROLL: the prompt alone when the query is empty
    assert parse_sft_record(row, "f:3", "instruction", "output", False).prompt == "add"
    with pytest.raises(DataError, match="follows a text prompt"):
        parse_sft_record({**row, "instruction": [{"role": "user", "content": "x"}]}, "f:4",
                         "instruction", "output", True, "input")


def test_sequence_length_bounds_prompt_and_response_together(tmp_path):
    cfg = load_config_dict(converted(tmp_path))
    from flywheel.platform.models.builtin import resolve_pretrain
    from flywheel.workers.strategies.hf_model import load_tokenizer

    tokenizer = load_tokenizer(resolve_pretrain(cfg.pretrain))
    records = [SFTRecord("a", "add\n12+34=", "046"), SFTRecord("b", "add" * 6, "x" * 12)]
    args = cfg.actor_train.data_args
    kept = encode_sft_records(records, args, "actor_train", tokenizer, 24, 24, 24)
    assert [r.id for r in kept.records] == ["a"]  # b: 19 + 13 tokens > 24, each part < 24
    assert len(encode_sft_records(records, args, "actor_train", tokenizer, 24, 24,
                                  None).records) == 2
    strict = dataclasses.replace(args, overlong_prompts="error")
    with pytest.raises(DataError, match="sequence_length=24"):
        encode_sft_records(records, strict, "actor_train", tokenizer, 24, 24, 24)


def test_epochs_count_whole_steps_of_every_rank(tmp_path):
    cfg = load_config_dict(converted(tmp_path))
    assert sft_steps(cfg, 12) == 3 and sft_steps(cfg, 15) == 3  # a partial step is left out
    with pytest.raises(DataError, match="make no step"):
        sft_steps(cfg, 3)
    two = dataclasses.replace(cfg, actor_train=dataclasses.replace(
        cfg.actor_train, training_args=dataclasses.replace(
            cfg.actor_train.training_args, num_train_epochs=2.0)))
    assert sft_steps(two, 12) == 6


class TwoRanks:
    """A stand-in for the two-rank TrainRole: only its sharding of a forward."""

    world_size = 2

    def forward_logprobs(self, batch):
        shards = batch.shard(2)  # raises unless the rows split evenly
        return Pending(None, [], lambda _: torch.cat([s.input_ids.float() for s in shards]))


def test_a_validation_forward_is_padded_to_the_ranks_and_cut_back(monkeypatch):
    monkeypatch.setattr(Pending, "result", lambda self: self.combine([]))
    batch = pack_sequences([[1, 2], [1, 3], [1, 4]], [[5], [6], [7]], 0)
    trainer = OnRanks(cfg=None, role=TwoRanks(), placement=None, model_path="",
                      owns_ray=False)
    out = trainer.logprobs(batch)
    assert torch.equal(out, batch.input_ids.float())  # 3 rows back, in order


@pytest.mark.slow
@pytest.mark.long  # two ZeRO ranks through Ray: ~20 s and more on 2 cores
def test_roll_sft_copy_runs_three_steps_on_two_zero_ranks_as_hf_train_does(tmp_path, capsys):
    ranks_dir = run(load_config_dict(converted(tmp_path / "ranks")))
    said = capsys.readouterr().out
    assert "actor_train: 2 deepspeed_train ranks" in said
    rows = [json.loads(line) for line in (ranks_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert 0 <= rows[-1]["val/accuracy"] <= 1 and rows[-1]["val/loss"] > 0
    assert (ranks_dir / "checkpoint-3" / "config.json").exists()
    # the same records on one in-process hf_train rank of 4 rows: the same losses
    hf = converted(tmp_path / "hf")
    hf["actor_train"] = {**hf["actor_train"], "strategy_args": {"strategy_name": "hf_train"},
                         "training_args": {**hf["actor_train"]["training_args"],
                                           "per_device_train_batch_size": 4}}
    hf["actor_train"].pop("device_mapping")
    hf_dir = run(load_config_dict(hf))
    hf_rows = [json.loads(line) for line in (hf_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["sft/loss"] for r in rows] == pytest.approx([r["sft/loss"] for r in hf_rows],
                                                         rel=1e-4)
    assert rows[-1]["val/loss"] == pytest.approx(hf_rows[-1]["val/loss"], rel=1e-4)
    # the checkpoint holds the ranks' trained weights (gathered), hf_train's within rounding
    ranks_weights = load_file(ranks_dir / "checkpoint-3" / "model.safetensors")
    hf_weights = load_file(hf_dir / "checkpoint-3" / "model.safetensors")
    assert ranks_weights.keys() == hf_weights.keys()
    assert max(float((ranks_weights[k] - hf_weights[k]).abs().max()) for k in hf_weights) < 1e-4
