"""hf_infer and hf_train with images in context (issue 29 items 2-3), on a tiny random
Idefics3 built once per session: hf_infer samples with each prompt's pixel inputs and
returns the sampled tokens' log-probs; hf_train's log-probs of the same rows, with the
images in the batch, are the same numbers; without the images they are not (so a side
that drops them fails the parity); rows with different image counts batch as they score
alone; freeze_module_prefix leaves the vision tower bit-identical through a train step."""

from __future__ import annotations

import pytest
import torch
from vl_cases import check_continuation, image, sampled_batch

from flywheel.algorithms import PolicyLossParams
from flywheel.config.schema import ModelArgs, TrainingArgs, WorkerConfig
from flywheel.pipelines.data.image_prompts import ImageItem, ImagePromptEncoder
from flywheel.pipelines.data.qwen_vl_pieces import load_vl_processor
from flywheel.workers.actor_loss import ActorLoss
from flywheel.workers.batch import pack_sequences
from flywheel.workers.image_inputs import RowImages
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_train import HFTrainStrategy

N = 2  # samples per prompt


@pytest.fixture(scope="module")
def prompts(tiny_idefics3_path):
    """Three prompts: one image, two images (of another size), no image."""
    encode = ImagePromptEncoder(load_vl_processor(tiny_idefics3_path), template="chat")
    items = [ImageItem("a", "what colour is the square?", [image((220, 20, 20))]),
             ImageItem("b", "<image> and <image>: same colour?",
                       [image((20, 20, 220), (64, 30)), image((20, 200, 20), (30, 60))]),
             ImageItem("t", "say a colour", [])]
    encoded = [encode(i) for i in items]
    return [e.prompt_ids for e in encoded], [e.inputs() for e in encoded]


@pytest.fixture(scope="module")
def infer(tiny_idefics3_path):
    return HFInferStrategy(tiny_idefics3_path, WorkerConfig(infer_batch_size=8), seed=0)


@pytest.fixture(scope="module")
def sampled(infer, prompts):
    ids, images = prompts
    return sampled_batch(infer, ids, images, SamplingParams(max_new_tokens=6, n=N, seed=5))


def train(path, freeze=None, lr=1e-2):
    cfg = WorkerConfig(model_args=ModelArgs(freeze_module_prefix=freeze),
                       training_args=TrainingArgs(learning_rate=lr, max_grad_norm=0.0,
                                                  per_device_train_batch_size=6))
    return HFTrainStrategy(path, cfg, seed=0, total_steps=4)


def test_hf_infer_samples_with_the_images_and_returns_their_logprobs(infer, sampled, prompts):
    gens, _ = sampled
    assert [g.prompt_index for g in gens] == [0, 0, 1, 1, 2, 2]
    for g in gens:
        assert 1 <= len(g.token_ids) <= 6 and len(g.log_probs) == len(g.token_ids)
        assert all(lp <= 0 for lp in g.log_probs)
    # the images steer what is generated: greedy tokens of an image prompt change without
    # them (the text prompt's stay)
    ids, images = prompts
    greedy = SamplingParams(max_new_tokens=6, do_sample=False)
    seen, blind = (infer.generate(ids, greedy, i) for i in (images, None))
    assert seen[0].token_ids != blind[0].token_ids and seen[1].token_ids != blind[1].token_ids
    assert seen[2].token_ids == blind[2].token_ids


def test_hf_train_logprobs_equal_hf_infers_with_the_images_and_differ_without(
        tiny_idefics3_path, sampled):
    _, batch = sampled
    trainer = train(tiny_idefics3_path)
    mask = batch.response_mask.bool()
    with_images = trainer.forward_logprobs(batch)
    assert torch.allclose(with_images[mask], batch.infer_log_probs[mask], atol=1e-5)
    # each row scored alone (its own images only) gives the batch's numbers: the rows'
    # image tensors collate into the batch as the processor pads them
    for row in range(len(batch)):
        alone = trainer.forward_logprobs(batch.select(slice(row, row + 1)))[0]
        real = batch.attention_mask[row].bool()
        assert torch.allclose(alone[real], with_images[row][real], atol=1e-5)
    # dropped on either side, the images change the numbers of the image rows (0..3)
    batch.images, kept = None, batch.images
    without = trainer.forward_logprobs(batch)
    batch.images = kept
    image_rows = mask[:4]
    assert (without[:4][image_rows] - batch.infer_log_probs[:4][image_rows]).abs().max() > 1e-3
    assert torch.allclose(without[4:][mask[4:]], batch.infer_log_probs[4:][mask[4:]],
                          atol=1e-5)  # the text row never had one


