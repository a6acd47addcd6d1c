"""The learning-rate schedule counts the optimizer steps the update loop really takes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flywheel.algorithms import PolicyLossParams
from flywheel.config.schema import PipelineConfig, TrainingArgs, WorkerConfig
from flywheel.pipelines.roles.roles import schedule_horizon
from flywheel.workers.actor_loss import ActorLoss
from flywheel.workers.batch import pack_sequences
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.train_loop import DivergenceError, build_schedule

TRAIN_STEPS, EPOCHS = 3, 2


def config(scheduler: str, warmup: int = 0) -> PipelineConfig:
    """16 prompts x 2 samples = 32 rows per step; 8-row mini-batches: 4 per epoch."""
    cfg = PipelineConfig(rollout_batch_size=16, num_return_sequences_in_group=2,
                         ppo_epochs=EPOCHS)
    cfg.actor_train.training_args = TrainingArgs(
        learning_rate=1e-3, per_device_train_batch_size=4, gradient_accumulation_steps=2,
        lr_scheduler_type=scheduler, warmup_steps=warmup)
    return cfg


def batch_of(rows: int):
    prompts = [[1, 20 + i % 10, 21] for i in range(rows)]
    batch = pack_sequences(prompts, [[22, 23 + i % 5, 2] for i in range(rows)], pad_id=0)
    batch.old_log_probs = torch.zeros_like(batch.response_mask)
    batch.advantages = torch.randn(rows, 1, generator=torch.Generator().manual_seed(0)) \
        * batch.response_mask
    return batch


def train_run(model_path: str, cfg: PipelineConfig) -> list[float]:
    """The learning rate after every optimizer step of TRAIN_STEPS train steps."""
    horizon = schedule_horizon(cfg, cfg.actor_train, TRAIN_STEPS)
    strategy = HFTrainStrategy(model_path, WorkerConfig(training_args=cfg.actor_train
                                                        .training_args), seed=0,
                               total_steps=horizon)
    rates, loss = [], ActorLoss("vanilla", PolicyLossParams(), "token-mean")
    rows = cfg.rollout_batch_size * cfg.num_return_sequences_in_group
    for _ in range(TRAIN_STEPS):
        metrics = strategy.train_step(batch_of(rows), loss, ppo_epochs=cfg.ppo_epochs)
        assert metrics["actor/optimizer_steps"] == 4 * EPOCHS
        rates.append(metrics["actor/lr"])
    assert strategy.scheduler.last_epoch == horizon == TRAIN_STEPS * 4 * EPOCHS
    return rates


def test_linear_schedule_reaches_zero_at_the_last_optimizer_step(tiny_model_path):
    rates = train_run(tiny_model_path, config("linear"))
    assert rates[-1] == 0.0 and rates[-2] > 0.0  # not a quarter of the way through


def test_warmup_acts_with_the_constant_schedule(tiny_model_path):
    cfg = config("constant", warmup=16)  # two train steps of 8 optimizer steps
    rates = train_run(tiny_model_path, cfg)
    assert rates == pytest.approx([0.5e-3, 1e-3, 1e-3])


def test_non_finite_loss_stops_the_update_with_the_metric_named(tiny_model_path):
    cfg = config("constant")
    strategy = HFTrainStrategy(tiny_model_path, WorkerConfig(
        training_args=cfg.actor_train.training_args), seed=0, total_steps=10)
    batch = batch_of(8)
    batch.advantages = batch.advantages * float("nan")
    loss = ActorLoss("vanilla", PolicyLossParams(), "token-mean")
    with pytest.raises(DivergenceError, match=r"pg/loss is nan at optimizer step 1"):
        strategy.train_step(batch, loss)


def test_horizon_counts_data_parallel_shares():
    cfg = config("linear")
    cfg.actor_train = dataclasses.replace(cfg.actor_train, device_mapping=[0, 1])
    assert schedule_horizon(cfg, cfg.actor_train, TRAIN_STEPS) == TRAIN_STEPS * 2 * EPOCHS


def rates_of(args: TrainingArgs, horizon: int, steps: int) -> list[float]:
    """The learning rate before each of `steps` optimizer steps (peak 1.0)."""
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scheduler = build_schedule(optimizer, args, horizon)
    rates = []
    for _ in range(steps):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize("scheduler", ["constant", "linear"])
def test_warmup_ratio_warms_up_over_that_fraction_of_the_horizon(scheduler):
    # ceil(0.25 x 10) = 3 warmup steps: 0, 1/3, 2/3, then the peak (ROLL's rule)
    rates = rates_of(TrainingArgs(warmup_ratio=0.25, lr_scheduler_type=scheduler), 10, 4)
    assert rates == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])


def test_a_written_warmup_steps_wins_over_warmup_ratio():
    rates = rates_of(TrainingArgs(warmup_steps=1, warmup_ratio=0.5), 10, 3)
    assert rates == pytest.approx([0.0, 1.0, 1.0])


AGENTIC_STEPS = 4
TURNS = [3, 2, 4, 3]  # turns per episode at each train step: 12, 8, 16, 12 per-turn rows


def agentic_step_config() -> PipelineConfig:
    """4 trajectories a step, one row per turn, 4-row mini-batches: 2-4 optimizer steps
    per train step; linear decay after ceil(0.25 x 4) = 1 warmup train step."""
    cfg = PipelineConfig(pipeline_type="agentic", step_level_samples=True,
                         rollout_batch_size=4)
    cfg.actor_train.training_args = TrainingArgs(
        learning_rate=1e-3, per_device_train_batch_size=4, lr_scheduler_type="linear",
        warmup_ratio=0.25)
    return cfg


def optimizer_step_rates(worker) -> list[float]:
    """Records the learning rate each optimizer step of `worker` is taken with."""
    rates: list[float] = []
    worker.strategy.optimizer.register_step_pre_hook(
        lambda optimizer, args, kwargs: rates.append(optimizer.param_groups[0]["lr"]))
    return rates


# deepspeed_train runs the same loop (train_loop.run_update): make test-long
@pytest.mark.parametrize("backend", ["hf_train",
                                     pytest.param("deepspeed_train", marks=pytest.mark.long)])
def test_agentic_step_rows_schedule_spans_the_run(tiny_model_path, backend, one_rank_group):
    """Per-turn rows: the schedule counts train steps (roles.schedule_per_train_step), so
    warmup ends after warmup_ratio of them and the last step's rate is above 0; sized from
    the trajectory count, linear decay reached 0 a third of the way through."""
    from flywheel.config.schema import StrategyArgs
    from flywheel.pipelines.roles.roles import schedule_per_train_step
    from flywheel.workers.train_worker import TrainWorker

    if backend == "deepspeed_train":
        pytest.importorskip("deepspeed")
    cfg = agentic_step_config()
    wcfg = dataclasses.replace(cfg.actor_train, strategy_args=StrategyArgs(
        strategy_name=backend, strategy_config={"zero_stage": 1} if backend != "hf_train"
        else {}))
    worker = TrainWorker("actor_train", 0, 1, tiny_model_path, wcfg, seed=0,
                         total_steps=schedule_horizon(cfg, wcfg, AGENTIC_STEPS),
                         trainable=True,
                         schedule_per_train_step=schedule_per_train_step(cfg))
    if backend == "deepspeed_train":  # the group is the session's (one_rank_group)
        import os
        worker.init_process_group(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    rates, loss = optimizer_step_rates(worker), ActorLoss("vanilla", PolicyLossParams(),
                                                          "token-mean")
    per_step = []
    for turns in TURNS:
        metrics = worker.train_step(batch_of(4 * turns), loss, ppo_epochs=1)
        assert metrics["actor/optimizer_steps"] == turns
        per_step.append(rates[-turns:])
    print(f"{backend}: lr of each optimizer step, by train step: {per_step}")
    assert all(len(set(step)) == 1 for step in per_step)  # one rate per train step
    assert [step[0] for step in per_step] == pytest.approx([0.0, 1e-3, 2e-3 / 3, 1e-3 / 3])
