"""The training-side roles: actor_train (trains), reference and critic (forward only).

A thin Ray-facing shell over a TrainStrategy: the pipeline decides what to compute, the
strategy how. Weights for actor_infer are put into Ray's object store once per sync so
every inference worker reads the same copy.
"""

from __future__ import annotations

import ray
import torch

from flywheel.platform.config.schema import WorkerConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.role_worker import RoleWorker
from flywheel.workers.strategies.base import LossFn
from flywheel.workers.strategies.registry import strategy_class


class TrainWorker(RoleWorker):
    def __init__(self, role: str, rank: int, world_size: int, model_path: str,
                 cfg: WorkerConfig, seed: int, total_steps: int, trainable: bool,
                 num_threads: int | None = None):
        super().__init__(role, rank, world_size, num_threads)
        cls = strategy_class(cfg.strategy_args.strategy_name)
        self.strategy = cls(model_path, cfg, seed=seed, total_steps=total_steps,
                            trainable=trainable)

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        return self.strategy.forward_logprobs(batch)

    def train_step(self, batch: TokenBatch, loss_fn: LossFn, ppo_epochs: int) -> dict:
        return self.strategy.train_step(batch, loss_fn, ppo_epochs)

    def weights_ref(self) -> list[ray.ObjectRef]:
        """The full weights, put once into the object store (wrapped so Ray passes the ref)."""
        return [ray.put(self.strategy.state_dict_for_sync())]

    def save(self, path: str) -> None:
        self.strategy.save(path)

    def load(self, path: str) -> None:
        self.strategy.load(path)
