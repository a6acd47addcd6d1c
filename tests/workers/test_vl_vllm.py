"""vllm with images in context (issue 29 item 2), on the tiny random Idefics3: each image
prompt goes token-in as its engine ids (one placeholder per image) with its images as
multi_modal_data; greedy tokens equal hf_infer's, and the sampled tokens' log-probs equal
hf_train's with the images in the batch (and not without them). `long`: one vLLM engine on
a VL model starts in ~30 s on two busy cores (issue 29 budgets one shared engine for the
suite; this one is not shared yet)."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from flywheel.pipelines.data.image_prompts import ImageItem, ImagePromptEncoder
from flywheel.pipelines.data.qwen_vl_pieces import load_vl_processor
from flywheel.platform.config.schema import TrainingArgs, WorkerConfig
from flywheel.workers.batch import pack_sequences
from flywheel.workers.image_inputs import RowImages
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_train import HFTrainStrategy

pytestmark = pytest.mark.long


def image(colour, size=(48, 40)) -> Image.Image:
    img = Image.new("RGB", size, (255, 255, 255))
    img.paste(Image.new("RGB", (size[0] // 2, size[1] // 2), colour), (4, 6))
    return img


@pytest.fixture(scope="module")
def encoded(tiny_idefics3_path):
    encode = ImagePromptEncoder(load_vl_processor(tiny_idefics3_path), template="chat")
    return [encode(i) for i in (
        ImageItem("a", "what colour is the square?", [image((220, 20, 20))]),
        ImageItem("b", "<image> and <image>: same colour?",
                  [image((20, 20, 220), (64, 30)), image((20, 200, 20), (30, 60))]),
        ImageItem("t", "say a colour", []))]


@pytest.fixture(scope="module")
def vl_engine(tiny_idefics3_path):
    from flywheel.workers.strategies.vllm_infer import VLLMInferStrategy

    set_num_threads = torch.set_num_threads  # vLLM's CPU worker replaces it process-wide
    yield VLLMInferStrategy(tiny_idefics3_path, WorkerConfig(), seed=0, context_length=256)
    torch.set_num_threads = set_num_threads


def test_vllm_generates_with_the_images_and_its_logprobs_are_the_trainers(
        tiny_idefics3_path, encoded, vl_engine):
    ids = [e.prompt_ids for e in encoded]
    inputs = [e.inputs() for e in encoded]
    greedy = SamplingParams(max_new_tokens=6, do_sample=False)
    hf = HFInferStrategy(tiny_idefics3_path, WorkerConfig(infer_batch_size=8), seed=0)
    assert ([g.token_ids for g in vl_engine.generate(ids, greedy, inputs)]
            == [g.token_ids for g in hf.generate(ids, greedy, inputs)])

    gens = vl_engine.generate(ids, SamplingParams(max_new_tokens=6, n=2, seed=3), inputs)
    batch = pack_sequences([ids[g.prompt_index] for g in gens], [g.token_ids for g in gens],
                           pad_id=0, infer_log_probs=[g.log_probs for g in gens],
                           images=RowImages.of(inputs).repeat(2))
    trainer = HFTrainStrategy(tiny_idefics3_path, WorkerConfig(training_args=TrainingArgs()),
                              seed=0, total_steps=1)
    mask = batch.response_mask.bool()
    assert torch.allclose(trainer.forward_logprobs(batch)[mask], batch.infer_log_probs[mask],
                          atol=1e-4)
    batch.images = None  # without them the image rows' numbers are others
    blind = trainer.forward_logprobs(batch)
    assert (blind[:4][mask[:4]] - batch.infer_log_probs[:4][mask[:4]]).abs().max() > 1e-3


def test_a_sync_without_the_frozen_tower_keeps_the_engines_and_takes_the_rest(
        tiny_idefics3_path, encoded, vl_engine):
    """frozen_modules.py: the sync leaves the vision tower out; vLLM's in-place reload
    keeps the layers it is sent nothing for and loads the rest. The engine then samples
    as the moved model with the (kept) tower does. Runs last: it changes the engine."""
    from flywheel.platform.config.schema import ModelArgs

    trainer = HFTrainStrategy(tiny_idefics3_path, WorkerConfig(
        model_args=ModelArgs(freeze_module_prefix="vision_model"),
        training_args=TrainingArgs()), seed=0, total_steps=1)
    torch.manual_seed(0)
    with torch.no_grad():  # a "train step" on what trains: every unfrozen weight moves
        for param in trainer.model.parameters():
            if param.requires_grad:
                param.add_(torch.randn_like(param) * 0.05)
    sent = dict(trainer.weights_for_sync())
    assert not [k for k in sent if ".vision_model." in f".{k}"]
    vl_engine.unsynced = ("vision_model",)  # as infer_worker.py sets it
    vl_engine.update_weights(sent, version=1)
    ids, inputs = [e.prompt_ids for e in encoded], [e.inputs() for e in encoded]
    gens = vl_engine.generate(ids, SamplingParams(max_new_tokens=6, n=2, seed=4), inputs)
    batch = pack_sequences([ids[g.prompt_index] for g in gens], [g.token_ids for g in gens],
                           pad_id=0, infer_log_probs=[g.log_probs for g in gens],
                           images=RowImages.of(inputs).repeat(2))
    mask = batch.response_mask.bool()
    assert torch.allclose(trainer.forward_logprobs(batch)[mask], batch.infer_log_probs[mask],
                          atol=1e-4)
