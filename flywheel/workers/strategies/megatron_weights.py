"""Hugging Face <-> Megatron-core weights for Qwen2 / Llama-style decoders and the
Qwen2-MoE / Qwen3-MoE mixtures of experts.

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
MoE layers (megatron-core's MoELayer with the local SequentialMLP experts): the router
`mlp.router.weight` is HF's `mlp.gate.weight`; expert e's `linear_fc1` stacks its
[gate; up] like a dense MLP and `linear_fc2` is its down projection. HF holds the experts
two ways: a checkpoint file writes each expert's gate_proj / up_proj / down_proj, and
transformers' model (what hf_train syncs and hf_infer loads) fuses them into
`experts.gate_up_proj` [E, 2I, H] and `experts.down_proj` [E, H, I]; `hf_to_megatron`
reads either, `megatron_to_hf` writes the fused form. Qwen2-MoE's shared expert is
megatron's `shared_experts` (TP-sliced like a dense MLP) with its sigmoid gate
`gate_weight`. Qwen3's per-head q/k RMSNorms are `q_layernorm` / `k_layernorm`.
  4. expert parallelism: `ep_shard` / `ep_unshard` give EP rank r the experts
     [r E/EP, (r+1) E/EP), renumbered from 0 (megatron's local_experts); with
     `expert_tensor_parallel_size` > 1 each expert's fc1 / fc2 is then sliced by
     `tp_shard` as a dense MLP's, over the expert-tensor-parallel ranks.
Tied embeddings: Megatron has no `output_layer.weight` on a single stage (and a synced
copy on the last stage with pipeline parallelism); HF gets `lm_head.weight` only untied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from flywheel.workers.strategies.megatron_options import MOE_MODEL_TYPES

SUPPORTED_MODEL_TYPES = ("qwen2", "llama", *MOE_MODEL_TYPES)
_LAYER = re.compile(r"^(decoder\.layers\.)(\d+)(\..*)$")
_EXPERT = re.compile(r"^(.*\.mlp\.experts\.local_experts\.)(\d+)(\..*)$")


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
    # ---- MoE (num_experts 0: a dense MLP in every layer) ----
    num_experts: int = 0
    moe_ffn_hidden_size: int = 0
    top_k: int = 0
    norm_topk_prob: bool = False  # renormalise the top-k probabilities (Qwen3-30B-A3B)
    shared_expert_size: int = 0  # Qwen2-MoE's gated shared expert
    qk_norm: bool = False  # Qwen3's per-head RMSNorm of queries and keys
    router_aux_loss_coef: float | None = None  # the checkpoint's, for moe_aux_loss_coef: model

    @property
    def moe(self) -> bool:
        return self.num_experts > 0

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
        moe = config.model_type in MOE_MODEL_TYPES
        if moe and (getattr(config, "decoder_sparse_step", 1) != 1
                    or getattr(config, "mlp_only_layers", None)):
            raise ValueError("megatron_train converts MoE models whose every layer is MoE "
                             "(decoder_sparse_step 1, no mlp_only_layers)")
        return cls(
            num_layers=config.num_hidden_layers, hidden_size=config.hidden_size,
            num_heads=heads, num_kv_heads=config.num_key_value_heads or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            ffn_hidden_size=config.intermediate_size, vocab_size=config.vocab_size,
            norm_eps=config.rms_norm_eps, rope_theta=float(theta),
            qkv_bias=config.model_type in ("qwen2", "qwen2_moe")
            or bool(getattr(config, "attention_bias", 0)),
            tied=bool(config.tie_word_embeddings),
            max_positions=config.max_position_embeddings,
            pad_token_id=getattr(config, "pad_token_id", None),
            num_experts=config.num_experts if moe else 0,
            moe_ffn_hidden_size=config.moe_intermediate_size if moe else 0,
            top_k=config.num_experts_per_tok if moe else 0,
            norm_topk_prob=bool(getattr(config, "norm_topk_prob", False)),
            shared_expert_size=getattr(config, "shared_expert_intermediate_size", 0) or 0,
            qk_norm=config.model_type == "qwen3_moe",
            router_aux_loss_coef=getattr(config, "router_aux_loss_coef", None),
        )


# ---- 1. names and layouts ------------------------------------------------------------
def _renamed(spec: DecoderSpec) -> list[tuple[str, str]]:
    """(HF, Megatron) names, under a layer's prefix, of the tensors that only change name."""
    pairs = [("input_layernorm.weight", "input_layernorm.weight"),
             ("self_attn.o_proj.weight", "self_attention.linear_proj.weight"),
             ("post_attention_layernorm.weight", "pre_mlp_layernorm.weight")]
    if spec.qk_norm:
        pairs += [("self_attn.q_norm.weight", "self_attention.q_layernorm.weight"),
                  ("self_attn.k_norm.weight", "self_attention.k_layernorm.weight")]
    return pairs


