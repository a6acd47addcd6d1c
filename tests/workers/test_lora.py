"""LoRA on hf_train (workers/strategies/lora.py), on the built-in tiny model, in process.

What each test holds: a train step changes the adapter and nothing else; the adapter is
fp32 while the frozen base stays bf16; gradient checkpointing reaches every adapter; the
reference (adapter disabled) is the base model exactly; the merged sync is PEFT's
merge_and_unload; a checkpoint restores adapter and optimizer; a tied target and a
mismatching adapter folder are refused.
"""

from __future__ import annotations

import copy

import pytest
import torch
from backend_cases import dr_grpo_loss
from safetensors.torch import load_file

from flywheel.config.schema import ModelArgs, TrainingArgs, WorkerConfig
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.strategies.hf_model import (
    batched_logprobs,
    distinct_state_tensors,
    load_causal_lm,
)
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.lora import ADAPTER_WEIGHTS

ROWS = 8  # of make_rl_batch's 32: enough to move every adapter, and fast


@pytest.fixture(scope="module")
def batch(rl_batch):
    return rl_batch.chunks(ROWS)[0]


def lora_trainer(path: str, dtype: str = "bf16", seed: int = 0, checkpointing: bool = False,
                 **lora) -> HFTrainStrategy:
    args = ModelArgs(dtype=dtype, disable_gradient_checkpointing=not checkpointing,
                     lora_target=lora.pop("lora_target", "all-linear"),
                     lora_rank=lora.pop("lora_rank", 4), **lora)
    # one optimizer step per train step; lr large enough to move bf16 weights
    training = TrainingArgs(learning_rate=1e-2, per_device_train_batch_size=ROWS,
                            max_grad_norm=0.0)
    return HFTrainStrategy(path, WorkerConfig(model_args=args, training_args=training),
                           seed=seed, total_steps=10)


@torch.no_grad()
def perturb(strategy: HFTrainStrategy) -> HFTrainStrategy:
    """Every trained parameter moved at random, as many train steps would (B no longer 0)."""
    generator = torch.Generator().manual_seed(1)
    for p in strategy.model.parameters():
        if p.requires_grad:
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    return strategy


def params(strategy: HFTrainStrategy) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in strategy.model.named_parameters()}


def test_a_train_step_changes_the_adapter_and_nothing_else(tiny_model_path, batch):
    strategy = lora_trainer(tiny_model_path, additional_target="model.norm")
    trainable = {n for n, p in strategy.model.named_parameters() if p.requires_grad}
    before = params(strategy)
    strategy.train_step(batch, dr_grpo_loss())
    after = params(strategy)
    frozen = before.keys() - trainable
    assert frozen and all(torch.equal(before[n], after[n]) for n in frozen)
    # B starts at 0, so A's first gradient is 0: every B and the fully trained norm move
    moved = {n for n in trainable if "lora_B" in n or "modules_to_save" in n}
    assert len(moved) == 4 * 7 + 1  # 4 layers x 7 linear layers, and model.norm
    assert all(not torch.equal(before[n], after[n]) for n in moved)
    in_optimizer = {id(p) for group in strategy.optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(p) for p in strategy.model.parameters() if p.requires_grad}


def test_the_adapter_is_fp32_and_the_frozen_base_stays_bf16(tiny_model_path):
    strategy = lora_trainer(tiny_model_path, additional_target="model.norm")
    dtypes = {(p.requires_grad, p.dtype) for p in strategy.model.parameters()}
    assert dtypes == {(True, torch.float32), (False, torch.bfloat16)}
    trained = [n for n, p in strategy.model.named_parameters() if p.requires_grad]
    assert any("modules_to_save" in n for n in trained)  # the full copy too, not only A, B
    assert {t.dtype for _, t in strategy.weights_for_sync()} == {torch.bfloat16}


def test_gradient_checkpointing_gives_the_same_update(tiny_model_path, batch):
    """The frozen embedding's output needs no gradient; checkpointed layers must still
    pass one to every adapter inside (ROLL #307)."""
    plain = lora_trainer(tiny_model_path, dtype="fp32")
    checkpointed = lora_trainer(tiny_model_path, dtype="fp32", checkpointing=True)
    assert checkpointed.model.is_gradient_checkpointing
    before = params(plain)
    for strategy in (plain, checkpointed):
        strategy.train_step(batch, dr_grpo_loss())
    a, b = params(plain), params(checkpointed)
    lora_b = [n for n in a if "lora_B" in n]
    assert lora_b and all(not torch.equal(before[n], b[n]) for n in lora_b)
    assert all(torch.allclose(a[n], b[n], atol=1e-6) for n in a)


