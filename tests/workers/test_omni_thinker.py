"""A Qwen3-Omni checkpoint on hf_infer and hf_train (issue 29 item 5, ROLL's Omni RLVR
file): a tiny random-init Qwen3-Omni with a talker, saved whole as transformers writes it,
loads as its thinker (the `thinker.*` weights, nothing random); prompts go through its
processor's image path (QwenVLPieces without torchvision); hf_train's log-probs with the
image equal hf_infer's and differ without it; freezing ROLL's towers (in transformers'
names) keeps them bit-identical through a train step; the saved checkpoint reloads as the
trained thinker, and `platform export` writes the full Omni checkpoint back (the talker
carried unchanged); deepspeed_train scores the image batch like hf_infer."""

from __future__ import annotations

import pytest
import torch
import yaml
from vl_cases import image

from flywheel.algorithms import PolicyLossParams
from flywheel.cli import main
from flywheel.config.schema import ModelArgs, TrainingArgs, WorkerConfig
from flywheel.pipelines.data.image_prompts import ImageItem, ImagePromptEncoder
from flywheel.pipelines.data.qwen_vl_pieces import QwenVLPieces, load_vl_processor
from flywheel.platform.checkpoint import writing_checkpoint
from flywheel.workers.actor_loss import ActorLoss
from flywheel.workers.batch import pack_sequences
from flywheel.workers.image_inputs import RowImages
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_model import load_causal_lm
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.router_loss import METRIC

N = 2  # samples per prompt
VISION = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>",
          "<|audio_start|>", "<|audio_pad|>"]
TEMPLATE = ("{% for m in messages %}{{ m.role }}: {% if m.content is string %}{{ m.content }}"
            "{% else %}{% for p in m.content %}{% if p.type == 'image' %}"
            "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ p.text }}{% endif %}"
            "{% endfor %}{% endif %}{{ '\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}assistant: {% endif %}")


