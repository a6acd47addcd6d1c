"""The built-in tiny Qwen2 model: built locally and deterministically from a seed.

Why Qwen2: it is the architecture most RL post-training recipes start from, and every backend
the platform drives (transformers, vLLM, SGLang, Megatron converters) supports it, so the
tiny model exercises the real code paths rather than a toy module of our own.

Why these sizes (`TinyQwen2Spec` defaults, measured in BACKENDS.md): 4 layers of hidden 128
(~0.6M parameters) learn two-digit addition; 2 layers did not. 2 attention heads of head_dim
64 because vLLM's CPU attention kernel rejects head_dim 16 and 64 is known to work; 1 KV head
(GQA) keeps the KV-cache paths honest. Embeddings are tied (vLLM then needs `lm_head.weight`
sent explicitly on weight reload: see BACKENDS.md). float32 so CPU training is exact enough
for bit-reproducibility tests.

Determinism: the weights come from `torch.manual_seed(spec.seed)` inside `fork_rng`, so the
caller's RNG is untouched and the same seed gives byte-identical `model.safetensors` (on the
same torch version). The tokenizer is saved beside the model, so the directory is a complete
HF checkpoint: `AutoTokenizer` / `AutoModelForCausalLM` / vLLM load it by path.

Not here: the spec itself (`tiny_qwen2_spec.py`, importable without torch), caching and
names (`builtin.py`, `catalog.py`), training (`warm_start.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.utils import logging as hf_logging

from flywheel.platform.models.char_tokenizer import make_char_tokenizer
from flywheel.platform.models.tiny_qwen2_spec import TinyQwen2Spec


def qwen2_config(spec: TinyQwen2Spec, tokenizer: PreTrainedTokenizerFast) -> Qwen2Config:
    """The HF config for `spec`, with vocab size and special ids taken from the tokenizer."""
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        dtype="float32",
    )


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers draws tqdm bars on save/load; a 2 MB model does not need them."""
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def save_hf_checkpoint(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, out_dir: str | Path
) -> Path:
    """Write model (safetensors), config, generation config and tokenizer under `out_dir`."""
    out_dir = Path(out_dir)
    model.generation_config = GenerationConfig(
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with _no_progress_bars():
        model.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))
    return out_dir


def load_causal_lm(model_dir: str | Path) -> PreTrainedModel:
    """Load a checkpoint directory in float32 on CPU, quietly."""
    with _no_progress_bars():
        return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)


DEFAULT_SPEC = TinyQwen2Spec()  # frozen: one shared default is safe


def build_tiny_qwen2(out_dir: str | Path, spec: TinyQwen2Spec = DEFAULT_SPEC) -> Path:
    """Initialise the model from `spec.seed` and save a complete HF checkpoint to `out_dir`."""
    tokenizer = make_char_tokenizer()
    config = qwen2_config(spec, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config)
    return save_hf_checkpoint(model, tokenizer, out_dir)
