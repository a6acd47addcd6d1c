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


def derived_values(cfg: PipelineConfig) -> dict[str, str]:
    """key -> value for every key set to be derived (shown by show-config)."""
    out = {}
    if cfg.infer_is_correction == "auto":
        out["infer_is_correction"] = infer_is_correction(cfg)
    return out
