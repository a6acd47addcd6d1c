"""Built-in tiny model: tokenizer, deterministic build, name resolution and cache, warm start."""

from __future__ import annotations

import json
import threading
import unicodedata
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer

from flywheel.platform.data.arithmetic import make_arithmetic_dataset
from flywheel.platform.models import builtin
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.platform.models.char_tokenizer import (
    ALPHABET,
    make_char_tokenizer,
    save_char_tokenizer,
)
from flywheel.platform.models.greedy_eval import greedy_complete
from flywheel.platform.models.tiny_qwen2 import TinyQwen2Spec, build_tiny_qwen2
from flywheel.platform.models.warm_start import (
    WarmStartConfig,
    capped_threads,
    greedy_accuracy,
    warm_start,
)

TOKENIZER = make_char_tokenizer()
# Tests never run the full warm start: a fixed short run, no accuracy-based stop.
SHORT = WarmStartConfig(steps=30, stop_at_accuracy=None, log_every=10)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Two OpenMP threads on a busy 2-core machine spin-wait and run ~10x slower than one.
    with capped_threads(1):
        yield


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny") / "m")


# --- tokenizer -------------------------------------------------------------------------------


def test_special_ids_alphabet_ids_and_no_automatic_bos():
    assert (TOKENIZER.pad_token_id, TOKENIZER.bos_token_id) == (0, 1)
    assert (TOKENIZER.eos_token_id, TOKENIZER.unk_token_id) == (2, 3)
    assert [TOKENIZER.encode(ch) for ch in ALPHABET] == [[4 + i] for i in range(len(ALPHABET))]
    assert TOKENIZER.encode(" 0\n√·") == [4, 20, 99, 100, 101]
    assert TOKENIZER.encode("12+34=", add_special_tokens=True) == TOKENIZER.encode("12+34=")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(ALPHABET), max_size=60))
def test_round_trip_one_token_per_char(text):
    ids = TOKENIZER.encode(text)
    assert len(ids) == len(text)
    assert TOKENIZER.decode(ids) == text


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=30))
def test_any_text_round_trips_through_byte_fallback(text):
    assert TOKENIZER.decode(TOKENIZER.encode(text)) == unicodedata.normalize("NFC", text)


def test_unknown_chars_become_bytes_and_special_token_text_stays_text():
    assert len(TOKENIZER.encode("é")) == 2  # two UTF-8 bytes, not dropped, not <unk>
    assert TOKENIZER.unk_token_id not in TOKENIZER.encode("aé\t😀b")
    ids = TOKENIZER.encode("<eos>")  # literal text is characters, never the eos id
    assert len(ids) == 5 and TOKENIZER.eos_token_id not in ids
    assert TOKENIZER.decode([1, 20, 2]) == "<bos>0<eos>"
    assert TOKENIZER.decode([1, 20, 2], skip_special_tokens=True) == "0"


