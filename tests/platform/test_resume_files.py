"""Resume in place, the file side: which checkpoint, what may change, records cut back."""

from __future__ import annotations

import json

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.loop.sample_ledger import cut_back as ledger_cut_back
from flywheel.pipelines.run.resume_rules import SAFE_KEYS, schedule_steps
from flywheel.platform.checkpoint import (
    PIPELINE_STATE,
    complete_checkpoints,
    prune_checkpoints,
    writing_checkpoint,
)
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.resume import check_changes, cut_back, find_checkpoint


def save(run_dir, step):
    with writing_checkpoint(run_dir, step) as tmp:
        (tmp / "state.json").write_text("{}")


def test_resume_setting_true_false_and_path(tmp_path):
    assert load_config_dict({"resume_from_checkpoint": True}).resume_from_checkpoint == "latest"
    assert load_config_dict({"resume_from_checkpoint": False}).resume_from_checkpoint is None
    run = tmp_path / "runs" / "exp" / "20260101-000000"
    for step in (2, 4):
        save(run, step)
    (run / "checkpoint-6.tmp").mkdir()  # a save killed half-way: never chosen
    assert find_checkpoint("latest", str(run), "exp") == run / "checkpoint-4"
    assert find_checkpoint("latest", None, "exp", tmp_path / "runs") == run / "checkpoint-4"
    assert find_checkpoint(str(run / "checkpoint-2"), None, "exp") == run / "checkpoint-2"
    with pytest.raises(FileNotFoundError, match="no run under"):
        find_checkpoint("latest", None, "other", tmp_path / "runs")


def test_save_total_limit_keeps_the_newest(tmp_path):
    for step in (1, 2, 3, 4):
        save(tmp_path, step)
    (tmp_path / "checkpoint-5.tmp").mkdir()
    prune_checkpoints(tmp_path, 2)
    assert [s for s, _ in complete_checkpoints(tmp_path)] == [3, 4]
    assert not (tmp_path / "checkpoint-5.tmp").exists()


def test_changed_config_safe_keys_pass_unsafe_refused():
    old = {"max_steps": 4, "pretrain": "a", "actor_train": {"training_args": {"lr": 1}},
           "tracking": {"mlflow": True}}
    assert check_changes(old, {**old, "max_steps": 8, "tracking": {"mlflow": False}}, "f.yaml",
                         SAFE_KEYS) == ["max_steps: 4 -> 8", "tracking.mlflow: True -> False"]
    with pytest.raises(ConfigError, match=r"f.yaml: pretrain: differs from the run being "
                                          r"resumed .*pretrain \('a' -> 'b'\)"):
        check_changes(old, {**old, "pretrain": "b"}, "f.yaml", SAFE_KEYS)
    with pytest.raises(ConfigError, match="actor_train.training_args.lr"):
        check_changes(old, {**old, "actor_train": {"training_args": {"lr": 2}}}, "f.yaml",
                      SAFE_KEYS)


def test_records_cut_back_to_the_checkpoint(tmp_path):
    rows = [{"step": s, "x": s} for s in (0, 1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "x"')  # torn by a kill
    ledger = [{"seq": 0, "fate": "trained", "step": 1}, {"seq": 1, "fate": "trained", "step": 3},
              {"seq": 2, "fate": "aborted", "step": 2}, {"seq": 3, "fate": "stale", "step": 2}]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ledger))
    cut_back(tmp_path, 2)
    assert ledger_cut_back(tmp_path, 2) == 2
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").open()]
    assert steps == [0, 1, 2]
    assert [json.loads(line)["seq"] for line in (tmp_path / "samples.jsonl").open()] == [0, 3]


def test_schedule_keeps_the_first_starts_horizon(tmp_path):
    ckpt = tmp_path / "checkpoint-3"
    ckpt.mkdir()
    (ckpt / PIPELINE_STATE).write_text(json.dumps({"step": 3, "schedule_steps": 6,
                                                   "next_batch": 3, "kl_coef": 0.0,
                                                   "buffer": []}))

    def steps(max_steps, schedule="cosine"):
        return schedule_steps(load_config_dict({"max_steps": max_steps, "actor_train": {
            "training_args": {"lr_scheduler_type": schedule}}}), ckpt)

    assert steps(4) == 6  # stopping earlier: the same curve
    assert steps(6) == 6
    with pytest.raises(ConfigError, match=r"^max_steps: is 9, past the 6 steps .* cosine"):
        steps(9)
    assert steps(9, "constant") == 9  # a flat rate has no end to run past
    assert schedule_steps(load_config_dict({"max_steps": 4}), None) == 4  # a fresh run


def test_resume_by_run_dir_reports_only_what_the_user_changed(tmp_path, monkeypatch, capsys):
    """`platform run --resume RUN` sets output_dir=RUN for the user; the run's own config
    (the default layout) has none: no "changed output_dir" line, a real change still said."""
    import yaml

    from flywheel.config import config_to_dict
    from flywheel.config.length_defaults import loadable_config_data
    from flywheel.pipelines.run.launch import prepare_resume

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "exp" / "20260101-000000"
    save(run, 2)
    first = load_config_dict({"exp_name": "exp", "max_steps": 4})
    (run / "config.yaml").write_text(yaml.safe_dump(loadable_config_data(config_to_dict(first))))
    resumed = load_config_dict({"exp_name": "exp", "max_steps": 6, "output_dir": str(run),
                                "resume_from_checkpoint": str(run)})
    assert prepare_resume(resumed, None) == (run / "checkpoint-2", run)
    assert capsys.readouterr().out.splitlines() == ["resume: changed max_steps: 4 -> 6"]
    moved = load_config_dict({"exp_name": "exp", "max_steps": 4,
                              "output_dir": str(tmp_path / "elsewhere"),
                              "resume_from_checkpoint": str(run)})
    assert check_changes(loadable_config_data(config_to_dict(first)),
                         loadable_config_data(config_to_dict(moved)), "f.yaml", SAFE_KEYS,
                         run) == [
        f"output_dir: None -> '{tmp_path / 'elsewhere'}'"]


def test_a_checkpoint_from_before_a_key_existed_resumes_unless_a_value_differs(
        tmp_path, monkeypatch, capsys):
    """A run saved by an older flywheel has no line for a key added since (the DPO keys,
    say): that key takes today's default on both sides, so the run resumes; a value the
    old run really trained with, changed, is still refused."""
    import yaml

    from flywheel.config import config_to_dict
    from flywheel.config.length_defaults import loadable_config_data
    from flywheel.pipelines.run.launch import prepare_resume

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "exp" / "20260101-000000"
    save(run, 2)
    old = loadable_config_data(config_to_dict(load_config_dict({"exp_name": "exp"})))
    for key in ("beta", "chosen_key", "teacher"):  # keys the older flywheel lacked
        del old[key]
    del old["actor_train"]["loss_agg_mode"]  # a role block's key too
    (run / "config.yaml").write_text(yaml.safe_dump(old))

    def resume(**changes):
        return prepare_resume(load_config_dict({"exp_name": "exp", "output_dir": str(run),
                                                "resume_from_checkpoint": str(run),
                                                **changes}), None)

    assert resume() == (run / "checkpoint-2", run)
    assert capsys.readouterr().out == ""
    with pytest.raises(ConfigError, match=r"pg_clip: differs from the run being resumed"):
        resume(pg_clip=0.3)
