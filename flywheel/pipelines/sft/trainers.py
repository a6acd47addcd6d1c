"""Where an SFT run's actor_train trains: in this process, or as Ray ranks of one group.

SFT has one role and no rollout, so on a one-device backend (hf_train) it trains in the
driver, without Ray. A backend whose ranks form one torch.distributed group
(deepspeed_train: registry `process_group`) runs as RL's actor_train does: a Ray cluster
of `TrainWorker`s on `device_mapping`, each batch sharded over the ranks in order, each
step the shared update loop (workers/strategies/train_loop.py) with the SFT objective.

Both trainers answer the same four calls (`InProcess`, `OnRanks`), so pipelines/sft/run.py
(and DPO's pipelines/dpo/run.py) runs one loop over either:

- `train_step(batch, objective)`: one optimizer step; the metrics (averaged over ranks);
- `logprobs(batch)`: per-token log-probs [B, L], for val/loss;
- `model()`: an HF model holding the current weights, for greedy validation and the
  checkpoint (on ranks: the weights gathered as a weight sync gathers them, ZeRO-3
  included, and loaded into one copy of the model in the driver);
- `close()`.

A kind whose loss reads a frozen policy (DPO's reference) asks `start_trainer` for it by
role name: on ranks it is a forward-only cluster of the same backend on actor_train's
devices (`OnRanks.frozen_logprobs`); in process the pipeline holds its own copy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.loop.step_loop import mean_over_ranks
from flywheel.pipelines.roles.handles import TrainRole
from flywheel.pipelines.roles.roles import join_process_group, role_devices
from flywheel.platform.backend_logs import LOG_FOLDER
from flywheel.platform.models.weight_size import weight_bytes
from flywheel.platform.ray_runtime import start_ray, stop_ray
from flywheel.platform.resources import place_devices, slots_needed
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.hf_model import load_causal_lm
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.registry import strategy_spec
from flywheel.workers.strategies.train_loop import Objective
from flywheel.workers.train_worker import TrainWorker
from flywheel.workers.weight_transfer import copied_weights


def on_ranks(cfg: PipelineConfig) -> bool:
    """Whether actor_train's backend trains as ranks of one process group (Ray workers)."""
    return strategy_spec(cfg.actor_train.strategy_args.strategy_name).process_group


@dataclass
class InProcess:
    """hf_train in the driver, on its one device."""

    strategy: HFTrainStrategy

    @property
    def adapter(self):
        return self.strategy.adapter

    def train_step(self, batch: TokenBatch, objective: Objective) -> dict[str, float]:
        return self.strategy.train_step(batch, objective)

    def logprobs(self, batch: TokenBatch) -> torch.Tensor:
        return self.strategy.forward(batch)

    def model(self) -> torch.nn.Module:
        return self.strategy.model

    def close(self) -> None:
        pass


@dataclass
class OnRanks:
    """actor_train as a Ray cluster of TrainWorkers (one rank per worker)."""

    cfg: PipelineConfig
    role: TrainRole
    placement: object
    model_path: str
    owns_ray: bool
    adapter: None = None  # checks/sft.py refuses LoRA here: the checkpoint is the model
    # forward-only roles by name (start_trainer's `frozen`), on actor_train's devices
    frozen: dict[str, TrainRole] = field(default_factory=dict)
    _model: torch.nn.Module | None = field(default=None, repr=False)

    def train_step(self, batch: TokenBatch, objective: Objective) -> dict[str, float]:
        return mean_over_ranks(self.role.train(batch, objective, ppo_epochs=1).result())

    def logprobs(self, batch: TokenBatch) -> torch.Tensor:
        return padded_logprobs(self.role, batch)

    def frozen_logprobs(self, role: str, batch: TokenBatch) -> torch.Tensor:
        """The frozen role `role`'s per-token log-probs [B, L] of `batch`."""
        return padded_logprobs(self.frozen[role], batch)

    def model(self) -> torch.nn.Module:
        weights = copied_weights(self.role.weights().result())
        if self._model is None:
            args = self.cfg.actor_train.model_args
            self._model = load_causal_lm(self.model_path, args, torch.device("cpu"))
            self._model.gradient_checkpointing_disable()
        loaded = self._model.load_state_dict(weights, strict=False)
        tied = {"lm_head.weight"} if self._model.config.tie_word_embeddings else set()
        if loaded.unexpected_keys or set(loaded.missing_keys) - tied:
            raise RuntimeError(f"actor_train's weights do not fit its model: unexpected "
                               f"{loaded.unexpected_keys[:3]}, missing "
                               f"{sorted(set(loaded.missing_keys) - tied)[:3]}")
        self._model.eval()
        return self._model

    def close(self) -> None:
        try:
            for role in (self.role, *self.frozen.values()):
                role.shutdown()
            self.placement.release()
        finally:
            if self.owns_ray:
                stop_ray()


