"""HF <-> Megatron weight conversion: pure functions, no megatron-core needed.

The layouts are checked by construction (round trips) and against hand-built tensors
(which rows of the fused qkv belong to which head, which slice a TP rank holds).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, Qwen2Config

from flywheel.workers.strategies.megatron_weights import (
    DecoderSpec,
    hf_to_megatron,
    megatron_to_hf,
    stage_layers,
    to_global_layers,
    to_local_layers,
    tp_shard,
    tp_unshard,
)


def spec_and_weights(heads=4, kv_heads=2, tied=False, layers=2):
    config = Qwen2Config(vocab_size=12, hidden_size=16, intermediate_size=24,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, head_dim=4,
                         tie_word_embeddings=tied)
    spec = DecoderSpec.from_hf(config)
    generator = torch.Generator().manual_seed(0)
    shapes = {"model.embed_tokens.weight": (12, 16), "model.norm.weight": (16,)}
    if not tied:
        shapes["lm_head.weight"] = (12, 16)
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (16,), p + "post_attention_layernorm.weight": (16,),
            p + "self_attn.q_proj.weight": (heads * 4, 16),
            p + "self_attn.q_proj.bias": (heads * 4,),
            p + "self_attn.k_proj.weight": (kv_heads * 4, 16),
            p + "self_attn.k_proj.bias": (kv_heads * 4,),
            p + "self_attn.v_proj.weight": (kv_heads * 4, 16),
            p + "self_attn.v_proj.bias": (kv_heads * 4,),
            p + "self_attn.o_proj.weight": (16, heads * 4),
            p + "mlp.gate_proj.weight": (24, 16), p + "mlp.up_proj.weight": (24, 16),
            p + "mlp.down_proj.weight": (16, 24)})
    return spec, {k: torch.randn(s, generator=generator) for k, s in shapes.items()}


@pytest.mark.parametrize("tied", [False, True])
def test_hf_megatron_round_trip_is_exact(tied):
    spec, hf = spec_and_weights(tied=tied)
    back = megatron_to_hf(hf_to_megatron(hf, spec), spec)
    assert back.keys() == hf.keys()
    for k, v in hf.items():
        assert torch.equal(back[k], v), k


def test_fused_qkv_is_grouped_by_kv_head():
    spec, hf = spec_and_weights(heads=4, kv_heads=2)
    qkv = hf_to_megatron(hf, spec)["decoder.layers.0.self_attention.linear_qkv.weight"]
    q, k, v = (hf[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qkv")
    d = 4  # head_dim; 2 query heads per group: [q0 q1 k0 v0 | q2 q3 k1 v1]
    expected = torch.cat([q[0:2 * d], k[0:d], v[0:d], q[2 * d:4 * d], k[d:2 * d], v[d:2 * d]])
    assert torch.equal(qkv, expected)


def test_tensor_parallel_slices_round_trip_and_keep_whole_groups():
    spec, hf = spec_and_weights(heads=4, kv_heads=2)
    meg = hf_to_megatron(hf, spec)
    for name, full in meg.items():
        shards = [tp_shard(name, full, r, 2) for r in range(2)]
        assert torch.equal(tp_unshard(name, shards), full), name
    fc1 = meg["decoder.layers.0.mlp.linear_fc1.weight"]
    gate, up = hf["model.layers.0.mlp.gate_proj.weight"], hf["model.layers.0.mlp.up_proj.weight"]
    assert torch.equal(tp_shard("decoder.layers.0.mlp.linear_fc1.weight", fc1, 1, 2),
                       torch.cat([gate[12:], up[12:]]))  # rank 1: [gate_1; up_1]
    qkv = meg["decoder.layers.0.self_attention.linear_qkv.weight"]
    rank0 = tp_shard("decoder.layers.0.self_attention.linear_qkv.weight", qkv, 0, 2)
    assert torch.equal(rank0, qkv[:16])  # one whole group: 2 q heads, k, v (4 rows each)
    norm = meg["decoder.layers.0.input_layernorm.weight"]
    assert tp_shard("decoder.layers.0.input_layernorm.weight", norm, 1, 2) is norm


@pytest.mark.parametrize("tied", [False, True])
def test_pipeline_stages_partition_the_layers(tied):
    spec, hf = spec_and_weights(tied=tied, layers=4)
    meg = hf_to_megatron(hf, spec)
    merged = {}
    for rank in range(2):
        layers = stage_layers(4, rank, 2)
        local = to_local_layers(meg, layers, first=rank == 0, last=rank == 1, tied=tied)
        assert {k.split(".")[2] for k in local if k.startswith("decoder.layers.")} == {"0", "1"}
        assert ("embedding.word_embeddings.weight" in local) == (rank == 0)
        assert ("output_layer.weight" in local) == (rank == 1)  # tied: the last stage's copy
        merged.update(to_global_layers(local, layers.start))
    assert torch.equal(megatron_to_hf(merged, spec)["model.layers.3.mlp.up_proj.weight"],
                       hf["model.layers.3.mlp.up_proj.weight"])


def test_unsupported_architectures_are_named(tiny_model_path):
    config = AutoConfig.from_pretrained(tiny_model_path)
    config.model_type = "gpt2"
    with pytest.raises(ValueError, match="'gpt2'"):
        DecoderSpec.from_hf(config)


def tiny_moe(kind: str):
    """A random tiny Qwen3-MoE (q/k norms, renormalised top-k) or Qwen2-MoE (qkv bias, a
    gated shared expert), built from transformers' config class (no hub)."""
    from transformers import (
        Qwen2MoeConfig,
        Qwen2MoeForCausalLM,
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
    )

    common = dict(vocab_size=32, hidden_size=16, intermediate_size=24,
                  moe_intermediate_size=8, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, num_experts=4, num_experts_per_tok=2)
    torch.manual_seed(0)
    if kind == "qwen3_moe":
        return Qwen3MoeForCausalLM(Qwen3MoeConfig(head_dim=4, norm_topk_prob=True, **common))
    return Qwen2MoeForCausalLM(Qwen2MoeConfig(shared_expert_intermediate_size=12, **common))


