"""A user's Qwen2.5-VL checkpoint on hf_infer and hf_train (issue 29 item 2), through the
loading path it takes (a random-init one saved and reloaded: tiny_qwen_vl.py). Its prompts
come from `load_vl_processor` (the Qwen-VL pieces: this machine has no torchvision). The
sampler's log-probs, decoded step by step with the KV cache, equal the trainer's one
forward over prompt and response with the images: the two place the 3-D rotary positions
the same way. Plain 1-D positions give other numbers, so the parity checks them.
`freeze_module_prefix: visual` (the converter's name for ROLL's vision_model) takes
exactly transformers' `model.visual.*`, and the weight sync leaves it out."""

from __future__ import annotations

import pytest
import torch
from tiny_qwen_vl import build_tiny_qwen2_5_vl
from vl_cases import (
    check_continuation,
    decoded_logprobs,
    greedy_with_scores,
    image,
    sampled_batch,
)

from flywheel.config.schema import ModelArgs, TrainingArgs, WorkerConfig
from flywheel.pipelines.data.image_prompts import ImageItem, ImagePromptEncoder
from flywheel.pipelines.data.qwen_vl_pieces import load_vl_processor
from flywheel.workers.batch import pack_sequences
from flywheel.workers.image_inputs import RowImages
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_train import HFTrainStrategy


@pytest.fixture(scope="module")
def qwen_vl(tmp_path_factory) -> str:
    return str(build_tiny_qwen2_5_vl(tmp_path_factory.mktemp("tiny_qwen2_5_vl")))


@pytest.fixture(scope="module")
def prompts(qwen_vl):
    encode = ImagePromptEncoder(load_vl_processor(qwen_vl), template="chat")
    encoded = [encode(i) for i in (
        ImageItem("a", "what colour is the square?", [image((220, 20, 20), (112, 84))]),
        ImageItem("b", "<image> and <image>: same colour?",
                  [image((20, 20, 220), (96, 40)), image((20, 200, 20), (40, 96))]),
        ImageItem("t", "say a colour", []))]
    return [e.prompt_ids for e in encoded], [e.inputs() for e in encoded]


@pytest.fixture(scope="module")
def infer(qwen_vl):
    return HFInferStrategy(qwen_vl, WorkerConfig(infer_batch_size=8), seed=0)


@pytest.fixture(scope="module")
def sampled(infer, prompts):
    ids, inputs = prompts
    _, batch = sampled_batch(infer, ids, inputs, SamplingParams(max_new_tokens=6, n=2, seed=5))
    return batch


def trainer(path: str, freeze: str | None = None) -> HFTrainStrategy:
    return HFTrainStrategy(path, WorkerConfig(
        model_args=ModelArgs(freeze_module_prefix=freeze),
        training_args=TrainingArgs(per_device_train_batch_size=6)), seed=0, total_steps=1)


def test_the_trainers_logprobs_are_the_samplers_with_the_images_and_3d_positions(
        qwen_vl, sampled):
    batch, model = sampled, trainer(qwen_vl)
    mask = batch.response_mask.bool()
    assert len(batch) == 6 and int(mask.sum()) > 6
    scored = model.forward_logprobs(batch)
    assert torch.allclose(scored[mask], batch.infer_log_probs[mask], atol=1e-5)
    # 1-D positions (what a text model uses) move the image rows' numbers
    base = model.model.model  # Qwen2_5_VLModel, which the log-prob pass calls
    forward = base.forward

    def flat_positions(*args, **kwargs):
        kwargs["position_ids"] = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
        return forward(*args, **kwargs)

    base.forward = flat_positions
    flat = model.forward_logprobs(batch)
    base.forward = forward
    image_rows = mask[:4]
    assert (flat[:4][image_rows] - scored[:4][image_rows]).abs().max() > 1e-3
    batch.images, kept = None, batch.images  # and so does dropping the images
    blind = model.forward_logprobs(batch)
    batch.images = kept
    assert (blind[:4][image_rows] - scored[:4][image_rows]).abs().max() > 1e-3


def test_generate_decodes_with_the_positions_the_trainer_scores_with(qwen_vl, infer,
                                                                     prompts):
    """hf_infer records log-probs with the trainer's own forward, so the parity above does
    not see how `generate` itself placed the patches: its step-by-step scores (greedy: the
    raw logits) must be the trainer's log-probs of the tokens it chose."""
    ids, inputs = prompts
    gens, scores = greedy_with_scores(infer, ids, inputs, max_new_tokens=5)
    batch = pack_sequences(ids, [g.token_ids for g in gens], pad_id=0,
                           images=RowImages.of(inputs))
    scored = trainer(qwen_vl).forward_logprobs(batch)
    for row, g in enumerate(gens):
        start = len(ids[row])
        assert torch.allclose(decoded_logprobs(scores, row, g.token_ids),
                              scored[row, start:start + len(g.token_ids)], atol=1e-4), row


def test_a_continuation_holding_a_sampled_image_pad_reads_it_as_text(qwen_vl, infer, prompts):
    """vl_cases.check_continuation on Qwen2.5-VL: a sampled `<|image_pad|>` in the response
    so far is neither an image patch nor, for the 3-D positions, an image token."""
    check_continuation(infer, trainer(qwen_vl), prompts)


def test_freezing_visual_takes_the_vision_tower_and_the_sync_leaves_it_out(qwen_vl):
    model = trainer(qwen_vl, "visual")
    frozen = {n for n, p in model.model.named_parameters() if not p.requires_grad}
    assert frozen == {n for n, _ in model.model.named_parameters()
                      if n.startswith("model.visual.")}
    sent = {n for n, _ in model.weights_for_sync()}
    assert sent and not [n for n in sent if n.startswith("model.visual.")]
    assert "lm_head.weight" in sent


@pytest.mark.parametrize("stage", [1, 3])
def test_deepspeed_train_reads_the_image_token_of_the_model_inside_its_engine(
        qwen_vl, infer, prompts, sampled, one_rank_group, stage):
    """deepspeed_train (ZeRO 1) scores the sampled image rows as the sampler did (3-D
    positions: `mm_token_type_ids` given) and reads a sampled `<|image_pad|>` as text. Both
    read the HF config and forward through the engine (hf_model.hf_core): the engine's own
    `config` is DeepSpeed's dict (no image_token_id) and its `forward` takes **kwargs, so the
    positions were 1-D and a sampled image token was looked up as an image."""
    pytest.importorskip("deepspeed")
    from flywheel.config.schema import StrategyArgs
    from flywheel.workers.strategies.deepspeed_train import DeepSpeedTrainStrategy

    ds = DeepSpeedTrainStrategy(qwen_vl, WorkerConfig(
        training_args=TrainingArgs(per_device_train_batch_size=6),
        strategy_args=StrategyArgs(strategy_name="deepspeed_train",
                                   strategy_config={"zero_stage": stage})), seed=0, total_steps=1)
    mask = sampled.response_mask.bool()
    scored = ds.forward_logprobs(sampled)
    assert torch.allclose(scored[mask], sampled.infer_log_probs[mask], atol=1e-5)
    check_continuation(infer, ds, prompts)
