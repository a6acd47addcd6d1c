"""`platform convert --from roll` knows which of ROLL's pipelines a file is for.

ROLL picks the pipeline by its launcher script, so flywheel recognises it from the file's
roles and keys (interop/roll/pipelines, the rule in docs migrating-from-roll.md), or takes
`--pipeline`. The fixtures are ROLL-shaped files: two RLVR / agentic files from ROLL's
examples, and small copies of the shapes of its SFT, DPO and distillation examples
(tests/data/configs/roll/pipelines/). A key that the file's ROLL pipeline reads is never
reported as one ROLL ignores; a key of a pipeline flywheel does not run yet is reported as
needing it, and the file is not converted. ROLL's SFT files (fsdp2, Megatron) convert onto
deepspeed_train, each backend key accounted for."""

import dataclasses
from pathlib import Path

import pytest
import yaml

from flywheel import cli
from flywheel.config.derived import data_parallel_size
from flywheel.interop.roll.pipelines import PIPELINES as ROLL_PIPELINES
from flywheel.interop.roll.report import format_report
from flywheel.pipelines.config import convert_roll, load_config_dict
from flywheel.pipelines.sft.run import rows_per_step, sft_steps
from flywheel.pipelines.sft.trainers import on_ranks

ROLL = Path(__file__).parents[1] / "data" / "configs" / "roll"
PIPELINES = ROLL / "pipelines"
SFT_TINY = PIPELINES / "sft_fsdp2_tiny.yaml"


@pytest.mark.parametrize(("path", "pipeline", "because"), [
    (ROLL / "rlvr_config_async.yaml", "rlvr", "none of the other pipelines"),
    (ROLL / "mechanics" / "agentic" / "frozen_lake.yaml", "agentic", "custom_envs"),
    (SFT_TINY, "sft", "sft_train role"),
    (PIPELINES / "sft_megatron.yaml", "sft", "sft_train role"),
    (PIPELINES / "dpo_megatron.yaml", "dpo", "chosen_key"),
    (PIPELINES / "distill_megatron.yaml", "distill", "student, student_pretrain"),
    (PIPELINES / "onpolicy_distill.yaml", "opd", "student_train, student_infer, teacher"),
])
def test_each_pipeline_is_recognised_by_its_roles_and_keys(path, pipeline, because):
    conversion = convert_roll(path)
    assert conversion.roll_pipeline == pipeline
    assert because in conversion.recognised_by
    assert format_report(conversion).splitlines()[0] == (
        f"{path}: ROLL {pipeline} config (recognised: {conversion.recognised_by})")


@pytest.mark.parametrize(("path", "pipeline", "its_keys"), [
    (PIPELINES / "dpo_megatron.yaml", "dpo",
     ["ipo", "beta", "label_smoothing", "chosen_key", "rejected_key"]),
    (PIPELINES / "distill_megatron.yaml", "distill",
     ["student_pretrain", "teacher_pretrain", "kd_objective", "question_key", "student",
      "teacher"]),
])
def test_a_pipeline_flywheel_does_not_run_is_named_and_its_keys_need_it(path, pipeline,
                                                                         its_keys, monkeypatch):
    # every ROLL pipeline runs now: the seam a next one lands through, shown on one made
    # not to run (runs_as None, as each was before its issue landed)
    monkeypatch.setitem(ROLL_PIPELINES, pipeline,
                        dataclasses.replace(ROLL_PIPELINES[pipeline], runs_as=None))
    conversion = convert_roll(path)
    needs = {line.split(":")[0]: line for line in conversion.needs_pipeline}
    assert set(its_keys) <= set(needs)
    assert all(line.endswith(f"needs pipeline {pipeline}") for line in needs.values())
    assert not set(its_keys) & {k.split(".")[0] for k in conversion.ignored}
    assert conversion.missing[0].startswith(f"pipeline {pipeline}: ROLL's ")
    report = format_report(conversion)
    ignored = report.split("ROLL ignores these keys too")[1] if "ROLL ignores" in report else ""
    assert not any(f"  {key}" in ignored.split("mapped:")[0] for key in its_keys)
    assert f"needs pipeline {pipeline}" in report