def build_tiny_omni(out) -> dict[str, torch.Tensor]:
    """A whole Qwen3-Omni (thinker + talker + code2wav) of a few layers saved in `out`
    with a char tokenizer and a Qwen2-VL PIL image processor (16 px patches, 2x2 merge);
    returns its state dict (the names of the saved checkpoint)."""
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    from flywheel.platform.models.char_tokenizer import make_char_tokenizer
    tokenizer = make_char_tokenizer()
    tokenizer.split_special_tokens = False
    tokenizer.add_special_tokens({"additional_special_tokens": VISION})
    tokenizer.chat_template = TEMPLATE
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION}
    text = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                head_dim=32, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                max_position_embeddings=512,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                 "mrope_section": [8, 4, 4], "interleaved": True})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                  num_position_embeddings=64, deepstack_visual_indexes=[1])
    audio = dict(num_mel_bins=16, encoder_layers=1, encoder_attention_heads=2,
                 encoder_ffn_dim=32, d_model=16, output_dim=64, downsample_hidden_size=8,
                 max_source_positions=64)
    small = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    # transformers 5.19's talker config defaults lack two fields its model reads
    talker = dict(text_config=dict(small, moe_intermediate_size=16, num_experts=2,
                                   num_experts_per_tok=1, shared_expert_intermediate_size=16),
                  code_predictor_config=dict(small, num_code_groups=2), num_code_groups=2,
                  thinker_hidden_size=64, accept_hidden_layer=1, spatial_merge_size=2)
    code2wav = dict(codebook_size=64, hidden_size=32, num_attention_heads=2,
                    num_key_value_heads=2, intermediate_size=64, num_hidden_layers=1,
                    num_quantizers=2, upsample_rates=[2, 2], upsampling_ratios=[2],
                    decoder_dim=32, sliding_window=8)
    config = Qwen3OmniMoeConfig(
        thinker_config=dict(audio_config=audio, vision_config=vision, text_config=text,
                            image_token_id=ids["<|image_pad|>"],
                            video_token_id=ids["<|video_pad|>"],
                            audio_token_id=ids["<|audio_pad|>"],
                            audio_start_token_id=ids["<|audio_start|>"],
                            vision_start_token_id=ids["<|vision_start|>"]),
        talker_config=talker, code2wav_config=code2wav)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Qwen3OmniMoeForConditionalGeneration(config).float()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, temporal_patch_size=2,
                             min_pixels=32 * 32, max_pixels=64 * 64).save_pretrained(out)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def omni(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_qwen3_omni")
    return str(out), build_tiny_omni(out)


@pytest.fixture(scope="module")
def sampled(omni):
    """hf_infer's samples of an image prompt and a text prompt, as a train batch."""
    path, _ = omni
    processor = load_vl_processor(path)
    assert isinstance(processor, QwenVLPieces)  # no torchvision: the processor's pieces
    encode = ImagePromptEncoder(processor, template="chat")
    square = image((220, 20, 20), (64, 60))
    encoded = [encode(ImageItem("a", "what colour is the square?", [square])),
               encode(ImageItem("t", "say a colour", []))]
    ids, images = [e.prompt_ids for e in encoded], [e.inputs() for e in encoded]
    # 64x60 -> 64x64 px (multiples of 32): 4x4 patches of 16 px, 2x2 merged: 4 image tokens
    assert images[0].features["image_grid_thw"].tolist() == [[1, 4, 4]]
    infer = HFInferStrategy(path, WorkerConfig(infer_batch_size=4), seed=0)
    gens = infer.generate(ids, SamplingParams(max_new_tokens=5, n=N, seed=3), images)
    batch = pack_sequences([ids[g.prompt_index] for g in gens], [g.token_ids for g in gens],
                           pad_id=0, infer_log_probs=[g.log_probs for g in gens],
                           images=RowImages.of(images).repeat(N))
    return infer, batch


def train(path, freeze=None, aux=None):
    cfg = WorkerConfig(model_args=ModelArgs(freeze_module_prefix=freeze, moe_aux_loss_coef=aux),
                       training_args=TrainingArgs(learning_rate=1e-2, max_grad_norm=0.0,
                                                  per_device_train_batch_size=4))
    return HFTrainStrategy(path, cfg, seed=0, total_steps=2)


def test_the_full_checkpoint_loads_as_its_thinker(omni, sampled):
    path, saved = omni
    infer, _ = sampled
    model = infer.model
    assert type(model).__name__ == "Qwen3OmniMoeThinkerForConditionalGeneration"
    loaded = model.state_dict()
    thinker = {k.removeprefix("thinker."): v for k, v in saved.items()
               if k.startswith("thinker.")}
    assert set(loaded) == set(thinker)  # no talker, no code2wav
    assert all(torch.equal(loaded[k], thinker[k]) for k in thinker)  # nothing random


def test_hf_train_logprobs_equal_hf_infers_with_the_image_and_differ_without(omni, sampled):
    path, _ = omni
    _, batch = sampled
    trainer = train(path)
    mask = batch.response_mask.bool()
    with_image = trainer.forward_logprobs(batch)
    assert torch.allclose(with_image[mask], batch.infer_log_probs[mask], atol=1e-5)
    batch.images, kept = None, batch.images
    without = trainer.forward_logprobs(batch)
    batch.images = kept
    rows = mask[:N]  # the image prompt's samples
    assert (without[:N][rows] - batch.infer_log_probs[:N][rows]).abs().max() > 1e-3
    assert torch.allclose(without[N:][mask[N:]], batch.infer_log_probs[N:][mask[N:]],
                          atol=1e-5)


def test_frozen_towers_stay_bit_identical_and_the_checkpoint_reloads_and_exports(
        omni, sampled, tmp_path):
    path, _ = omni
    _, batch = sampled
    batch.old_log_probs = batch.infer_log_probs
    torch.manual_seed(0)
    batch.advantages = torch.randn(len(batch))[:, None] * batch.response_mask
    loss = ActorLoss("ppo", PolicyLossParams(), "seq-mean-token-mean", norm_length=5)
    # interop/roll/fit/vl.py's names for ROLL's prefix; the converted file's router loss
    # ("model": the thinker's text_config.router_aux_loss_coef)
    trainer = train(path, "visual,audio_tower", aux="model")
    before = {k: v.clone() for k, v in trainer.state_dict_for_sync().items()}
    assert trainer.train_step(batch, loss)[METRIC] > 0
    after = trainer.state_dict_for_sync()
    towers = [k for k in before if k.startswith(("visual.", "audio_tower."))]
    text = [k for k in before if k.startswith("model.layers.")]
    assert towers and text
    assert all(torch.equal(before[k], after[k]) for k in towers)
    assert any(not torch.equal(before[k], after[k]) for k in text)
    # the run's checkpoint holds the thinker alone, which reloads as trained
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"pretrain": path}))
    with writing_checkpoint(run_dir, 1) as tmp:
        trainer.save(str(tmp / "actor_train"))
    reloaded = load_causal_lm(str(run_dir / "checkpoint-1" / "actor_train" / "model"),
                              ModelArgs(), torch.device("cpu")).state_dict()
    assert set(reloaded) == set(after)
    assert all(torch.equal(reloaded[k], after[k]) for k in after)
    # `platform export` writes the full Omni checkpoint: the trained thinker, the base's
    # talker and code2wav unchanged, the processor's files; transformers' whole model and
    # flywheel (its thinker) load it
    out = tmp_path / "served"
    assert main(["export", str(run_dir), "-o", str(out), "--dtype", "fp32"]) == 0
    from transformers import Qwen3OmniMoeForConditionalGeneration
    whole = Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        out, dtype=torch.float32).state_dict()  # explicit: run after
    # tests/models/test_smollm2_infer_parity.py (an in-process vLLM engine), it loaded other
    # talker values without it
    _, saved = omni
    assert set(whole) == set(saved)
    assert all(torch.equal(whole[f"thinker.{k}"], after[k]) for k in after)
    speech = [k for k in saved if k.startswith(("talker.", "code2wav."))]
    assert speech and all(torch.equal(whole[k], saved[k]) for k in speech)
    assert isinstance(load_vl_processor(out), QwenVLPieces)
    again = load_causal_lm(str(out), ModelArgs(), torch.device("cpu")).state_dict()
    assert all(torch.equal(again[k], after[k]) for k in after)


@pytest.mark.slow
@pytest.mark.long  # a Ray cluster per stage: ~8 s each on 2 cores (make test-long)
@pytest.mark.parametrize("stage", [0, 3])
def test_deepspeed_scores_the_image_batch_like_hf_train(omni, sampled, train_cluster, stage):
    """The converted ROLL file's layout: deepspeed_train's reference at ZeRO-0 (the chunked
    path, judged through the engine: hf_model.own_logits) and its actor at ZeRO-3 (the
    model's own forward) give hf_infer's log-probs of the image batch."""
    pytest.importorskip("deepspeed")
    path, _ = omni
    _, batch = sampled
    cluster = train_cluster("deepspeed_train", path, 1, {"zero_stage": stage},
                            per_device=4, accum=1)
    got = cluster.scatter("forward_logprobs", batch.shard(1))[0]
    mask = batch.response_mask.bool()
    assert torch.allclose(got[mask], batch.infer_log_probs[mask], atol=1e-5)
