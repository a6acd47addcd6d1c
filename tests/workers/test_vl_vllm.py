"""vllm with images in context (issue 29 item 2), on the tiny random Idefics3: each image
prompt goes token-in as its engine ids (one placeholder per image) with its images as
multi_modal_data; greedy tokens equal hf_infer's, and the sampled tokens' log-probs equal
hf_train's with the images in the batch (and not without them). Prefix caching (issue 29
item 4): two prompts with the same ids and different images share no cached KV block, the
same prompt again reuses its own. A weight sync without the frozen vision tower keeps the
engine's tower and loads the rest. `long` (7-30 s to start one VL engine on two cores; the
suite's VL engine is test_image_rlvr_run.py's vllm run); this module's tests share one."""

from __future__ import annotations

import logging

import pytest
import torch
from vl_cases import image, sampled_batch

from flywheel.config.schema import TrainingArgs, WorkerConfig
from flywheel.pipelines.data.image_prompts import ImageItem, ImagePromptEncoder
from flywheel.pipelines.data.qwen_vl_pieces import load_vl_processor
from flywheel.workers.batch import pack_sequences
from flywheel.workers.image_inputs import RowImages
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_train import HFTrainStrategy

pytestmark = pytest.mark.long


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


@pytest.fixture(scope="module")
def trainer(tiny_idefics3_path):
    return HFTrainStrategy(tiny_idefics3_path, WorkerConfig(training_args=TrainingArgs()),
                           seed=0, total_steps=1)


def test_vllm_generates_with_the_images_and_its_logprobs_are_the_trainers(
        tiny_idefics3_path, encoded, vl_engine, trainer):
    ids = [e.prompt_ids for e in encoded]
    inputs = [e.inputs() for e in encoded]
    greedy = SamplingParams(max_new_tokens=6, do_sample=False)
    hf = HFInferStrategy(tiny_idefics3_path, WorkerConfig(infer_batch_size=8), seed=0)
    assert ([g.token_ids for g in vl_engine.generate(ids, greedy, inputs)]
            == [g.token_ids for g in hf.generate(ids, greedy, inputs)])

    _, batch = sampled_batch(vl_engine, ids, inputs,
                             SamplingParams(max_new_tokens=6, n=2, seed=3))
    mask = batch.response_mask.bool()
    assert torch.allclose(trainer.forward_logprobs(batch)[mask], batch.infer_log_probs[mask],
                          atol=1e-4)
    batch.images = None  # without them the image rows' numbers are others
    blind = trainer.forward_logprobs(batch)
    assert (blind[:4][mask[:4]] - batch.infer_log_probs[:4][mask[:4]]).abs().max() > 1e-3


def test_the_prefix_cache_keys_blocks_by_the_image_too(tiny_idefics3_path, vl_engine, trainer,
                                                      monkeypatch):
    """vLLM V1 hashes each full KV block of a prompt with the hashes of the images whose
    placeholders it covers (vllm/v1/core/kv_cache_utils.py `_gen_mm_extra_hash_keys`). RED,
    BLUE (the same ids, another image), RED again: BLUE reuses no block of RED's and samples
    with BLUE in context; RED again reuses its first block. The hits are each request's
    `RequestOutput.num_cached_tokens`, read off the engine's steps."""
    cache = vl_engine.llm.llm_engine.vllm_config.cache_config
    assert cache.enable_prefix_caching  # vLLM's default for a model that supports it
    encode = ImagePromptEncoder(load_vl_processor(tiny_idefics3_path), template="chat")
    text = "<image> " + "the square: its colour, its size, where it sits in the picture. " * 2
    red, blue = (encode(ImageItem(c, text, [image(rgb)]))
                 for c, rgb in (("red", (220, 20, 20)), ("blue", (20, 20, 220))))
    assert red.prompt_ids == blue.prompt_ids and red.engine_ids == blue.engine_ids
    assert cache.block_size < len(red.engine_ids)  # one full block to cache, image inside it

    hits = []
    step = vl_engine.loop.engine.step

    def recorded_step():  # the engine thread calls it: each finished request's hits
        outputs = step()
        hits.extend(out.num_cached_tokens for out in outputs if out.finished)
        return outputs
    monkeypatch.setattr(vl_engine.loop.engine, "step", recorded_step)
    sampling = SamplingParams(max_new_tokens=4, seed=1)
    gens = [vl_engine.generate([p.prompt_ids], sampling, [p.inputs()])[0]
            for p in (red, blue, red)]
    assert hits == [0, 0, cache.block_size]
    assert gens[2].token_ids == gens[0].token_ids
    assert torch.allclose(torch.tensor(gens[2].log_probs), torch.tensor(gens[0].log_probs),
                          atol=1e-5)

    def trainers(prompt) -> torch.Tensor:  # BLUE's tokens scored with `prompt`'s image
        batch = pack_sequences([blue.prompt_ids], [gens[1].token_ids], pad_id=0,
                               infer_log_probs=[gens[1].log_probs],
                               images=RowImages.of([prompt.inputs()]))
        mask = batch.response_mask.bool()
        return trainer.forward_logprobs(batch)[mask] - batch.infer_log_probs[mask]
    assert trainers(blue).abs().max() < 1e-4
    assert trainers(red).abs().max() > 1e-3  # RED's KV would have given these


class RecordedLog(logging.Handler):
    """The warnings a logger passes on."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_sync_without_the_frozen_tower_keeps_the_engines_and_takes_the_rest(
        tiny_idefics3_path, encoded, vl_engine):
    """frozen_modules.py: the sync leaves the vision tower out; vLLM's in-place reload
    keeps the layers it is sent nothing for and loads the rest. The engine then samples
    as the moved model with the (kept) tower does. Runs last: it changes the engine."""
    from flywheel.config.schema import ModelArgs
    from flywheel.workers.strategies.vllm_infer import RELOAD_LOGGERS

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
    said = RecordedLog()
    loggers = [logging.getLogger(name) for name in RELOAD_LOGGERS]
    for logger in loggers:
        logger.addHandler(said)
    try:
        vl_engine.update_weights(sent, version=1)
        del sent["model.text_model.norm.weight"]  # a weight outside the tower still shows
        vl_engine.update_weights(sent, version=1)
    finally:
        for logger in loggers:
            logger.removeHandler(said)
    assert said.messages == ["Following weights were not loaded from checkpoint: "
                             "{'model.text_model.norm.weight'}"], said.messages
    ids, inputs = [e.prompt_ids for e in encoded], [e.inputs() for e in encoded]
    _, batch = sampled_batch(vl_engine, ids, inputs,
                             SamplingParams(max_new_tokens=6, n=2, seed=4))
    mask = batch.response_mask.bool()
    assert torch.allclose(trainer.forward_logprobs(batch)[mask], batch.infer_log_probs[mask],
                          atol=1e-4)