def hf_to_megatron(hf: dict[str, torch.Tensor], spec: DecoderSpec) -> dict[str, torch.Tensor]:
    out = {"embedding.word_embeddings.weight": hf["model.embed_tokens.weight"],
           "decoder.final_layernorm.weight": hf["model.norm.weight"]}
    if not spec.tied:
        out["output_layer.weight"] = hf["lm_head.weight"]
    for i in range(spec.num_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        attn = h + "self_attn."
        out.update({m + meg_name: hf[h + hf_name] for hf_name, meg_name in _renamed(spec)})
        out[m + "self_attention.linear_qkv.weight"] = _fuse_qkv(
            [hf[attn + f"{p}_proj.weight"] for p in "qkv"], spec)
        if spec.qkv_bias:
            out[m + "self_attention.linear_qkv.bias"] = _fuse_qkv(
                [hf[attn + f"{p}_proj.bias"] for p in "qkv"], spec)
        if spec.moe:
            out.update(_moe_to_megatron(hf, h + "mlp.", m + "mlp.", spec))
            continue
        out[m + "mlp.linear_fc1.weight"] = torch.cat(
            [hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]])
        out[m + "mlp.linear_fc2.weight"] = hf[h + "mlp.down_proj.weight"]
    return out


def _moe_to_megatron(hf: dict[str, torch.Tensor], h: str, m: str,
                     spec: DecoderSpec) -> dict[str, torch.Tensor]:
    """One MoE block: HF `h` (".mlp.") -> megatron `m`, experts from either HF form."""
    out = {m + "router.weight": hf[h + "gate.weight"]}
    fused = h + "experts.gate_up_proj" in hf
    for e in range(spec.num_experts):
        x = f"{m}experts.local_experts.{e}."
        if fused:  # transformers' model: [E, 2I, H] (gate rows, then up rows), [E, H, I]
            out[x + "linear_fc1.weight"] = hf[h + "experts.gate_up_proj"][e]
            out[x + "linear_fc2.weight"] = hf[h + "experts.down_proj"][e]
        else:  # a checkpoint file: each expert's own projections
            p = f"{h}experts.{e}."
            out[x + "linear_fc1.weight"] = torch.cat([hf[p + "gate_proj.weight"],
                                                      hf[p + "up_proj.weight"]])
            out[x + "linear_fc2.weight"] = hf[p + "down_proj.weight"]
    if spec.shared_expert_size:
        s = h + "shared_expert."
        out[m + "shared_experts.linear_fc1.weight"] = torch.cat(
            [hf[s + "gate_proj.weight"], hf[s + "up_proj.weight"]])
        out[m + "shared_experts.linear_fc2.weight"] = hf[s + "down_proj.weight"]
        out[m + "shared_experts.gate_weight"] = hf[h + "shared_expert_gate.weight"]
    return out


