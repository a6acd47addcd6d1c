"""Values a config leaves to be derived from its other values, resolved in one place.

The loaded config keeps what the user wrote (`auto` stays `auto` in config.yaml); code
that acts on such a key asks here, and `platform show-config` prints the result, so the
value a run uses is never a guess.
"""

from __future__ import annotations

from flywheel.platform.config.schema import PipelineConfig


def infer_is_correction(cfg: PipelineConfig) -> str:
    """`auto`: token-truncate when generation runs ahead of training, else none."""
    if cfg.infer_is_correction != "auto":
        return cfg.infer_is_correction
    ahead = cfg.async_generation_ratio > 0 or cfg.partial_rollout
    return "token-truncate" if ahead else "none"


def shared_actor_devices(cfg: PipelineConfig) -> list[int]:
    """Devices both actor_train and actor_infer use (an unset device_mapping means [0])."""
    train, infer = (set(w.device_mapping if w.device_mapping is not None else [0])
                    for w in (cfg.actor_train, cfg.actor_infer))
    return sorted(train & infer)


def offloads_between_phases(cfg: PipelineConfig) -> bool:
    """`auto`/true: whether actor_train and actor_infer take turns on shared devices, each
    freeing its memory for the other (pipelines/phase_switch.py); true with no shared
    device is refused by the checks, so both mean the same here."""
    if cfg.pipeline_type == "sft" or cfg.offload_between_phases is False:
        return False
    return bool(shared_actor_devices(cfg)) and cfg.async_generation_ratio == 0


def derived_values(cfg: PipelineConfig) -> dict[str, str]:
    """key -> value for every key set to be derived (shown by show-config)."""
    out = {}
    if cfg.infer_is_correction == "auto":
        out["infer_is_correction"] = infer_is_correction(cfg)
    if cfg.offload_between_phases == "auto" and cfg.pipeline_type != "sft":
        out["offload_between_phases"] = str(offloads_between_phases(cfg)).lower()
    return out
