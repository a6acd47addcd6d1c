"""actor_train's train call with old_log_probs=...: exactly the two calls it replaces."""

from __future__ import annotations

import torch
from backend_cases import untimed

from flywheel.algorithms import MismatchCorrection, PolicyLossParams
from flywheel.config.schema import TrainingArgs, WorkerConfig
from flywheel.workers.actor_loss import ActorLoss
from flywheel.workers.batch import pack_sequences
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.train_worker import TrainWorker

PROMPTS = [[1, 20, 21, 15, 22, 23, 33], [1, 24, 25, 15, 26, 27, 33]]


def worker(path: str) -> TrainWorker:  # the plain class: no Ray needed to call it
    cfg = WorkerConfig(training_args=TrainingArgs(
        learning_rate=1e-3, per_device_train_batch_size=8, max_grad_norm=1.0))
    return TrainWorker("actor_train", 0, 1, path, cfg, seed=0, total_steps=4, trainable=True)


def batch_without_old_log_probs(path: str):
    infer = HFInferStrategy(path, WorkerConfig(infer_batch_size=8), seed=0)
    gens = infer.generate(PROMPTS * 8, SamplingParams(max_new_tokens=6, n=2, seed=3))
    batch = pack_sequences([(PROMPTS * 8)[g.prompt_index] for g in gens],
                           [g.token_ids for g in gens], pad_id=0,
                           infer_log_probs=[g.log_probs for g in gens])
    torch.manual_seed(0)
    batch.advantages = torch.randn(len(batch))[:, None] * batch.response_mask
    return batch


def test_fused_train_call_equals_forward_then_train(tiny_model_path):
    correction = MismatchCorrection("sequence", "mask", lower=0.5, upper=2.0, apply=True)
    loss = ActorLoss("ppo", PolicyLossParams(), "seq-mean-token-mean")

    two_calls, batch = worker(tiny_model_path), batch_without_old_log_probs(tiny_model_path)
    batch.old_log_probs = two_calls.forward_logprobs(batch)
    batch.is_weights, want = correction(batch.old_log_probs, batch.infer_log_probs,
                                         batch.response_mask)
    want |= two_calls.train_step(batch, loss, ppo_epochs=2)

    fused = worker(tiny_model_path)
    got = fused.train_step(batch_without_old_log_probs(tiny_model_path), loss, ppo_epochs=2,
                           old_log_probs=correction)

    # two epochs: the separate pass is run (test_fused_old_logprobs.py has the fused one)
    assert got.pop("actor/old_logprobs_fused") == 0.0
    # mismatch metrics, then the train step's, number for number (phase times aside)
    assert untimed(got) == untimed(want)
    assert "offpolicy/k3_kl" in got and "actor/grad_norm" in got
    for (name, a), (_, b) in zip(two_calls.strategy.model.state_dict().items(),
                                 fused.strategy.model.state_dict().items()):
        assert torch.equal(a, b), name