def test_saved_tokenizer_loads_without_a_model_config(tmp_path):
    save_char_tokenizer(tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    assert tok.encode("12+34=\n√") == TOKENIZER.encode("12+34=\n√") and len(tok) == len(TOKENIZER)


# --- model build ------------------------------------------------------------------------------


def test_auto_classes_load_the_built_dir(base_dir):
    # transformers 5 rebuilds qwen2 tokenizers as Qwen2Tokenizer: it must be the same tokenizer.
    tok = AutoTokenizer.from_pretrained(str(base_dir))
    for text in ("ab+cd=\n√·", "  a  b\n\n", "é😀\t<eos>"):
        assert tok.encode(text) == TOKENIZER.encode(text)
    assert tok.eos_token_id == 2 and tok.bos_token_id == 1 and tok.pad_token_id == 0
    model = AutoModelForCausalLM.from_pretrained(str(base_dir))
    cfg = model.config
    assert cfg.model_type == "qwen2" and cfg.vocab_size == len(tok)
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (128, 256, 4)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (2, 1, 64)
    assert cfg.tie_word_embeddings and cfg.max_position_embeddings == 512
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert model.dtype == torch.float32
    gen = json.loads((base_dir / "generation_config.json").read_text())
    assert (gen["pad_token_id"], gen["bos_token_id"], gen["eos_token_id"]) == (0, 1, 2)
    out = model(torch.tensor([[1] + tok.encode("12+34=")])).logits
    assert out.shape == (1, 7, len(tok))


def test_build_is_deterministic_per_seed(tmp_path, base_dir):
    state = torch.random.get_rng_state()
    same = build_tiny_qwen2(tmp_path / "same")
    assert torch.equal(state, torch.random.get_rng_state())  # caller's RNG untouched
    other = build_tiny_qwen2(tmp_path / "other", TinyQwen2Spec(seed=1))
    weights = (base_dir / "model.safetensors").read_bytes()
    assert (same / "model.safetensors").read_bytes() == weights
    assert (other / "model.safetensors").read_bytes() != weights


# --- resolve_pretrain and the cache ---------------------------------------------------------


def test_non_builtin_names_pass_through(tmp_path):
    assert resolve_pretrain("Qwen/Qwen2.5-0.5B-Instruct", tmp_path) == "Qwen/Qwen2.5-0.5B-Instruct"
    assert resolve_pretrain("/models/local dir", tmp_path) == "/models/local dir"
    assert not any(tmp_path.iterdir())


def test_unknown_builtin_lists_known_names(tmp_path):
    with pytest.raises(ValueError, match="builtin://tiny-qwen2-arith") as err:
        resolve_pretrain("builtin://nope", tmp_path)
    assert "builtin://tiny-qwen2," in str(err.value) and "nope" in str(err.value)


def test_default_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLYWHEEL_CACHE", str(tmp_path))
    assert builtin.default_cache_dir() == tmp_path / "models"
    monkeypatch.delenv("FLYWHEEL_CACHE")
    assert builtin.default_cache_dir() == Path.home() / ".cache" / "flywheel" / "models"


def test_cache_is_reused_and_leaves_no_temp_dirs(tmp_path, monkeypatch, base_dir):
    path = Path(resolve_pretrain("builtin://tiny-qwen2", tmp_path))
    assert (path / "model.safetensors").read_bytes() == (
        base_dir / "model.safetensors"
    ).read_bytes()

    def must_not_build(*args, **kwargs):
        raise AssertionError("rebuilt a cached model")

    monkeypatch.setattr(builtin, "build_tiny_qwen2", must_not_build)
    assert resolve_pretrain("builtin://tiny-qwen2", tmp_path) == str(path)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [path.name]


def test_concurrent_builders_build_once(tmp_path, monkeypatch):
    builds = []
    real_build = builtin.build_tiny_qwen2

    def counting_build(out_dir, spec):
        builds.append(out_dir)
        return real_build(out_dir, spec)

    monkeypatch.setattr(builtin, "build_tiny_qwen2", counting_build)
    results: list[str] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(resolve_pretrain("builtin://tiny-qwen2", tmp_path))
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len(set(results)) == 1 and len(results) == 3


def test_recipe_change_changes_cache_key(monkeypatch):
    before = builtin.spec_hash(builtin.BUILTIN_MODELS["tiny-qwen2-arith"])
    changed = replace(builtin.BUILTIN_MODELS["tiny-qwen2-arith"], warm_start=SHORT)
    monkeypatch.setitem(builtin.BUILTIN_MODELS, "tiny-qwen2-arith", changed)
    assert builtin.spec_hash(changed) != before
    base = builtin.BUILTIN_MODELS["tiny-qwen2"]
    assert builtin.spec_hash(replace(base, arch=TinyQwen2Spec(seed=1))) != builtin.spec_hash(base)


def test_builtin_arith_is_base_plus_warm_start(tmp_path, monkeypatch, caplog):
    short = replace(builtin.BUILTIN_MODELS["tiny-qwen2-arith"], warm_start=SHORT)
    monkeypatch.setitem(builtin.BUILTIN_MODELS, "tiny-qwen2-arith", short)
    with caplog.at_level("INFO", logger="flywheel.platform.models"):
        path = Path(resolve_pretrain("builtin://tiny-qwen2-arith", tmp_path))
    assert path.name.startswith("tiny-qwen2-arith-")
    assert (
        tmp_path / f"tiny-qwen2-{builtin.spec_hash(builtin.BUILTIN_MODELS['tiny-qwen2'])}"
    ).is_dir()
    record = json.loads((path / "warm_start.json").read_text())
    assert record["config"]["steps"] == 30 and record["result"]["steps"] == 30
    assert 0.0 <= record["result"]["val_accuracy"] <= 1.0
    assert any("warm-start step 10/30 loss" in m and "eta" in m for m in caplog.messages)


# --- warm start -----------------------------------------------------------------------------


def test_short_warm_start_lowers_loss_and_is_deterministic(tmp_path, base_dir):
    first = warm_start(base_dir, tmp_path / "a", SHORT)
    assert first.steps == 30 and first.final_loss < 0.7 * first.first_loss
    warm_start(base_dir, tmp_path / "b", SHORT)
    weights = (tmp_path / "a" / "model.safetensors").read_bytes()
    assert weights == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert weights != (base_dir / "model.safetensors").read_bytes()
    AutoModelForCausalLM.from_pretrained(str(tmp_path / "a"))  # a loadable HF checkpoint


def test_stop_at_accuracy_fails_loudly_when_unreached(tmp_path, base_dir):
    config = WarmStartConfig(steps=20, stop_at_accuracy=0.99, check_every=10, num_dev=50)
    with pytest.raises(RuntimeError, match="did not reach dev accuracy 0.99 within 20 steps"):
        warm_start(base_dir, tmp_path / "x", config)


def test_greedy_decoding_and_accuracy_on_untrained_model(base_dir):
    records = make_arithmetic_dataset(64, seed=0, split="val")
    model = AutoModelForCausalLM.from_pretrained(str(base_dir))
    outs = greedy_complete(model, TOKENIZER, [r["prompt"] for r in records], batch_size=20)
    assert len(outs) == 64 and all(len(o) <= 4 for o in outs)
    # Batch size must not change greedy results (no padding is involved).
    assert outs == greedy_complete(model, TOKENIZER, [r["prompt"] for r in records], batch_size=64)
    assert greedy_accuracy(base_dir, records) == 0.0  # random init never adds correctly
