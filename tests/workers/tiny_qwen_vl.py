"""A tiny random-init Qwen2.5-VL checkpoint saved the way a user's is (model, tokenizer with
its chat template, the PIL image processor), for the loading path a Qwen2.5-VL checkpoint
takes (issue 29): no hub here, so the test builds it. Qwen2.5-VL's rotary positions are
3-D (time, height, width: multimodal RoPE, Qwen2-VL, Wang et al. 2024, arXiv:2409.12191);
`mrope_section` splits the 16 rotary pairs of each head among the three."""

from __future__ import annotations

from pathlib import Path

VISION = "<|vision_start|><|image_pad|><|vision_end|>"
SPECIAL = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}"
    "{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'image' %}" + VISION
    + "{% else %}{{ p.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_qwen2_5_vl(out: Path) -> Path:
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    from flywheel.platform.models.char_tokenizer import make_char_tokenizer

    tokenizer = make_char_tokenizer()
    tokenizer.split_special_tokens = False
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL})
    tokenizer.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(out)
    Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=112 * 112).save_pretrained(out)
    token = tokenizer.convert_tokens_to_ids
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, vocab_size=len(tokenizer),
                max_position_embeddings=1024, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                 "mrope_section": [4, 6, 6]},
                pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
                initializer_range=0.2)  # sharper than 0.02: positions show in the numbers
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                  out_hidden_size=64, patch_size=14, spatial_merge_size=2,
                  temporal_patch_size=2, fullatt_block_indexes=[0], window_size=56)
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=False,
        image_token_id=token("<|image_pad|>"), video_token_id=token("<|video_pad|>"),
        vision_start_token_id=token("<|vision_start|>"),
        vision_end_token_id=token("<|vision_end|>"))
    torch.manual_seed(0)
    Qwen2_5_VLForConditionalGeneration(config).save_pretrained(out)
    return out
