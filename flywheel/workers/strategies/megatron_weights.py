"""Hugging Face <-> Megatron-core weights for Qwen2 / Llama-style decoders.

Three pure steps, each testable without a process group or megatron itself:
  1. names and layouts, full tensors:  `hf_to_megatron` / `megatron_to_hf`
  2. tensor-parallel slicing:          `tp_shard` / `tp_unshard`
  3. pipeline stages:                  `stage_layers`, `to_global_layers` / `to_local_layers`
The strategy composes them: load = 1 -> 3 -> 2 on one rank; sync/save = 2 (all-gather over
the TP group) -> 3 (gather over the PP group) -> 1.

Layouts that differ from HF (megatron-core's local layer spec, `get_gpt_layer_local_spec`):
  - `linear_qkv` fuses q, k and v per query group: for each of the G groups, that group's
    heads_per_group query heads, then its key head, then its value head (rows of head_dim).
    Group-major, so a TP rank's slice is simply a contiguous block of whole groups.
  - `linear_fc1` stacks [gate; up]; a TP rank holds [gate_r; up_r] (its slice of each),
    because SwiGLU splits the local output in two halves.
  - Row-parallel layers (`linear_proj`, `linear_fc2`) are sliced along the input dim;
    embeddings and the output layer along the vocabulary; norms are replicated.
Tied embeddings: Megatron has no `output_layer.weight` on a single stage (and a synced
copy on the last stage with pipeline parallelism); HF gets `lm_head.weight` only untied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

SUPPORTED_MODEL_TYPES = ("qwen2", "llama")
_LAYER = re.compile(r"^(decoder\.layers\.)(\d+)(\..*)$")


@dataclass(frozen=True)
class DecoderSpec:
    """What the conversion needs to know about the architecture (from the HF config)."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int
    norm_eps: float
    rope_theta: float
    qkv_bias: bool
    tied: bool
    max_positions: int
    pad_token_id: int | None  # HF's nn.Embedding padding_idx: its input row gets no gradient

    @classmethod
    def from_hf(cls, config) -> DecoderSpec:
        if config.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"megatron_train converts {', '.join(SUPPORTED_MODEL_TYPES)} "
                             f"models; this one is '{config.model_type}'")
        rope = dict(getattr(config, "rope_parameters", None) or {})
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"megatron_train: rope_type '{rope['rope_type']}' is not "
                             "converted (only the default rotary embedding)")
        theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        heads = config.num_attention_heads
        return cls(
            num_layers=config.num_hidden_layers, hidden_size=config.hidden_size,
            num_heads=heads, num_kv_heads=config.num_key_value_heads or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            ffn_hidden_size=config.intermediate_size, vocab_size=config.vocab_size,
            norm_eps=config.rms_norm_eps, rope_theta=float(theta),
            qkv_bias=config.model_type == "qwen2" or bool(getattr(config, "attention_bias", 0)),
            tied=bool(config.tie_word_embeddings),
            max_positions=config.max_position_embeddings,
            pad_token_id=getattr(config, "pad_token_id", None),
        )


# ---- 1. names and layouts ------------------------------------------------------------
def hf_to_megatron(hf: dict[str, torch.Tensor], spec: DecoderSpec) -> dict[str, torch.Tensor]:
    out = {"embedding.word_embeddings.weight": hf["model.embed_tokens.weight"],
           "decoder.final_layernorm.weight": hf["model.norm.weight"]}
    if not spec.tied:
        out["output_layer.weight"] = hf["lm_head.weight"]
    for i in range(spec.num_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        attn = h + "self_attn."
        out[m + "input_layernorm.weight"] = hf[h + "input_layernorm.weight"]
        out[m + "self_attention.linear_qkv.weight"] = _fuse_qkv(
            [hf[attn + f"{p}_proj.weight"] for p in "qkv"], spec)
        if spec.qkv_bias:
            out[m + "self_attention.linear_qkv.bias"] = _fuse_qkv(
                [hf[attn + f"{p}_proj.bias"] for p in "qkv"], spec)
        out[m + "self_attention.linear_proj.weight"] = hf[attn + "o_proj.weight"]
        out[m + "pre_mlp_layernorm.weight"] = hf[h + "post_attention_layernorm.weight"]
        out[m + "mlp.linear_fc1.weight"] = torch.cat(
            [hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]])
        out[m + "mlp.linear_fc2.weight"] = hf[h + "mlp.down_proj.weight"]
    return out