def test_the_reference_is_the_base_model_exactly(tiny_model_path, batch):
    """fp32: the reference worker a run without LoRA would start; bf16: the base in bf16
    under the same autocast. A fresh adapter (B = 0) changes nothing (KL 0 at step 0);
    then one that is not zero."""
    strategy = lora_trainer(tiny_model_path, dtype="fp32")
    assert torch.equal(strategy.forward_logprobs(batch), strategy.forward_base_logprobs(batch))
    perturb(strategy)
    reference = HFTrainStrategy(tiny_model_path, WorkerConfig(), seed=0, total_steps=10,
                                trainable=False)
    base = strategy.forward_base_logprobs(batch)
    assert torch.equal(base, reference.forward_logprobs(batch))
    assert not torch.equal(strategy.forward_logprobs(batch), base)  # adapter on again

    strategy = perturb(lora_trainer(tiny_model_path, dtype="bf16"))
    model = load_causal_lm(tiny_model_path, ModelArgs(dtype="bf16"), torch.device("cpu"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = batched_logprobs(model, batch, WorkerConfig().infer_batch_size)
    assert torch.equal(strategy.forward_base_logprobs(batch), expected)


def test_the_synced_weights_are_peft_merge_and_unload(tiny_model_path):
    strategy = perturb(lora_trainer(tiny_model_path, additional_target="model.norm"))
    merged = copy.deepcopy(strategy.adapter).merge_and_unload()
    expected = {n: t.detach().to(torch.bfloat16) for n, t in distinct_state_tensors(merged)}
    synced = dict(strategy.weights_for_sync())
    base = load_causal_lm(tiny_model_path, ModelArgs(dtype="bf16"), torch.device("cpu"))
    assert list(synced) == [n for n, _ in distinct_state_tensors(base)]  # the names hf loads
    assert synced.keys() == expected.keys()
    assert all(torch.equal(synced[n], expected[n]) for n in synced)
    changed = [n for n, t in distinct_state_tensors(base) if not torch.equal(t, synced[n])]
    assert len(changed) == 4 * 7 + 1  # every adapted weight and model.norm
    assert strategy.state_dict_for_sync().keys() == synced.keys()


def test_a_checkpoint_restores_the_adapter_and_its_optimizer_exactly(tiny_model_path,
                                                                      batch, tmp_path):
    a = lora_trainer(tiny_model_path, additional_target="model.norm")
    a.train_step(batch, dr_grpo_loss())
    a.save(str(tmp_path / "ckpt"))
    saved = load_file(tmp_path / "ckpt" / "adapter" / ADAPTER_WEIGHTS)
    # A and B of each adapted layer, and the fully trained norm: no frozen weight
    assert len(saved) == 2 * 4 * 7 + 1
    assert {k for k in saved if "lora_" not in k} == {"base_model.model.model.norm.weight"}
    b = lora_trainer(tiny_model_path, additional_target="model.norm", seed=1)  # another A
    b.load(str(tmp_path / "ckpt"))
    pa, pb = params(a), params(b)
    assert all(torch.equal(pa[n], pb[n]) for n in pa)
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert sa.keys() == sb.keys() and sa
    assert all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i])
    for strategy in (a, b):  # the same state: the same next update
        strategy.train_step(batch, dr_grpo_loss())
    pa, pb = params(a), params(b)
    assert all(torch.equal(pa[n], pb[n]) for n in pa)


@pytest.mark.filterwarnings("ignore:Model has `tie_word_embeddings=True`")  # PEFT's, then ours
@pytest.mark.parametrize("key, value", [("lora_target", "lm_head"),
                                        ("additional_target", "embed_tokens")])
def test_a_module_tied_to_another_is_refused(tiny_model_path, key, value):
    """The tiny model ties lm_head to embed_tokens, as SmolLM2 does."""
    with pytest.raises(ConfigError) as info:
        lora_trainer(tiny_model_path, **{key: value})
    assert info.value.key_path == f"model_args.{key}" and "tied" in info.value.message


def test_training_starts_from_an_adapter_folder(tiny_model_path, tmp_path):
    trained = perturb(lora_trainer(tiny_model_path))
    trained.adapter.save_pretrained(str(tmp_path / "adapter"))
    started = lora_trainer(tiny_model_path, seed=1,
                           adapter_name_or_path=str(tmp_path / "adapter"))
    pa, pb = params(trained), params(started)
    assert all(torch.equal(pa[n], pb[n]) for n in pa)
    with pytest.raises(ConfigError) as info:
        lora_trainer(tiny_model_path, lora_rank=8, adapter_name_or_path=str(tmp_path /
                                                                            "adapter"))
    assert info.value.key_path == "model_args.lora_rank"


def test_the_reference_of_a_run_started_from_an_adapter_is_that_adapter(tiny_model_path,
                                                                        batch, tmp_path):
    """The KL anchor is the starting policy (an SFT adapter on the base), not the bare base:
    equal to the trained policy at step 0, still the starting adapter after a step, and left
    out of syncs and saved adapter folders."""
    sft = perturb(lora_trainer(tiny_model_path, dtype="fp32", additional_target="model.norm"))
    sft.adapter.save_pretrained(str(tmp_path / "sft"))
    start = sft.forward_logprobs(batch)
    rl = lora_trainer(tiny_model_path, dtype="fp32", additional_target="model.norm",
                      adapter_name_or_path=str(tmp_path / "sft"))
    assert torch.equal(rl.forward_base_logprobs(batch), rl.forward_logprobs(batch))
    assert torch.equal(rl.forward_base_logprobs(batch), start)
    trainable = {n for n, p in rl.model.named_parameters() if p.requires_grad}
    rl.train_step(batch, dr_grpo_loss())
    assert torch.equal(rl.forward_base_logprobs(batch), start)  # the anchor does not move
    assert not torch.equal(rl.forward_logprobs(batch), start)
    assert {n for n, p in rl.model.named_parameters() if p.requires_grad} == trainable
    assert not any(".reference." in n for n in trainable)
    assert not any("reference" in name for name, _ in rl.weights_for_sync())
    rl.save(str(tmp_path / "ckpt"))
    assert not (tmp_path / "ckpt" / "adapter" / "reference").exists()
