"""bench/roll_check.py's "native with only unknown keys left" judgement, and ROLL's
`resume_from_checkpoint: false` loading natively (small fixtures; the whole-ROLL figures
come from running the script on a ROLL checkout)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flywheel.pipelines.config import load_config
from flywheel.platform.config.errors import ConfigError

SCRIPT = Path(__file__).parents[2] / "bench" / "roll_check.py"


@pytest.fixture(scope="module")
def roll_check():
    spec = importlib.util.spec_from_file_location("roll_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_resume_from_checkpoint_false_means_no_resume(tmp_path):
    cfg = load_config(write(tmp_path / "c.yaml", {"resume_from_checkpoint": False}))
    assert cfg.resume_from_checkpoint is None
    assert load_config(tmp_path / "c.yaml", ["resume_from_checkpoint=false"]
                       ).resume_from_checkpoint is None
    with pytest.raises(ConfigError, match="resume_from_checkpoint: expected str or null, "
                                          "got int 3"):
        load_config(write(tmp_path / "t.yaml", {"resume_from_checkpoint": 3}))


def test_unknown_keys_are_found_inside_copied_helper_trees(tmp_path, roll_check):
    """`custom_envs.X: ${custom_env.X}` copies a helper sub-tree into a schema field; ROLL's
    env_manager_cls inside it is unknown there, and is removed at its new place."""
    path = write(tmp_path / "roll.yaml", {
        "pipeline_type": "agentic",
        "custom_env": {"FrozenLake": {"env_type": "frozen_lake", "env_manager_cls": "X"}},
        "custom_envs": {"FrozenLake": "${custom_env.FrozenLake}"},
        "train_env_manager": {"tags": ["FrozenLake"], "num_groups_partition": [8],
                              "num_env_groups": 8, "group_size": 8},
        "val_env_manager": {"tags": ["FrozenLake"], "num_groups_partition": [8],
                            "num_env_groups": 8, "group_size": 1},
        "rollout_batch_size": 64, "val_batch_size": 8})
    status, detail = roll_check.native(path)
    assert (status, detail) == ("unknown keys only", "1 unknown keys")


def test_a_helper_used_only_by_unknown_keys_goes_too(roll_check):
    """`offload_nccl: ${offload_nccl}` under a role is unknown; once it is removed, the
    top-level offload_nccl is referenced by nothing and is unknown as well."""
    data = {"offload_nccl": True, "max_steps": 3,
            "actor_train": {"offload_nccl": "${offload_nccl}", "flash_attn": "fa2"}}
    removed = roll_check.remove_unknown_keys(data)
    assert sorted(removed) == ["actor_train.flash_attn", "actor_train.offload_nccl",
                               "offload_nccl"]
    assert data == {"max_steps": 3, "actor_train": {}}


def test_the_script_over_a_checkout_converts_a_frozen_lake_config(tmp_path):
    """The whole script in a fresh process, over a one-file "checkout": it hands
    flywheel.envs' names to the converter (platform/ does not import envs), so FrozenLake
    is no missing environment, and the config converts and validates. Natively it is refused:
    ROLL's file does not say pipeline_type: agentic, and env blocks act only there."""
    (tmp_path / "examples" / "agentic").mkdir(parents=True)
    write(tmp_path / "examples" / "agentic" / "frozen_lake.yaml", {
        "adv_estimator": "grpo", "rollout_batch_size": 64, "val_batch_size": 8,
        "resume_from_checkpoint": False,
        "custom_envs": {"FrozenLake": {"env_type": "frozen_lake"}},
        "train_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 8, "group_size": 8,
                              "num_groups_partition": [8]},
        "val_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 8, "group_size": 1,
                            "num_groups_partition": [8]}})
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    summary = result["summary"]
    assert (summary["roll_loads"], summary["converted_and_valid"], summary["native_ok"]) == \
        (1, 1, 0), summary
    assert "acts only with pipeline_type agentic" in result["rows"][0]["native_detail"]


def test_vl_files_are_counted_and_video_is_excepted_by_name(tmp_path, roll_check):
    """Over a two-file "checkout": the VL fixture converts; the same file with ROLL's
    Video-R1 data function at a path EXCEPTED names is refused and excepted with its
    reason, so the VL count leaves it out."""
    vl = Path(__file__).parents[1] / "data" / "configs" / "roll" / "vl" / "detection_rlvr.yaml"
    data = yaml.safe_load(vl.read_text())
    (tmp_path / "examples" / "vl").mkdir(parents=True)
    (tmp_path / "examples" / "video-rlvr").mkdir()
    write(tmp_path / "examples" / "vl" / "rlvr.yaml", data)
    data["actor_train"]["data_args"]["custom_data_kwargs_func"] = (
        "roll.datasets.vlm_dataset_utils.video_r1_get_data_kwargs")
    write(tmp_path / "examples" / "video-rlvr" / "video_r1.yaml", data)
    summary = roll_check.check(tmp_path)["summary"]["vl_rlvr"]
    assert summary == {"files": 2, "converted_and_valid": 1, "refused": {},
                       "excepted_by_name": {"examples/video-rlvr/video_r1.yaml":
                                            roll_check.EXCEPTED[
                                                "examples/video-rlvr/video_r1.yaml"]}}


def test_every_pipeline_is_counted_with_what_the_rest_need(tmp_path, roll_check):
    """Over a three-file "checkout" (the SFT, DPO and offline distillation shapes): each
    converts and validates, counted under its own pipeline."""
    shapes = Path(__file__).parents[1] / "data" / "configs" / "roll" / "pipelines"
    (tmp_path / "examples").mkdir()
    for name in ("sft_megatron.yaml", "dpo_megatron.yaml", "distill_megatron.yaml"):
        (tmp_path / "examples" / name).write_text((shapes / name).read_text())
    table = roll_check.check(tmp_path)["summary"]["per_pipeline"]
    assert table["sft"] == {"files": 1, "roll_loads": 1, "converted_and_valid": 1,
                            "not_converted_need": {}}
    assert table["dpo"] == {"files": 1, "roll_loads": 1, "converted_and_valid": 1,
                            "not_converted_need": {}}
    assert table["distill"] == {"files": 1, "roll_loads": 1, "converted_and_valid": 1,
                                "not_converted_need": {}}
    assert "| sft | 1 | 1 | 1 | - |" in roll_check.pipeline_table(table)
