"""SFT on the shared update loop (pipelines/sft/train.py) and the built-in warm starts it runs
(workshop/sft_recipes.py, workshop/frozen_lake_warm_start.py), including the shipped weights
and their records."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from flywheel.pipelines.data.arithmetic_data import make_arithmetic_dataset
from flywheel.pipelines.sft.greedy_eval import accuracy_of
from flywheel.pipelines.sft.train import (
    CrossEntropy,
    SFTSettings,
    capped_threads,
    encode_records,
    prompt_response_ids,
    sft_worker_config,
)
from flywheel.platform.models.builtin import SHIPPED_DIR
from flywheel.platform.models.char_tokenizer import make_char_tokenizer
from flywheel.platform.models.tiny_qwen2 import load_causal_lm
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.train_loop import Counts
from flywheel.workshop.frozen_lake_warm_start import DEV_STREAM, play
from flywheel.workshop.sft_recipes import RECIPES, WarmStartConfig, build_recipe, warm_start

TOKENIZER = make_char_tokenizer()
# Tests never run the full warm start: a fixed short run, no accuracy-based stop.
SHORT = WarmStartConfig(steps=30, stop_at_accuracy=None, log_every=10)
TOLERANCE = 0.005  # greedy eval is deterministic on one machine; BLAS may differ elsewhere


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with capped_threads(1):
        yield


@pytest.fixture(scope="module")
def base_dir(tiny_model_path) -> Path:
    return Path(tiny_model_path)


# --- the objective and the data -----------------------------------------------------------


def test_records_are_laid_out_as_the_pipeline_lays_them_out():
    prompt, response = prompt_response_ids({"prompt": "12+34=", "answer": "046"}, TOKENIZER)
    assert prompt == [TOKENIZER.bos_token_id] + TOKENIZER.encode("12+34=")
    assert response == TOKENIZER.encode("046") + [TOKENIZER.eos_token_id]
    assert prompt_response_ids({"prompt": "12+34=", "response": "046"}, TOKENIZER) == (
        prompt, response)
    batch = encode_records([{"prompt": "1+1=", "answer": "2"},
                            {"prompt": "10+10=", "answer": "20"}], TOKENIZER)
    assert batch.response_mask.sum(1).tolist() == [2.0, 3.0]  # answer + eos only
    assert batch.attention_mask.sum(1).tolist() == [7, 10]


def test_chat_records_train_on_the_assistant_reply_only():
    tok = make_char_tokenizer()
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                         "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")
    prompt, response = prompt_response_ids(
        {"messages": [{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "yo"}]}, tok)
    assert tok.decode(prompt) == "user: hi\nassistant: " and tok.decode(response) == "yo\n"
    with pytest.raises(ValueError, match="assistant"):
        prompt_response_ids({"messages": [{"role": "user", "content": "hi"}]}, tok)


def test_cross_entropy_is_the_mean_response_token_nll_however_the_batch_is_cut(base_dir):
    data = encode_records(make_arithmetic_dataset(8, seed=0), TOKENIZER)
    grads = []
    for micro in (8, 2):
        settings = SFTSettings(steps=1, batch_size=8)
        cfg = sft_worker_config(settings)
        cfg.training_args.per_device_train_batch_size = micro
        cfg.training_args.gradient_accumulation_steps = 8 // micro
        strategy = HFTrainStrategy(str(base_dir), cfg, seed=0, total_steps=1)
        metrics = strategy.train_step(data, CrossEntropy())
        grads.append(torch.cat([p.grad.flatten() for p in strategy.model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)
    model = load_causal_lm(base_dir)
    with torch.no_grad():
        logits = model(input_ids=data.input_ids).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), data.input_ids[:, 1:],
                                            reduction="none")  # [B, L-1]
    mask = data.response_mask[:, 1:]
    expected = float((nll * mask).sum() / mask.sum())
    assert metrics["sft/loss"] == pytest.approx(expected, rel=1e-4)
    outputs = -nll.detach()
    loss, _ = CrossEntropy()(torch.nn.functional.pad(outputs, (1, 0)), None, data,
                             Counts(float(mask.sum()), 8.0))
    assert float(loss) == pytest.approx(expected, rel=1e-5)


# --- the arithmetic warm start ------------------------------------------------------------


def test_short_warm_start_lowers_loss_and_is_deterministic(tmp_path, base_dir):
    first = warm_start(base_dir, tmp_path / "a", SHORT)
    assert first.steps == 30 and first.final_loss < 0.7 * first.first_loss
    warm_start(base_dir, tmp_path / "b", SHORT)
    weights = (tmp_path / "a" / "model.safetensors").read_bytes()
    assert weights == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert weights != (base_dir / "model.safetensors").read_bytes()
    AutoModelForCausalLM.from_pretrained(str(tmp_path / "a"))  # a loadable HF checkpoint
    record = json.loads((tmp_path / "a" / "warm_start.json").read_text())
    assert record["config"]["steps"] == 30 and record["result"]["steps"] == 30


def test_stop_at_accuracy_fails_loudly_when_unreached(tmp_path, base_dir):
    config = WarmStartConfig(steps=20, stop_at_accuracy=0.99, check_every=10, num_dev=50)
    with pytest.raises(RuntimeError, match="did not reach dev accuracy 0.99 within 20 steps"):
        warm_start(base_dir, tmp_path / "x", config)


# --- the shipped weights ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_shipped_record_is_the_current_recipe(name):
    """Changing a recipe without `--write-shipped` would ship weights it did not make."""
    record = json.loads((SHIPPED_DIR / name / "warm_start.json").read_text())
    assert record["config"] == json.loads(json.dumps(asdict(RECIPES[name].warm_start)))


def test_shipped_arith_gives_its_recorded_accuracy():
    folder = SHIPPED_DIR / "tiny-qwen2-arith"
    config, result = json.loads((folder / "warm_start.json").read_text()).values()
    model, tok = load_causal_lm(folder), AutoTokenizer.from_pretrained(str(folder))
    dev = make_arithmetic_dataset(split="train", seed=config["seed"])[:config["num_dev"]]
    assert accuracy_of(model, tok, dev) == pytest.approx(result["dev_accuracy"], abs=TOLERANCE)
    assert result["dev_accuracy"] >= config["stop_at_accuracy"]
    val = make_arithmetic_dataset(split="val")
    assert accuracy_of(model, tok, val) == pytest.approx(result["val_accuracy"], abs=TOLERANCE)


def test_shipped_frozenlake_gives_its_recorded_greedy_success():
    folder = SHIPPED_DIR / "tiny-qwen2-frozenlake"
    _, result = json.loads((folder / "warm_start.json").read_text()).values()
    recipe = RECIPES["tiny-qwen2-frozenlake"].warm_start
    model, tok = load_causal_lm(folder), AutoTokenizer.from_pretrained(str(folder))
    greedy = play(model, tok, recipe, recipe.num_dev, DEV_STREAM + recipe.seed, do_sample=False)
    assert greedy["success"] == pytest.approx(result["dev_greedy_success"],
                                              abs=1 / recipe.num_dev + 1e-9)


@pytest.mark.long
@pytest.mark.timeout(1800)
def test_arith_rebuild_reaches_its_stop_threshold(tmp_path):
    """The recipe as shipped, from scratch (minutes on a busy 2-core CPU)."""
    result = build_recipe("tiny-qwen2-arith", tmp_path / "arith")
    assert result.dev_accuracy >= RECIPES["tiny-qwen2-arith"].warm_start.stop_at_accuracy