def test_the_same_keys_in_a_pipeline_that_does_not_read_them_are_ignored_by_roll(tmp_path):
    """ROLL's RLVR pipeline reads neither SFT's column keys nor DPO's beta: there they are
    keys ROLL ignores too; `--pipeline rlvr` on the DPO file says the same of its keys."""
    data = yaml.safe_load((ROLL / "rlvr_config_async.yaml").read_text())
    source = tmp_path / "rlvr.yaml"
    source.write_text(yaml.safe_dump({**data, "prompt_key": "instruction", "beta": 0.1}))
    conversion = convert_roll(source)
    assert conversion.roll_pipeline == "rlvr"
    assert {"prompt_key", "beta"} <= set(conversion.ignored)
    forced = convert_roll(PIPELINES / "dpo_megatron.yaml", pipeline="rlvr")
    assert forced.recognised_by == "--pipeline" and not forced.needs_pipeline
    assert {"ipo", "beta", "chosen_key"} <= set(forced.ignored)
    assert "(as --pipeline says)" in format_report(forced).splitlines()[0]


def test_the_cli_takes_the_pipeline_and_refuses_an_unknown_one(tmp_path, capsys):
    out = tmp_path / "out.yaml"
    assert cli.main(["convert", "--from", "roll", "--pipeline", "sft", str(SFT_TINY), "-o",
                     str(out)]) == 0
    assert "ROLL sft config (as --pipeline says)" in capsys.readouterr().out
    assert yaml.safe_load(out.read_text())["pipeline_type"] == "sft"
    with pytest.raises(SystemExit):
        cli.main(["convert", "--from", "roll", "--pipeline", "ppo", str(SFT_TINY)])
    assert "invalid choice: 'ppo'" in capsys.readouterr().err


def test_roll_sft_files_convert_onto_deepspeed_and_validate():
    """fsdp2 (each strategy_config key dropped with its reason) and Megatron (its layout
    keys dropped, the global batch kept) both become deepspeed_train; ROLL's column keys
    become data_args columns, its epochs stay epochs."""
    fsdp2 = convert_roll(SFT_TINY)
    assert not fsdp2.missing and not fsdp2.typos and not fsdp2.ignored
    train = fsdp2.data["actor_train"]
    assert train["strategy_args"] == {"strategy_name": "deepspeed_train"}
    assert train["data_args"]["prompt"] == "instruction"
    assert train["data_args"]["query"] == "input"
    assert train["data_args"]["response"] == "output"
    assert train["training_args"]["num_train_epochs"] == 1
    assert fsdp2.data["validation"]["data_args"]["query"] == "input"
    for key in ("fsdp_size", "param_dtype", "reduce_dtype", "offload_policy",
                "reshard_after_forward", "wrap_policy"):
        assert any(d.startswith(f"actor_train.strategy_args.strategy_config.{key}:")
                   for d in fsdp2.dropped), key
    assert "max_steps" not in fsdp2.data and "val_batch_size" not in fsdp2.data
    assert "actor_infer" not in fsdp2.data
    megatron = convert_roll(PIPELINES / "sft_megatron.yaml")
    assert not megatron.missing and not megatron.typos
    train = megatron.data["actor_train"]
    assert train["strategy_args"]["strategy_name"] == "deepspeed_train"
    # 8 devices / (tp 2 x pp 2 x cp 2) = 1 Megatron replica of 2 x 16: 8 ZeRO ranks of 2 x 2
    assert (train["training_args"]["per_device_train_batch_size"],
            train["training_args"]["gradient_accumulation_steps"]) == (2, 2)
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                "context_parallel_size", "sequence_parallel", "use_distributed_optimizer"):
        assert any(f"strategy_config.{key}:" in d for d in megatron.dropped), key


def test_the_cpu_copy_converts_to_two_zero_ranks_and_three_steps():
    """The CPU-sized copy of ROLL's qwen3-30BA3B SFT file: two deepspeed_train ranks (Ray
    workers), 12 records of 2 x 1 per rank per step: one epoch is 3 steps."""
    cfg = load_config_dict(convert_roll(SFT_TINY).data)
    assert cfg.pipeline_type == "sft" and on_ranks(cfg)
    assert data_parallel_size(cfg.actor_train) == 2 and rows_per_step(cfg) == 4
    assert sft_steps(cfg, 12) == 3
    assert cfg.sequence_length == cfg.prompt_length == cfg.response_length == 24