def padded_logprobs(role: TrainRole, batch: TokenBatch) -> torch.Tensor:
    """`role`'s log-probs of `batch`, sharded over its ranks in order; a batch that does not
    split evenly is padded with copies of its first row, whose log-probs are cut off again."""
    rows, pad = len(batch), -len(batch) % role.world_size
    if pad:
        batch = batch.select(torch.tensor(list(range(rows)) + [0] * pad))
    return role.forward_logprobs(batch).result()[:rows]


def start_trainer(cfg: PipelineConfig, model_path: str, total_steps: int,
                  output_dir: Path, address: str | None = None,
                  frozen: dict[str, str] | None = None) -> InProcess | OnRanks:
    """actor_train, built where its backend trains; `total_steps`: the optimizer steps
    its learning-rate schedule spans (one per SFT step). `frozen`: role name -> model of
    each forward-only role to start beside actor_train on ranks (same backend, devices and
    precision, no optimizer); in process the caller builds its own."""
    if not on_ranks(cfg):
        return InProcess(HFTrainStrategy(model_path, cfg.actor_train, cfg.seed,
                                         total_steps=total_steps))
    frozen = frozen or {}
    devices = role_devices("actor_train", cfg.actor_train)
    colocated = [replace(devices, role=name) for name in frozen]
    owns_ray = start_ray(cfg.ray, slots_needed([devices]), address,
                         forward_worker_output=False,
                         weight_bytes=weight_bytes(model_path, cfg.actor_train.model_args.dtype))
    log_dir = output_dir / LOG_FOLDER
    log_dir.mkdir(exist_ok=True)
    placement, started = None, []
    try:
        placement = place_devices([devices, *colocated])
        # the ranks train at once: the cores are split between them (a frozen role's
        # forwards take turns with the training, so it gets the same share)
        threads = cfg.actor_train.num_threads or max(1, (os.cpu_count() or 1)
                                                     // devices.num_workers)

        def launch(name: str, path: str, trainable: bool) -> TrainRole:
            started.append(TrainRole.launch(
                name, TrainWorker, replace(devices, role=name), placement,
                init_kwargs=dict(model_path=path, cfg=cfg.actor_train, seed=cfg.seed,
                                 num_threads=threads,
                                 cpu_affinity=cfg.actor_train.cpu_affinity,
                                 total_steps=total_steps, trainable=trainable),
                timeout_s=cfg.timeouts.call_s, log_dir=log_dir))
            return started[-1]

        role = launch("actor_train", model_path, True)
        others = {name: launch(name, path, False) for name, path in frozen.items()}
        try:
            for cluster in started:
                cluster.wait_ready(cfg.timeouts.startup_s)
            for cluster in started:
                join_process_group(cluster, cfg.actor_train)
        except BaseException:
            for cluster in started:
                cluster.shutdown()
            raise
    except BaseException:
        if placement is not None:
            placement.release()
        if owns_ray:
            stop_ray()
        raise
    name = cfg.actor_train.strategy_args.strategy_name
    print(f"actor_train: {role.world_size} {name} ranks (Ray workers; logs in {log_dir})"
          + "".join(f"; {other}: {cluster.world_size} frozen {name} ranks on its devices"
                    for other, cluster in others.items()), flush=True)
    return OnRanks(cfg, role, placement, model_path, owns_ray, frozen=others)