def _moe_to_hf(meg: dict[str, torch.Tensor], m: str, h: str,
               spec: DecoderSpec) -> dict[str, torch.Tensor]:
    """One MoE block: megatron `m` -> HF `h` in transformers' fused form."""
    out = {h + "gate.weight": meg[m + "router.weight"]}
    experts = [f"{m}experts.local_experts.{e}." for e in range(spec.num_experts)]
    out[h + "experts.gate_up_proj"] = torch.stack([meg[x + "linear_fc1.weight"]
                                                   for x in experts])
    out[h + "experts.down_proj"] = torch.stack([meg[x + "linear_fc2.weight"] for x in experts])
    if spec.shared_expert_size:
        s = h + "shared_expert."
        gate, up = meg[m + "shared_experts.linear_fc1.weight"].chunk(2)
        out[s + "gate_proj.weight"], out[s + "up_proj.weight"] = gate, up
        out[s + "down_proj.weight"] = meg[m + "shared_experts.linear_fc2.weight"]
        out[h + "shared_expert_gate.weight"] = meg[m + "shared_experts.gate_weight"]
    return out


def megatron_to_hf(meg: dict[str, torch.Tensor], spec: DecoderSpec) -> dict[str, torch.Tensor]:
    out = {"model.embed_tokens.weight": meg["embedding.word_embeddings.weight"],
           "model.norm.weight": meg["decoder.final_layernorm.weight"]}
    if not spec.tied:
        out["lm_head.weight"] = meg["output_layer.weight"]
    for i in range(spec.num_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        attn = h + "self_attn."
        out.update({h + hf_name: meg[m + meg_name] for hf_name, meg_name in _renamed(spec)})
        parts = ("weight", "bias") if spec.qkv_bias else ("weight",)
        for part in parts:
            q, k, v = _split_qkv(meg[m + f"self_attention.linear_qkv.{part}"], spec)
            out.update({attn + f"q_proj.{part}": q, attn + f"k_proj.{part}": k,
                        attn + f"v_proj.{part}": v})
        if spec.moe:
            out.update(_moe_to_hf(meg, m + "mlp.", h + "mlp.", spec))
            continue
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
    """The dimension a TP rank slices `name` along; None = replicated on every TP rank
    (the router). A routed expert's linear layers slice as a dense MLP's, over the
    expert-tensor-parallel ranks (`expert_tensor_parallel_size`) instead: the caller passes
    those ranks' coordinates to `tp_shard` for them (`is_expert`)."""
    if name.endswith("router.weight"):
        return None
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


# ---- 4. expert parallelism ------------------------------------------------------------
def is_expert(name: str) -> bool:
    """A routed expert's parameter: sharded over EP, not replicated over the DP ranks."""
    return _EXPERT.match(name) is not None


def ep_shard(full: dict[str, torch.Tensor], rank: int, size: int,
             num_experts: int) -> dict[str, torch.Tensor]:
    """EP rank `rank`'s entries of a Megatron state dict: its experts renumbered from 0,
    everything else as is."""
    per_rank = num_experts // size
    out = {}
    for k, v in full.items():
        match = _EXPERT.match(k)
        if not match:
            out[k] = v
            continue
        expert = int(match.group(2)) - rank * per_rank
        if 0 <= expert < per_rank:
            out[f"{match.group(1)}{expert}{match.group(3)}"] = v
    return out


def ep_unshard(shards: list[dict[str, torch.Tensor]], num_experts: int
               ) -> dict[str, torch.Tensor]:
    """The EP ranks' state dicts (in rank order) merged, experts numbered globally."""
    per_rank = num_experts // len(shards)
    out = {}
    for rank, shard in enumerate(shards):
        for k, v in shard.items():
            match = _EXPERT.match(k)
            if match:
                k = f"{match.group(1)}{int(match.group(2)) + rank * per_rank}{match.group(3)}"
            out.setdefault(k, v)  # a non-expert entry: the same on every EP rank
    return out


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
