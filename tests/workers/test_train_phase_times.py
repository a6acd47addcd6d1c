"""The train call's phase times (train_loop.py's module docstring): each phase lands in its
own metric, and on a model that really computes they add up to no more than the call.

The first two tests drive `run_update` with hooks whose phases sleep for known, distinct
times, so a phase timed in the wrong place, or not at all, shows as a wrong number; the
last one times a real train call of the tiny model.
"""

from __future__ import annotations

import time

import torch
from backend_cases import actor_loss

from flywheel.algorithms import MismatchCorrection
from flywheel.config.schema import TrainingArgs, WorkerConfig
from flywheel.workers.batch import TokenBatch, pack_sequences
from flywheel.workers.strategies.train_loop import (
    Counts,
    OptimizerStep,
    accumulate,
    local_counts,
    run_update,
)
from flywheel.workers.train_worker import TrainWorker

FORWARD_S, BACKWARD_S, OPTIMIZER_S = 0.02, 0.05, 0.08  # distinct: a swap shows
SLACK_S = 0.06  # a sleep's overshoot on a loaded 2-core machine, summed over the calls


class SleepingObjective:
    needs_entropy = False

    def __call__(self, outputs, entropy, micro, counts):
        return outputs.sum(), {"pg/loss": 0.0}


class SleepingHooks:
    """Hooks whose forward, backward and optimizer step each sleep a known time."""

    def __init__(self, split: bool):
        self.split = split  # through `accumulate` (hf, deepspeed) or as one call (megatron)

    def set_training(self, training: bool) -> None:
        pass

    def global_counts(self, mini: TokenBatch) -> Counts:
        return local_counts(mini)

    def forward(self, micro: TokenBatch, needs_entropy: bool):
        time.sleep(FORWARD_S)
        return torch.zeros(len(micro), 1), None

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        time.sleep(BACKWARD_S)

    def forward_backward(self, micros, objective, counts):
        if self.split:
            return accumulate(micros, objective, counts, self.forward, self.backward,
                              torch.device("cpu"))
        results = []
        for micro in micros:
            outputs, entropy = self.forward(micro, False)
            self.backward(objective(outputs, entropy, micro, counts)[0], True)
            results.append({"pg/loss": 0.0})
        return results

    def optimizer_step(self, max_grad_norm: float) -> OptimizerStep:
        time.sleep(OPTIMIZER_S)
        return OptimizerStep(grad_norm=1.0)

    def shared_loss_metrics(self, sums, micro_steps):
        return sums, micro_steps


class ConstantSchedule:
    def step(self) -> None:
        pass

    def get_last_lr(self) -> list[float]:
        return [1e-3]


def sleeping_update(split: bool) -> dict[str, float]:
    """2 optimizer steps of 2 micro-batches each: 4 forwards, 4 backwards, 2 steps."""
    batch = pack_sequences([[1, 2]] * 8, [[3, 4]] * 8, pad_id=0)
    args = TrainingArgs(per_device_train_batch_size=2, gradient_accumulation_steps=2)
    return run_update(SleepingHooks(split), batch, SleepingObjective(), args, ppo_epochs=1,
                      scheduler=ConstantSchedule(), prefix="actor")


def within(got: float, want: float) -> bool:
    return want <= got < want + SLACK_S


def test_each_phase_lands_in_its_own_metric():
    metrics = sleeping_update(split=True)
    assert within(metrics["time/actor_forward"], 4 * FORWARD_S), metrics
    assert within(metrics["time/actor_backward"], 4 * BACKWARD_S), metrics
    assert within(metrics["time/actor_optimizer"], 2 * OPTIMIZER_S), metrics
    assert "time/actor_forward_backward" not in metrics
    assert metrics["pg/loss"] == 0.0  # the backward seconds rode out of the loss metrics


def test_a_backend_without_accumulate_reports_forward_and_backward_together():
    metrics = sleeping_update(split=False)
    assert within(metrics["time/actor_forward_backward"], 4 * (FORWARD_S + BACKWARD_S))
    assert within(metrics["time/actor_optimizer"], 2 * OPTIMIZER_S), metrics
    assert "time/actor_forward" not in metrics and "time/actor_backward" not in metrics


def test_real_train_call_phases_add_up(tiny_model_path):
    cfg = WorkerConfig(training_args=TrainingArgs(
        learning_rate=1e-3, per_device_train_batch_size=8, gradient_accumulation_steps=2))
    worker = TrainWorker("actor_train", 0, 1, tiny_model_path, cfg, seed=0, total_steps=4,
                         trainable=True)
    generator = torch.Generator().manual_seed(0)
    responses = torch.randint(3, 30, (16, 6), generator=generator).tolist()
    batch = pack_sequences([[1, 20, 21, 15, 22, 23, 33]] * 16, responses, pad_id=0,
                           infer_log_probs=[[-1.0] * 6] * 16)
    batch.advantages = torch.randn(16, 1, generator=generator) * batch.response_mask
    start = time.perf_counter()
    # two epochs: the old log-probs come from a separate pass, timed too
    metrics = worker.train_step(batch, actor_loss(), ppo_epochs=2,
                                old_log_probs=MismatchCorrection())
    wall = time.perf_counter() - start
    phases = ["time/actor_forward", "time/actor_backward", "time/actor_optimizer",
              "time/actor_old_logprobs"]
    assert all(metrics[p] > 0 for p in phases), metrics
    assert sum(metrics[p] for p in phases) <= wall
    # the forwards and backwards are the call's bulk on a model that computes
    assert metrics["time/actor_forward"] + metrics["time/actor_backward"] > 0.3 * wall
