"""What every role worker does on start: threads, seeds, and a readiness probe.

Ray starts actors with OMP_NUM_THREADS=1 unless told otherwise; a worker sets torch's
intra-op threads explicitly from its config so that a synchronous run can use every core
while an asynchronous one pins generation and training to their own.
"""

from __future__ import annotations

import os

import torch


class RoleWorker:
    def __init__(self, role: str, rank: int, world_size: int, num_threads: int | None = None):
        self.role = role
        self.rank = rank
        self.world_size = world_size
        threads = num_threads or os.cpu_count() or 1
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)

    def ready(self) -> str:
        return f"{self.role}:{self.rank}"