def megatron_to_hf(meg: dict[str, torch.Tensor], spec: DecoderSpec) -> dict[str, torch.Tensor]:
    out = {"model.embed_tokens.weight": meg["embedding.word_embeddings.weight"],
           "model.norm.weight": meg["decoder.final_layernorm.weight"]}
    if not spec.tied:
        out["lm_head.weight"] = meg["output_layer.weight"]
    for i in range(spec.num_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        attn = h + "self_attn."
        out[h + "input_layernorm.weight"] = meg[m + "input_layernorm.weight"]
        parts = ("weight", "bias") if spec.qkv_bias else ("weight",)
        for part in parts:
            q, k, v = _split_qkv(meg[m + f"self_attention.linear_qkv.{part}"], spec)
            out.update({attn + f"q_proj.{part}": q, attn + f"k_proj.{part}": k,
                        attn + f"v_proj.{part}": v})
        out[attn + "o_proj.weight"] = meg[m + "self_attention.linear_proj.weight"]
        out[h + "post_attention_layernorm.weight"] = meg[m + "pre_mlp_layernorm.weight"]
        gate, up = meg[m + "mlp.linear_fc1.weight"].chunk(2)
        out[h + "mlp.gate_proj.weight"], out[h + "mlp.up_proj.weight"] = gate, up
        out[h + "mlp.down_proj.weight"] = meg[m + "mlp.linear_fc2.weight"]
    return out


def _fuse_qkv(qkv: list[torch.Tensor], spec: DecoderSpec) -> torch.Tensor:
    """[q; k; v] (HF, head-major) -> per query group [its q heads, k, v] (Megatron)."""
    q, k, v = qkv
    groups, d = spec.num_kv_heads, spec.head_dim
    tail = q.shape[1:]
    q = q.reshape(groups, (spec.num_heads // groups) * d, *tail)
    fused = torch.cat([q, k.reshape(groups, d, *tail), v.reshape(groups, d, *tail)], dim=1)
    return fused.reshape(-1, *tail)


def _split_qkv(fused: torch.Tensor, spec: DecoderSpec) -> tuple[torch.Tensor, ...]:
    groups, d = spec.num_kv_heads, spec.head_dim
    per_group = (spec.num_heads // groups) * d
    tail = fused.shape[1:]
    q, k, v = fused.reshape(groups, per_group + 2 * d, *tail).split([per_group, d, d], dim=1)
    return (q.reshape(-1, *tail).contiguous(), k.reshape(-1, *tail).contiguous(),
            v.reshape(-1, *tail).contiguous())


# ---- 2. tensor parallelism -----------------------------------------------------------
def tp_dim(name: str) -> int | None:
    """The dimension a TP rank slices `name` along; None = replicated on every TP rank."""
    if name.endswith(("word_embeddings.weight", "output_layer.weight", "linear_qkv.weight",
                      "linear_qkv.bias", "linear_fc1.weight")):
        return 0
    if name.endswith(("linear_proj.weight", "linear_fc2.weight")):
        return 1
    return None


def tp_shard(name: str, full: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    dim = tp_dim(name)
    if dim is None or size == 1:
        return full
    if name.endswith("linear_fc1.weight"):
        gate, up = full.chunk(2)
        return torch.cat([gate.chunk(size)[rank], up.chunk(size)[rank]])
    return full.chunk(size, dim=dim)[rank].contiguous()


def tp_unshard(name: str, shards: list[torch.Tensor]) -> torch.Tensor:
    dim = tp_dim(name)
    if dim is None or len(shards) == 1:
        return shards[0]
    if name.endswith("linear_fc1.weight"):
        halves = [s.chunk(2) for s in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves])
    return torch.cat(shards, dim=dim)


# ---- 3. pipeline stages --------------------------------------------------------------
def stage_layers(num_layers: int, pp_rank: int, pp_size: int) -> range:
    """Global indices of the decoder layers on pipeline stage `pp_rank` (uniform split)."""
    per_stage = num_layers // pp_size
    return range(pp_rank * per_stage, (pp_rank + 1) * per_stage)


def to_global_layers(local: dict[str, torch.Tensor], offset: int) -> dict[str, torch.Tensor]:
    return {_renumber(k, offset): v for k, v in local.items()}


def to_local_layers(full: dict[str, torch.Tensor], layers: range, first: bool, last: bool,
                    tied: bool) -> dict[str, torch.Tensor]:
    """The entries of a full Megatron state dict that live on this stage, renumbered."""
    out = {}
    for k, v in full.items():
        match = _LAYER.match(k)
        if match:
            if int(match.group(2)) in layers:
                out[_renumber(k, -layers.start)] = v
        elif (first and k.startswith("embedding.")) or (
                last and k.startswith(("decoder.final_layernorm", "output_layer"))):
            out[k] = v
    if tied and last and not first:  # the last stage's copy of the tied embedding
        out["output_layer.weight"] = full["embedding.word_embeddings.weight"]
    return out


def _renumber(name: str, offset: int) -> str:
    match = _LAYER.match(name)
    if not match:
        return name
    return f"{match.group(1)}{int(match.group(2)) + offset}{match.group(3)}"