def test_freeze_module_prefix_keeps_the_vision_tower_bit_identical(tiny_idefics3_path,
                                                                  sampled):
    _, batch = sampled
    batch.old_log_probs = batch.infer_log_probs
    torch.manual_seed(0)
    batch.advantages = torch.randn(len(batch))[:, None] * batch.response_mask
    loss = ActorLoss("ppo", PolicyLossParams(), "seq-mean-token-mean", norm_length=6)
    for freeze in ("vision_model", None):
        trainer = train(tiny_idefics3_path, freeze)
        before = {k: v.clone() for k, v in trainer.state_dict_for_sync().items()}
        trainer.train_step(batch, loss)
        after = trainer.state_dict_for_sync()
        vision = [k for k in before if ".vision_model." in f".{k}"]
        text = [k for k in before if ".text_model.layers." in f".{k}"]
        assert vision and text
        assert any(not torch.equal(before[k], after[k]) for k in text)
        moved = [k for k in vision if not torch.equal(before[k], after[k])]
        # frozen: not one vision weight moves; trained: the images' gradient moves them
        assert (moved == []) == (freeze is not None), (freeze, moved[:3])
    with pytest.raises(ValueError, match="'vision_tower' matches no parameter"):
        train(tiny_idefics3_path, "vision_tower")


def test_a_weight_sync_leaves_the_frozen_tower_out_and_the_engine_keeps_its_own(
        tiny_idefics3_path, sampled):
    """The tower is frozen, so the engine's copy (loaded from the same checkpoint) is
    already the trainer's: the sync sends the rest, and after it the engine scores the
    sampled rows, images in context, as the trained model does."""
    _, batch = sampled
    batch.old_log_probs = batch.infer_log_probs
    torch.manual_seed(1)
    batch.advantages = torch.randn(len(batch))[:, None] * batch.response_mask
    trainer = train(tiny_idefics3_path, "vision_model")
    trainer.train_step(batch, ActorLoss("ppo", PolicyLossParams(), "seq-mean-token-mean",
                                        norm_length=6))
    sent = dict(trainer.weights_for_sync())
    assert sent and not [k for k in sent if ".vision_model." in f".{k}"]
    engine = HFInferStrategy(tiny_idefics3_path, WorkerConfig(infer_batch_size=8), seed=0)
    with pytest.raises(ValueError, match=r"missing=\[.*vision_model"):
        engine.update_weights(sent, version=1)  # not told: a missing tower is a mismatch
    engine.unsynced = ("vision_model",)
    engine.update_weights(sent, version=1)
    mask = batch.response_mask.bool()
    trained = trainer.forward_logprobs(batch)
    assert (trained[mask] - batch.infer_log_probs[mask]).abs().max() > 1e-3  # it moved
    assert torch.allclose(engine.forward_logprobs(batch)[mask], trained[mask], atol=1e-5)


def test_a_continuation_holding_a_sampled_image_token_reads_it_as_text(tiny_idefics3_path,
                                                                       infer, prompts):
    check_continuation(infer, train(tiny_idefics3_path), prompts)  # vl_cases.py says why


def test_an_image_token_the_policy_generated_is_read_as_text(tiny_idefics3_path, prompts):
    """A sampled `<image>` is text to both engines (vLLM places image features by prompt
    position; `generate` passes the pixels at prefill only): the trainer's log-probs of
    such a response equal step-by-step decoding with the KV cache, the image at prefill."""
    ids, images = prompts
    trainer = train(tiny_idefics3_path)
    image_id = trainer.model.config.image_token_id
    response = [40, image_id, 50, image_id, 60]
    batch = pack_sequences([ids[0]], [response], pad_id=0, images=RowImages.of(images[:1]))
    scored = trainer.forward_logprobs(batch)[0, len(ids[0]):len(ids[0]) + len(response)]
    model = trainer.model
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids[0]]), use_cache=True, **images[0].features)
        steps = [out.logits[0, -1]]
        for token in response[:-1]:
            out = model(input_ids=torch.tensor([[token]]), past_key_values=out.past_key_values,
                        use_cache=True)
            steps.append(out.logits[0, -1])
    decoded = torch.stack([torch.log_softmax(s.float(), -1)[t] for s, t in zip(steps, response)])
    assert torch.allclose(scored, decoded, atol=1e-5)