@pytest.mark.parametrize("kind", ["qwen3_moe", "qwen2_moe"])
def test_moe_round_trip_is_bit_identical_from_the_model_and_from_its_files(kind, tmp_path):
    """HF -> Megatron -> HF gives transformers' own tensors back, bit for bit, whether
    read from the model (fused experts) or from its saved files (one entry per expert);
    EP 2 shards hold half the experts each and merge back to the whole."""
    from flywheel.workers.strategies.megatron_parallel import load_hf_tensors
    from flywheel.workers.strategies.megatron_weights import ep_shard, ep_unshard, is_expert

    model = tiny_moe(kind)
    spec = DecoderSpec.from_hf(model.config)
    assert spec.moe and spec.num_experts == 4
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight" or not spec.tied}
    meg = hf_to_megatron(state, spec)
    assert meg["decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight"].shape == (16, 16)
    back = megatron_to_hf(meg, spec)
    assert back.keys() == state.keys()
    assert all(torch.equal(back[k], v) for k, v in state.items())
    model.save_pretrained(tmp_path)
    files = load_hf_tensors(str(tmp_path))
    assert "model.layers.0.mlp.experts.2.gate_proj.weight" in files  # the per-expert form
    from_files = megatron_to_hf(hf_to_megatron(files, spec), spec)
    assert all(torch.equal(from_files[k], v) for k, v in state.items())
    shards = [ep_shard(meg, rank, 2, spec.num_experts) for rank in range(2)]
    experts = [sorted(k for k in shard if is_expert(k)) for shard in shards]
    # 2 layers x 2 experts x (fc1, fc2) on each rank
    assert experts[0] == experts[1] and len(experts[0]) == 2 * 2 * 2
    assert torch.equal(shards[1]["decoder.layers.0.mlp.experts.local_experts.0.linear_fc2.weight"],
                       meg["decoder.layers.0.mlp.experts.local_experts.2.linear_fc2.weight"])
    merged = ep_unshard(shards, spec.num_experts)
    assert merged.keys() == meg.keys() and all(torch.equal(merged[k], v) for k, v in meg.items())
    # expert_tensor_parallel_size 2: each expert's fc1 as [gate_r; up_r], fc2 by its input
    x = "decoder.layers.0.mlp.experts.local_experts.1."
    fc1, fc2 = meg[x + "linear_fc1.weight"], meg[x + "linear_fc2.weight"]  # [2I, H], [H, I]
    gate, up = fc1.chunk(2)
    assert torch.equal(tp_shard(x + "linear_fc1.weight", fc1, 1, 2),
                       torch.cat([gate[4:], up[4:]]))
    assert torch.equal(tp_shard(x + "linear_fc2.weight", fc2, 1, 2), fc2[:, 4:])
    for name in (x + "linear_fc1.weight", x + "linear_fc2.weight"):
        assert torch.equal(tp_unshard(name, [tp_shard(name, meg[name], r, 2) for r in range(2)]),
                           meg[name])
    router = meg["decoder.layers.0.mlp.router.weight"]
    assert tp_shard("decoder.layers.0.mlp.router.weight", router, 1, 2) is router
