"""ROLL's VL RLVR files through `platform convert --from roll` (interop/roll/fit/vl.py): the
detection reward, ROLL's VL data columns and data functions, and the backends that must take images.

Fixture: tests/data/configs/roll/vl/detection_rlvr.yaml (the shape of ROLL's
qwen2_5-vl / qwen3-vl RLVR examples on backends flywheel feeds images to), edited per test.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from flywheel.interop.roll.fit import vl as roll_vl
from flywheel.pipelines.config import convert_roll, load_config_dict
from flywheel.pipelines.data.prompt_data import Columns, parse_record
from flywheel.platform.config.yaml_source import load_layers
from flywheel.workers.rewards import detection

VL = Path(__file__).parents[1] / "data" / "configs" / "roll" / "vl" / "detection_rlvr.yaml"


def vl_file(tmp_path: Path, edit=None) -> Path:
    data = load_layers(VL).data
    if edit:
        edit(data)
    path = tmp_path / "vl.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_detection_file_on_image_backends_converts_with_rolls_vl_columns():
    conversion = convert_roll(VL)
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    reward = cfg.rewards["cv_detection"]
    assert reward.reward_type == "detection"
    assert reward.reward_args == {"iou_thresholds": list(roll_vl.ROLL_IOU_THRESHOLDS)}
    args = cfg.actor_train.data_args
    # what ROLL's get_vlm_data_kwargs reads, whatever data_args' column keys say
    assert (args.messages, args.response, args.tag) == (
        "prompt", "reward_model.ground_truth", "data_source")
    assert args.image_max_pixels == 1048576
    assert cfg.actor_train.model_args.freeze_module_prefix == "vision_model"
    assert any("custom_data_kwargs_func" in m and "ROLL's own VL data function" in m
               for m in conversion.mapped)
    assert any(d.startswith("rewards.cv_detection.model_args: ROLL's DetectionRewardWorker "
                            "loads its processor") for d in conversion.dropped)
    # the reward and the converter agree on ROLL's thresholds
    assert list(roll_vl.ROLL_IOU_THRESHOLDS) == detection.ROLL_IOU_THRESHOLDS


def test_a_megatron_vl_file_trains_on_deepspeed_with_its_images_and_frozen_tower(tmp_path):
    def megatron(data):
        data["actor_train"]["strategy_args"] = {"strategy_name": "megatron_train"}
        data["reference"]["strategy_args"] = {"strategy_name": "megatron_infer"}

    conversion = convert_roll(vl_file(tmp_path, megatron))
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    # flywheel's Megatron path takes no images (the reference: dropped, no KL term reads it)
    assert cfg.actor_train.strategy_args.strategy_name == "deepspeed_train"
    assert cfg.actor_train.model_args.freeze_module_prefix == "vision_model"
    assert any("megatron_train takes no images" in m for m in conversion.mapped)


def test_video_and_audio_data_functions_are_refused_and_an_unknown_one_too(tmp_path):
    for name, feature in (("video_r1_get_data_kwargs", "video inputs"),
                          ("audio_test_get_data_kwargs", "audio inputs"),
                          ("mine", "a custom data function")):
        def use(data, name=name):
            data["actor_train"]["data_args"]["custom_data_kwargs_func"] = (
                name if name == "mine" else roll_vl._UTILS + name)

        missing = convert_roll(vl_file(tmp_path, use)).missing
        assert any(m.startswith(feature) for m in missing), (name, missing)


def test_a_text_file_keeps_its_own_columns_and_rolls_vl_data_function_marks_vl(tmp_path):
    def text_only(data):
        data["rewards"].pop("cv_detection")
        args = data["actor_train"]["data_args"]
        for key in ("image_max_pixels", "custom_data_kwargs_func"):
            args.pop(key)
        data["actor_train"]["model_args"].pop("freeze_module_prefix")

    conversion = convert_roll(vl_file(tmp_path, text_only))
    args = conversion.data["actor_train"]["data_args"]
    assert args.get("response") == "solution" and "tag" not in args  # ROLL's text defaults

    def only_the_data_function(data):  # ROLL's VL data function named, nothing else
        text_only(data)
        data["actor_train"]["data_args"]["custom_data_kwargs_func"] = (
            roll_vl._UTILS + "get_vlm_data_kwargs")

    args = convert_roll(vl_file(tmp_path, only_the_data_function)).data["actor_train"][
        "data_args"]
    assert (args["response"], args["tag"]) == ("reward_model.ground_truth", "data_source")


def test_a_dotted_answer_column_reads_inside_a_dict_column():
    columns = Columns(prompt="prompt", prompt_is_messages=True,
                      answer="reward_model.ground_truth", tag="data_source", id=None)
    row = {"prompt": [{"role": "user", "content": "<image>boxes?"}], "images": [],
           "reward_model": {"ground_truth": "<answer>[]</answer>"}, "data_source": "coco"}
    record = parse_record(row, "f.parquet/0", columns)
    assert (record.answer, record.tag) == ("<answer>[]</answer>", "coco")


def test_a_tracker_flywheel_lacks_is_dropped_with_its_options(tmp_path):
    """ROLL's qwen3.5-35BA3 ppu file tracks with ml_tracker (which ROLL's own registry
    lacks): where metrics go, not what is learned."""
    def ml_tracker(data):
        data.update(track_with="ml_tracker", tracker_kwargs={"project": "p"})

    conversion = convert_roll(vl_file(tmp_path, ml_tracker))
    assert conversion.missing == []
    assert "track_with" not in conversion.data and "tracker_kwargs" not in conversion.data
    assert any(d.startswith("track_with: 'ml_tracker': a tracker flywheel does not have "
                            "(nor does ROLL's") for d in conversion.dropped)


def test_megatrons_vision_model_prefix_becomes_transformers_visual_for_qwen_vl(tmp_path):
    def qwen(data):
        data["pretrain"] = "Qwen/Qwen3-VL-4B-Instruct"

    conversion = convert_roll(vl_file(tmp_path, qwen))
    assert conversion.data["actor_train"]["model_args"]["freeze_module_prefix"] == "visual"
    assert any("-> visual (transformers' names)" in m for m in conversion.mapped)
    for name in ("Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-35B-A3B"):  # model.visual.* too

        def qwen35(data, name=name):
            data["pretrain"] = name

        converted = convert_roll(vl_file(tmp_path, qwen35)).data
        assert converted["actor_train"]["model_args"]["freeze_module_prefix"] == "visual"
    # another architecture keeps what ROLL wrote (the tiny Idefics3's tower: vision_model)
    plain = convert_roll(VL).data["actor_train"]["model_args"]["freeze_module_prefix"]
    assert plain == "vision_model"


def test_qwen3_omni_on_megatron_trains_its_thinker_with_rolls_towers_frozen(tmp_path):
    """ROLL's qwen3-omni/rlvr_megatron.yaml: the MoE family is Qwen3-Omni (its thinker
    loads, workers/strategies/omni_thinker.py), not Qwen3-MoE, and the four mcore_adapter
    prefixes become the thinker's two towers (the talker and code2wav are never loaded)."""
    def omni(data, prefix="vision_model,audio_model,talker,code2wav"):
        data["pretrain"] = "Qwen/Qwen3-Omni-30B-A3B-Thinking"
        data["actor_train"]["model_args"]["freeze_module_prefix"] = prefix
        data["actor_train"]["strategy_args"] = {"strategy_name": "megatron_train",
                                                "strategy_config": {
                                                    "expert_model_parallel_size": 8}}
        data["reference"]["strategy_args"] = {"strategy_name": "megatron_infer"}

    conversion = convert_roll(vl_file(tmp_path, omni))
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    assert cfg.actor_train.model_args.freeze_module_prefix == "visual,audio_tower"
    assert cfg.actor_train.strategy_args.strategy_name == "deepspeed_train"
    assert any("transformers builds qwen3_omni_moe" in m for m in conversion.mapped)
    assert any("-> visual,audio_tower (transformers' names; talker, code2wav: not in the "
               "thinker" in m for m in conversion.mapped)
    # the speech parts alone: nothing the trained model has is left to freeze
    alone = convert_roll(vl_file(tmp_path, lambda d: omni(d, "talker,code2wav"))).data
    assert "freeze_module_prefix" not in alone["actor_train"]["model_args"]
