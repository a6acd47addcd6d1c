"""Warnings about this machine: what a config needs that is not here.

These are warnings, not errors, because a config is written for the machine it runs on, and
that is often not the one validating it: the ROLL seed names `/data/cpfs_0/...` models,
megatron and sglang, and 24 GPUs, and must still validate on a laptop. `platform validate`
prints them; `platform run` prints them before starting, and the backend factory turns a
missing package into an error only when a role actually starts.

What is checked, and how (no network, nothing imported beyond `find_spec` and torch):
- model paths (`pretrain`, `reward_pretrain`, `model_args.model_name_or_path`): fine if
  `builtin://...`, an existing directory, or shaped like a hub id (`org/name`);
- backend packages, by `importlib.util.find_spec`, naming what to pip install (the backend
  catalog says which module each backend needs and how to install it);
- devices: with CUDA, indices beyond `torch.cuda.device_count()`; without CUDA, an index is a
  logical slot, so only backends that cannot run without a GPU are reported (torch is
  imported only where a GPU driver is: without one it sees no GPU either);
- data files (`data_args.file_name`) that do not exist (relative to the working directory).

Rule rewards load no model and start no backend, so they are skipped.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Callable

from flywheel.config.catalogs import Catalogs
from flywheel.config.derived import devices, is_rule_reward, roles
from flywheel.config.schema import PipelineConfig, RewardConfig

BUILTIN_PREFIX = "builtin://"
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def check_environment(cfg: PipelineConfig, catalogs: Catalogs) -> list[str]:
    """Warnings, one line each, for what `cfg` needs that this machine lacks."""
    return (model_path_warnings(cfg, catalogs) + backend_warnings(cfg, catalogs, is_importable)
            + device_warnings(cfg, catalogs, cuda_device_count()) + data_file_warnings(cfg))


def model_path_warnings(cfg: PipelineConfig, catalogs: Catalogs) -> list[str]:
    paths: dict[str, list[str]] = {}
    for key_path, path in _model_paths(cfg, catalogs):
        paths.setdefault(path, []).append(key_path)
    warnings = []
    for path, key_paths in paths.items():
        if path.startswith(BUILTIN_PREFIX) or os.path.isdir(path):
            continue
        if _HUB_ID.fullmatch(path) and not os.path.isabs(path):
            continue
        warnings.append(f"{', '.join(key_paths)}: model '{path}' not found: it is not a "
                        f"directory on this machine, a hub id (org/name) or a "
                        f"{BUILTIN_PREFIX} name")
    return warnings


def _model_paths(cfg: PipelineConfig, catalogs: Catalogs) -> list[tuple[str, str]]:
    found = [("pretrain", cfg.pretrain)]
    if cfg.reward_pretrain is not None:
        found.append(("reward_pretrain", cfg.reward_pretrain))
    for role in roles(cfg):
        path = role.worker.model_args.model_name_or_path
        if not is_rule_reward(role, catalogs.rewards) and path is not None:
            found.append((f"{role.key_path}.model_args.model_name_or_path", path))
    return found


def is_importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing or broken
        return False


def backend_warnings(cfg: PipelineConfig, catalogs: Catalogs,
                     importable: Callable[[str], bool]) -> list[str]:
    users: dict[str, list[str]] = {}
    for role in roles(cfg):
        if not is_rule_reward(role, catalogs.rewards):
            users.setdefault(role.worker.strategy_args.strategy_name, []).append(role.key_path)
    warnings = []
    for strategy, key_paths in users.items():
        spec = catalogs.backends.get(strategy, "")
        if spec.requires is not None and not importable(spec.requires):
            warnings.append(f"{', '.join(key_paths)}: strategy {strategy} needs the "
                            f"'{spec.requires}' package, which is not installed here: "
                            f"{spec.install_hint}")
    return warnings


# What a GPU driver leaves on a machine: NVIDIA's kernel module, WSL2's GPU device, ROCm's
# (torch.cuda is HIP there). Without any of them torch.cuda sees no device.
GPU_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd")


def cuda_device_count() -> int:
    """GPUs torch sees here; 0 without torch or CUDA. Importing torch is most of what a
    `platform validate` spends (seconds), so a machine without a GPU driver answers 0
    without it."""
    if "torch" not in sys.modules and not any(map(os.path.exists, GPU_DRIVER_PATHS)):
        return 0
    if not is_importable("torch"):
        return 0
    import torch  # only when installed; importing it takes a second

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_warnings(cfg: PipelineConfig, catalogs: Catalogs, gpu_count: int) -> list[str]:
    warnings = []
    for role in roles(cfg):
        if is_rule_reward(role, catalogs.rewards):
            continue
        strategy = role.worker.strategy_args.strategy_name
        highest = max(devices(role.worker))
        if gpu_count == 0 and catalogs.backends.get(strategy, "").needs_cuda:
            warnings.append(f"{role.key_path}: strategy {strategy} needs CUDA GPUs and this "
                            f"machine has none")
        elif gpu_count and highest >= gpu_count:
            warnings.append(f"{role.key_path}.device_mapping: uses device {highest} but this "
                            f"machine has {gpu_count} GPUs (fine if the Ray cluster you join "
                            f"has more)")
    return warnings


def data_file_warnings(cfg: PipelineConfig) -> list[str]:
    data_args = [(f"{r.key_path}.data_args", r.worker.data_args) for r in roles(cfg)
                 if not isinstance(r.worker, RewardConfig)]
    if cfg.validation is not None:
        data_args.append(("validation.data_args", cfg.validation.data_args))
    warnings = []
    for key_path, args in data_args:
        for index, name in enumerate(args.file_name):
            if not name.startswith(BUILTIN_PREFIX) and not os.path.exists(name):
                where = "" if os.path.isabs(name) else f" (relative to {os.getcwd()})"
                warnings.append(f"{key_path}.file_name[{index}]: data file '{name}' does not "
                                f"exist{where}")
    return warnings
