"""Built-in tiny model: tokenizer, deterministic build, name resolution and cache, shipped
weights. (The warm starts that make the shipped weights: tests/pipelines/test_sft.py.)"""

from __future__ import annotations

import json
import shutil
import threading
import unicodedata
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer

from flywheel.pipelines.data.arithmetic_data import make_arithmetic_dataset
from flywheel.pipelines.sft.greedy_eval import greedy_accuracy, greedy_complete
from flywheel.pipelines.sft.train import capped_threads
from flywheel.platform.models import builtin
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.platform.models.char_tokenizer import (
    ALPHABET,
    make_char_tokenizer,
    save_char_tokenizer,
)
from flywheel.platform.models.tiny_qwen2 import build_tiny_qwen2
from flywheel.platform.models.tiny_qwen2_spec import TinyQwen2Spec

TOKENIZER = make_char_tokenizer()


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


def test_recipe_change_changes_cache_key(tmp_path, monkeypatch):
    base = builtin.BUILTIN_MODELS["tiny-qwen2"]
    assert builtin.spec_hash(replace(base, arch=TinyQwen2Spec(seed=1))) != builtin.spec_hash(base)
    # a shipped model's key is its files' bytes: re-shipped weights get a new cache entry
    shipped = tmp_path / "shipped"
    shutil.copytree(builtin.SHIPPED_DIR, shipped)
    arith = builtin.BUILTIN_MODELS["tiny-qwen2-arith"]
    before = builtin.spec_hash(arith)
    monkeypatch.setattr(builtin, "SHIPPED_DIR", shipped)
    assert builtin.spec_hash(arith) == before
    with open(shipped / "tiny-qwen2-arith" / "warm_start.json", "a") as f:
        f.write("\n")
    assert builtin.spec_hash(arith) != before


@pytest.mark.parametrize("name", ["tiny-qwen2-arith", "tiny-qwen2-frozenlake"])
def test_warm_started_builtins_are_the_shipped_weights(tmp_path, name):
    path = Path(resolve_pretrain(f"builtin://{name}", tmp_path))
    assert path.name.startswith(f"{name}-") and path.parent == tmp_path
    for file in builtin.SHIPPED_FILES:
        assert (path / file).read_bytes() == (builtin.SHIPPED_DIR / name / file).read_bytes()
    assert json.loads((path / "warm_start.json").read_text())["result"]["steps"] > 0
    AutoModelForCausalLM.from_pretrained(str(path))  # a loadable HF checkpoint
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        path.name]  # nothing else was built


def test_shipped_files_are_package_data():
    import tomllib

    data = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["flywheel"]
    assert "**/*.safetensors" in patterns and "**/*.json" in patterns


def test_greedy_decoding_and_accuracy_on_untrained_model(base_dir):
    records = make_arithmetic_dataset(64, seed=0, split="val")
    model = AutoModelForCausalLM.from_pretrained(str(base_dir))
    outs = greedy_complete(model, TOKENIZER, [r["prompt"] for r in records], batch_size=20)
    assert len(outs) == 64 and all(len(o) <= 4 for o in outs)
    # Batch size must not change greedy results (no padding is involved).
    assert outs == greedy_complete(model, TOKENIZER, [r["prompt"] for r in records], batch_size=64)
    assert greedy_accuracy(base_dir, records) == 0.0  # random init never adds correctly
