"""hf_train and hf_infer on the built-in tiny model: shapes, parity, accumulation, save/load."""

from __future__ import annotations

import torch
from backend_cases import uneven

from flywheel.algorithms import PolicyLossParams
from flywheel.config.schema import TrainingArgs, WorkerConfig
from flywheel.platform.liveness import snapshot
from flywheel.workers.actor_loss import ActorLoss
from flywheel.workers.batch import pack_sequences
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_train import HFTrainStrategy

PROMPTS = [[1, 20, 21, 15, 22, 23, 33], [1, 24, 25, 15, 26, 27, 33]]


def _infer(path):
    return HFInferStrategy(path, WorkerConfig(infer_batch_size=8), seed=0)


def _train(path, per_device=8, accum=1, lr=1e-3):
    cfg = WorkerConfig(training_args=TrainingArgs(
        learning_rate=lr, per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accum, max_grad_norm=0.0))
    return HFTrainStrategy(path, cfg, seed=0, total_steps=10)


def test_generate_returns_n_samples_per_prompt_with_logprobs(tiny_model_path):
    gens = _infer(tiny_model_path).generate(PROMPTS, SamplingParams(max_new_tokens=5, n=3))
    assert [g.prompt_index for g in gens] == [0, 0, 0, 1, 1, 1]
    for g in gens:
        assert 1 <= len(g.token_ids) <= 5 and len(g.log_probs) == len(g.token_ids)
        assert g.finish_reason in ("stop", "length")
        assert all(lp <= 0 for lp in g.log_probs)


def test_generation_is_reproducible_from_seed(tiny_model_path):
    infer = _infer(tiny_model_path)
    a = infer.generate(PROMPTS, SamplingParams(max_new_tokens=6, n=4, seed=7))
    b = infer.generate(PROMPTS, SamplingParams(max_new_tokens=6, n=4, seed=7))
    c = infer.generate(PROMPTS, SamplingParams(max_new_tokens=6, n=4, seed=8))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]


def test_infer_and_train_logprobs_agree(tiny_model_path):
    gens = _infer(tiny_model_path).generate(PROMPTS, SamplingParams(max_new_tokens=6, n=2))
    prompts = [PROMPTS[g.prompt_index] for g in gens]
    batch = pack_sequences(prompts, [g.token_ids for g in gens], pad_id=0,
                           infer_log_probs=[g.log_probs for g in gens])
    train_lp = _train(tiny_model_path).forward_logprobs(batch)
    mask = batch.response_mask.bool()
    assert torch.allclose(train_lp[mask], batch.infer_log_probs[mask], atol=1e-5)
    assert (train_lp[batch.attention_mask == 0] == 0).all()  # padding stays 0


def _rl_batch(path):
    gens = _infer(path).generate(PROMPTS * 8, SamplingParams(max_new_tokens=6, n=2, seed=3))
    prompts = [(PROMPTS * 8)[g.prompt_index] for g in gens]
    batch = pack_sequences(prompts, [g.token_ids for g in gens], pad_id=0)
    batch.old_log_probs = _train(path).forward_logprobs(batch)
    torch.manual_seed(0)
    batch.advantages = torch.randn(len(batch))[:, None] * batch.response_mask
    return batch


def _loss(mode="seq-mean-token-mean"):
    return ActorLoss("ppo", PolicyLossParams(), mode, norm_length=6)  # Dr. GRPO's: the budget


def test_gradient_accumulation_matches_one_big_micro_batch(tiny_model_path):
    # 32 rows, half cut short: the 4 trimmed micro-batches are not all as wide as the one
    batch = uneven(_rl_batch(tiny_model_path))
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        one = _train(tiny_model_path, per_device=32, accum=1)
        four = _train(tiny_model_path, per_device=8, accum=4)
        m1 = one.train_step(batch, _loss(mode))
        m4 = four.train_step(batch, _loss(mode))
        assert m1["actor/optimizer_steps"] == m4["actor/optimizer_steps"] == 1
        # Gradients, not weights: Adam's first step is ~lr*sign(g), which amplifies
        # float noise in near-zero gradient entries.
        for (name, p1), p4 in zip(one.model.named_parameters(), four.model.parameters()):
            assert torch.allclose(p1.grad, p4.grad, atol=1e-6), (mode, name)


def test_train_step_changes_weights_and_mini_batches_count(tiny_model_path):
    batch = _rl_batch(tiny_model_path)
    strategy = _train(tiny_model_path, per_device=8, accum=2)  # 16 rows per optimizer step
    before = {k: v.clone() for k, v in strategy.state_dict_for_sync().items()}
    metrics = strategy.train_step(batch, _loss(), ppo_epochs=2)
    assert metrics["actor/optimizer_steps"] == 4  # 2 mini-batches x 2 epochs
    after = strategy.state_dict_for_sync()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_save_load_round_trip_restores_weights_and_optimizer(tiny_model_path, tmp_path):
    batch = _rl_batch(tiny_model_path)
    a = _train(tiny_model_path)
    a.train_step(batch, _loss())
    a.save(str(tmp_path / "ckpt"))
    b = _train(tiny_model_path)
    b.load(str(tmp_path / "ckpt"))
    for k, v in a.state_dict_for_sync().items():
        assert torch.equal(v, b.state_dict_for_sync()[k]), k
    a.train_step(batch, _loss())
    b.train_step(batch, _loss())  # same optimizer state -> same next update
    for k, v in a.state_dict_for_sync().items():
        assert torch.allclose(v, b.state_dict_for_sync()[k], atol=1e-7), k


def test_weight_update_changes_generation(tiny_model_path):
    infer = _infer(tiny_model_path)
    trained = _train(tiny_model_path, lr=1e-2)
    trained.train_step(_rl_batch(tiny_model_path), _loss())
    sampling = SamplingParams(max_new_tokens=6, n=1, do_sample=False)
    before = infer.generate(PROMPTS, sampling)
    infer.update_weights(trained.state_dict_for_sync(), version=1)
    after = infer.generate(PROMPTS, sampling)
    gens = after
    batch = pack_sequences(PROMPTS, [g.token_ids for g in gens], pad_id=0,
                           infer_log_probs=[g.log_probs for g in gens])
    mask = batch.response_mask.bool()
    assert torch.allclose(trained.forward_logprobs(batch)[mask], batch.infer_log_probs[mask],
                          atol=1e-5)
    assert [g.log_probs for g in before] != [g.log_probs for g in after]


def test_generate_reports_progress_per_decoded_token(tiny_model_path):
    """hf_infer's generate ticks each decoding step (platform/liveness.py), so a long call
    that keeps producing tokens is not taken for a stalled one."""
    infer = _infer(tiny_model_path)
    before, _ = snapshot()
    gens = infer.generate(PROMPTS, SamplingParams(max_new_tokens=6, n=1, seed=1))
    steps = max(len(g.token_ids) for g in gens)
    assert snapshot()[0] - before >= steps
