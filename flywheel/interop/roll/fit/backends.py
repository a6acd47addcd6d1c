"""ROLL's backend settings that flywheel's backends would refuse, made to fit on convert.

A ROLL file's `strategy_config` goes over as written, and its sampling as written; some of
it a flywheel backend refuses (its `config_check`, workers/strategies/registry.py), which
`platform validate` would report. So that every converted file validates:

- sglang sampling from a top-k / top-p truncated distribution becomes vllm: flywheel's
  sglang cannot give that distribution's log-probs (SGLang leaves the truncation out of
  them), vllm samples the same way and gives them;
- a strategy_config key the backend refuses as a memory saving or speed-up it does not
  implement (megatron's interleaved schedule, its Transformer Engine RoPE fusion,
  sequence_parallel at TP 1: the updates are the same without them) is dropped, with the
  backend's reason; the Megatron keys megatron_train runs (sequence_parallel at TP >= 2,
  use_distributed_optimizer, overlap_grad_reduce, ddp_bucket_size, bias_activation_fusion)
  stay. Any other refusal (a key the backend
  does not have, a layout it cannot run) is left for `validate` to report as missing;
- megatron's precision flags (`strategy_config.bf16` / `fp16`, Megatron's own arguments)
  become the role's `model_args.dtype`, the one precision setting flywheel's megatron_train
  trains in. ROLL sets the same flag from model_args.dtype itself
  (roll/configs/worker_config.py), so a flag that is true names the precision the role
  trains in, and one that is false adds nothing.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from flywheel.config.checks.config import check_backend_config
from flywheel.config.derived import is_rule_reward, roles, truncated_sampling
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.conversion import to_config
from flywheel.platform.config.errors import (
    ConfigError,
    MissingMemorySaving,
    format_key_path,
    parse_key_path,
)

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion


def fit_backends(out: Conversion) -> None:
    _sglang_to_vllm(out)
    megatron_precision(out)
    for _ in range(32):  # one refused key per pass
        try:
            cfg = to_config(copy.deepcopy(out.data), PipelineConfig)
        except ConfigError:
            return  # a wrong value: the strict loader names it (roll_convert._validate)
        refused = _first_refusal(cfg, out)
        if not isinstance(refused, MissingMemorySaving):
            return  # none, or one that changes the run: validate reports it as missing
        path = parse_key_path(refused.key_path)
        node = out.data
        for key in path[:-1]:
            node = node[key]
        node.pop(path[-1])
        out.dropped.append(f"{format_key_path(path)}: {refused.message}")


def _first_refusal(cfg, out: Conversion) -> ConfigError | None:
    for role in roles(cfg):
        name = role.worker.strategy_args.strategy_name
        if name not in out.catalogs.backends or is_rule_reward(role, out.catalogs.rewards):
            continue
        try:
            check_backend_config(role, out.catalogs.backends.get(name, role.key_path), cfg)
        except ConfigError as e:
            return e
    return None


def _sglang_to_vllm(out: Conversion) -> None:
    infer = out.data.get("actor_infer") or {}
    strategy = infer.get("strategy_args") or {}
    if strategy.get("strategy_name") != "sglang":
        return
    try:
        cfg = to_config(copy.deepcopy(out.data), PipelineConfig)
    except ConfigError:
        return
    if not (truncated_sampling(cfg) or (cfg.validation is not None
                                        and truncated_sampling(cfg, validation=True))):
        return
    infer["strategy_args"] = {"strategy_name": "vllm"}
    out.mapped.append("actor_infer.strategy_args.strategy_name: sglang -> vllm (flywheel's "
                      "sglang cannot give the log-probs of the top-k / top-p truncated "
                      "distribution this file samples from; vllm samples the same way and "
                      "does; sglang's strategy_config dropped)")


def megatron_precision(out: Conversion) -> None:
    for name, role in out.data.items():
        role_precision(role, name, out)


def role_precision(role: Any, name: str, out: Conversion) -> None:
    """A megatron_train role's Megatron `bf16` / `fp16` flag becomes its model_args.dtype
    (`name`: the role's key path, e.g. teacher.math for a named teacher)."""
    strategy = role.get("strategy_args") if isinstance(role, dict) else None
    if not isinstance(strategy, dict) or strategy.get("strategy_name") != "megatron_train":
        return
    config = strategy.get("strategy_config") or {}
    for flag in ("bf16", "fp16"):
        if flag not in config:
            continue
        key = f"{name}.strategy_args.strategy_config.{flag}"
        if config.pop(flag) is True:
            role.setdefault("model_args", {})["dtype"] = flag
            out.mapped.append(f"{key}: true -> {name}.model_args.dtype: {flag} (the "
                              f"precision megatron_train trains in)")
        else:
            out.dropped.append(f"{key}: false: the role trains in its model_args.dtype, "
                               f"in ROLL as in flywheel")
