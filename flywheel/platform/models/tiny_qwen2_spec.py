"""The tiny Qwen2's architecture and init seed (`tiny_qwen2.py` builds it; the sizes' reasons
are there). Apart so that the catalog of built-in models imports no torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TinyQwen2Spec:
    """Architecture and init seed of the tiny model. Every field enters the cache key."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 2  # head_dim = hidden_size / heads = 64 (vLLM CPU needs 32/64)
    num_key_value_heads: int = 1
    max_position_embeddings: int = 512
    seed: int = 0

    @property
    def head_dim(self) -> int:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} must be divisible by "
                f"num_attention_heads {self.num_attention_heads}"
            )
        return self.hidden_size // self.num_attention_heads
