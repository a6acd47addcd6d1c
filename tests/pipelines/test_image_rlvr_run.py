"""An RLVR run on image prompts end to end (issue 29): a JSONL of records whose images are
PNG files under image_folder, the tiny random Idefics3 (mechanics, not learning), real Ray
actors (actor_infer on hf_infer or vllm, actor_train on hf_train), 2 steps with validation.
The recorded sampling log-probs equal the trainer's old log-probs with the images in
context (offpolicy/k3_kl ~ 0: a side that dropped the images would show the gap); on vllm
the images go as multi_modal_data (both runs `long`). At async_generation_ratio 0
the run equals the plain synchronous loop number for number, image prompts and validation
included (`long`). A run on a backend that takes no images is refused when the data loads."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.records import DataError
from flywheel.pipelines.rlvr.rollout import load_prompt_sets
from flywheel.pipelines.run.launch import run

from .plain_loop import assert_same_steps, plain_sync_loop

COLOURS = {"red": (220, 20, 20), "blue": (20, 20, 220), "green": (20, 200, 20)}


def write_data(folder) -> str:
    (folder / "img").mkdir()
    rows = []
    for i, (name, rgb) in enumerate(list(COLOURS.items()) * 2):
        Image.new("RGB", (40 + 8 * i, 32), rgb).save(folder / "img" / f"{i}.png")
        rows.append({"id": f"r{i}", "prompt": "What colour is the image?", "answer": name,
                     "images": [f"{i}.png"]})
    path = folder / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def config(tmp_path, model: str, **top) -> dict:
    data = {"file_name": [write_data(tmp_path)], "template": "chat",
            "image_folder": str(tmp_path / "img"), "image_max_pixels": 64 * 64}
    return {
        "exp_name": "images", "output_dir": str(tmp_path / "run"), "pretrain": model,
        "max_steps": 2, "eval_steps": 2, "logging_steps": 100, "prompt_length": 64,
        "response_length": 4, "rollout_batch_size": 2, "num_return_sequences_in_group": 2,
        "tracking": {"backends": ["jsonl"], "sample_text_steps": 0},
        "actor_train": {"device_mapping": [0], "data_args": data,
                        "model_args": {"freeze_module_prefix": "vision_model"},
                        "training_args": {"per_device_train_batch_size": 4}},
        "actor_infer": {"device_mapping": [0], "strategy_args": {"strategy_name": "hf_infer"}},
        "rewards": {"math": {"reward_type": "math_rule"}},
        "validation": {"data_args": {"file_name": data["file_name"],
                                     "image_folder": data["image_folder"]}},
        **top,
    }


# ~10-25 s each on 2 shared cores (Ray, two workers on the VL model): `long`. The suite's
# image run with Ray is test_image_async_run.py's on vllm (one VL engine for issue 29)
@pytest.mark.long
@pytest.mark.parametrize("infer", ["hf_infer", "vllm"])
@pytest.mark.slow
def test_an_rlvr_run_on_image_prompts_trains_with_the_images_in_context(
        tmp_path, ray_session, tiny_idefics3_path, infer):
    data = config(tmp_path, tiny_idefics3_path)
    data["actor_infer"]["strategy_args"]["strategy_name"] = infer
    run_dir = run(load_config_dict(data))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] > 0 and "actor/grad_norm" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # the trainer's log-probs are the sampler's: same images, same weights
        assert abs(r["offpolicy/k3_kl"]) < 1e-6, r["offpolicy/k3_kl"]
    assert [r["step"] for r in rows if "val/accuracy" in r] == [0, 2]


@pytest.mark.long  # two starts of both roles on the VL model: ~35 s on 2 shared cores
@pytest.mark.slow
def test_ratio_zero_on_image_prompts_equals_the_plain_synchronous_loop(
        tmp_path, ray_session, tiny_idefics3_path):
    """DESIGN.md invariant 1 with images: the run (ratio 0, the default, validating at steps
    0 and 2 on image prompts too) and the loop written out train on the same image batches
    and log the same numbers, step for step."""
    data = config(tmp_path, tiny_idefics3_path)
    rows = [json.loads(line) for line in
            (run(load_config_dict(data)) / "metrics.jsonl").read_text().splitlines()]
    piped = [r for r in rows if r["step"] > 0 and "actor/grad_norm" in r]
    assert [r["step"] for r in rows if "val/accuracy" in r] == [0, 2]
    plain = plain_sync_loop(load_config_dict({**data, "output_dir": str(tmp_path / "plain")}),
                            tiny_idefics3_path, steps=2)
    assert_same_steps(piped, plain, steps=2)


def test_image_data_on_a_backend_without_images_is_refused_at_load(tmp_path,
                                                                     tiny_idefics3_path):
    data = config(tmp_path, tiny_idefics3_path)
    data["actor_infer"]["strategy_args"]["strategy_name"] = "sglang"
    del data["actor_train"]["data_args"]["image_folder"]  # keys written would be refused
    del data["actor_train"]["data_args"]["image_max_pixels"]  # by the config first
    del data["validation"]
    data["eval_steps"] = 0
    data["actor_train"]["model_args"] = {}
    cfg = load_config_dict(data)
    with pytest.raises(DataError, match="the data has images, which this run's backends "
                                        "cannot take"):
        load_prompt_sets(cfg, tokenizer=None)
