"""The Hugging Face model inside the wrappers a strategy puts around it.

Why a module of its own: both hf_model.py (log-probs) and workers/image_inputs.py (the
image-token inputs) read the HF model's config and forward signature through these
wrappers, and image_inputs.py is imported by hf_model.py.
"""

from __future__ import annotations

import torch


def hf_core(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model inside a DeepSpeed engine (its `module`) and a PEFT wrapper
    (its base model); `model` itself otherwise. Its `config` is the HF config (an engine's
    own `config` is DeepSpeed's dict) and its `forward` the HF signature (an engine's and a
    PEFT model's take **kwargs and pass them on)."""
    core = getattr(model, "module", model)  # a DeepSpeed engine's model
    return core.get_base_model() if hasattr(core, "get_base_model") else core  # PEFT
