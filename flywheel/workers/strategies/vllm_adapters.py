"""LoRA adapters served by vllm, one per weight version (`model_args.lora_sync: adapter`).

A weight sync of a LoRA run can send only A and B (lora.py `adapter_weights`, a few MB
where the merged model is hundreds) and let the engine add (alpha / r) B A x at every
adapted layer (Hu et al. 2021, arXiv 2106.09685, eq. 3). vLLM loads an adapter from a
folder as PEFT writes it, so each version's tensors become `adapter_model.safetensors`
plus `adapter_config.json` in a folder under /dev/shm, registered as adapter id
version + 1 (vLLM refuses id 0). Requests admitted after the load carry the newest
adapter (vllm_engine_loop.py); a running request keeps the adapter it started with,
because vLLM binds one to a request for its lifetime: its tokens are all of its start
version, also with partial rollout (whose tokens would otherwise move to the new weights).

Adapters no running request uses are removed at the next load, and their folders with
them; `max_loras` (4 unless strategy_config says) bounds how many versions run at once,
which covers an async run's start versions (at most ceil(async_generation_ratio) + 1).

The config's targets may be patterns (`all-linear`, a regex): the folder names the
modules the tensors belong to, as PEFT does once it resolved them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field

import torch
from safetensors.torch import save_file
from vllm.lora.request import LoRARequest

# vLLM's accepted max_lora_rank values (vllm/config/lora.py MaxLoRARanks)
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_MAX_LORAS = 4
SHM_DIR = "/dev/shm"


@dataclass(frozen=True)
class AdapterSpec:
    """What the engine must know before the first adapter arrives: its rank and scale."""

    rank: int
    alpha: float


def engine_lora_kwargs(spec: AdapterSpec) -> dict:
    """EngineArgs defaults for serving `spec`'s adapters (strategy_config may override)."""
    fitting = [r for r in VLLM_RANKS if r >= spec.rank]
    if not fitting:
        raise ValueError(f"lora_rank {spec.rank} is above vLLM's largest ({VLLM_RANKS[-1]})")
    return {"enable_lora": True, "max_lora_rank": fitting[0], "max_loras": DEFAULT_MAX_LORAS}


def adapter_config(spec: AdapterSpec, names: list[str]) -> dict:
    """PEFT's adapter_config.json for tensors named `<prefix>.<module>.lora_A.weight`."""
    modules = sorted({name.split(".lora_")[0].rsplit(".", 1)[-1] for name in names
                      if ".lora_" in name})
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": spec.rank,
            "lora_alpha": spec.alpha, "target_modules": modules, "lora_dropout": 0.0,
            "bias": "none", "modules_to_save": None, "fan_in_fan_out": False,
            "use_rslora": False, "use_dora": False}


@dataclass
class AdapterVersions:
    """The adapters registered with one engine, by version, and their folders."""

    spec: AdapterSpec
    current: LoRARequest | None = None
    folders: dict[int, str] = field(default_factory=dict)  # adapter id -> folder

    def load(self, engine, tensors: dict[str, torch.Tensor], version: int) -> LoRARequest:
        """Write and register `version`'s adapter; it becomes `current`."""
        folder = tempfile.mkdtemp(prefix=f"flywheel-lora-v{version}-",
                                  dir=SHM_DIR if os.path.isdir(SHM_DIR) else None)
        try:
            save_file({k: v.contiguous() for k, v in tensors.items()},
                      os.path.join(folder, "adapter_model.safetensors"))
            with open(os.path.join(folder, "adapter_config.json"), "w") as f:
                json.dump(adapter_config(self.spec, list(tensors)), f)
            request = LoRARequest(f"flywheel-v{version}", version + 1, folder)
            engine.add_lora(request)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        self.folders[request.lora_int_id] = folder
        self.current = request
        return request

    def prune(self, engine, in_use: set[int]) -> None:
        """Remove the adapters neither current nor used by a running request."""
        keep = set(in_use) | ({self.current.lora_int_id} if self.current else set())
        for lora_id in [i for i in self.folders if i not in keep]:
            engine.remove_lora(lora_id)
            shutil.rmtree(self.folders.pop(lora_id), ignore_errors=True)
