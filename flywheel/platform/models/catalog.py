"""The built-in models by name: `BUILTIN_MODELS`, what `builtin://NAME` can mean.

An entry is an architecture (with its init seed), built in a second; a `shipped` folder of
weights that came with the package (`shipped/<name>/`, with `warm_start.json` saying how it
was made); or a model `trained` on first use by a function named by import path. A layer
above platform adds its own entries with `register_builtin_model` (the reward model the
workers' reward catalog adds: flywheel/workers/rewards/registry.py), so platform names no
builder of theirs. Importing this module imports no torch (the config checks read it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flywheel.platform.config.catalogs import check_import_path, register_entry
from flywheel.platform.models.tiny_qwen2_spec import TinyQwen2Spec

SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "warm_start.json")
# a vision-language model also ships its processor: the image processor's settings and the
# image token count (processor_config.json) and the chat template that writes image parts
VL_SHIPPED_FILES = SHIPPED_FILES + ("processor_config.json", "chat_template.jinja")

GRID_ARCH = TinyQwen2Spec(num_attention_heads=4, num_key_value_heads=2)


@dataclass(frozen=True)
class BuiltinModel:
    """How to build one built-in checkpoint: from `arch`, or a copy of `shipped/<shipped>`."""

    description: str
    arch: TinyQwen2Spec = field(default_factory=TinyQwen2Spec)
    shipped: str | None = None  # folder under SHIPPED_DIR holding the weights
    files: tuple[str, ...] = SHIPPED_FILES  # the shipped folder's files (copied, hashed)
    # "module:function" that trains it into a folder on first use, and "module:function"
    # of the dict its cache key covers (a model too large to ship, trained from another)
    trained: tuple[str, str] | None = None


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "tiny-qwen2": BuiltinModel(
        description="Qwen2 architecture, 4 layers, hidden 128, char tokenizer; random init."
    ),
    "tiny-qwen2-arith": BuiltinModel(
        description="tiny-qwen2 after a short SFT warm start on 2-digit addition "
        "(~15-35% greedy accuracy: RL has room to improve it); shipped weights.",
        shipped="tiny-qwen2-arith",
    ),
    # Reading a grid means looking a fixed number of characters away from `P` in several
    # directions at once: with 4 heads per layer instead of 2 the SFT below learns to avoid
    # holes in ~1200 steps (measured: the 2-head model still fell in 20-30% of sampled
    # episodes after 1500).
    "tiny-qwen2-h4": BuiltinModel(
        description="tiny-qwen2 with 4 attention heads of 32 (2 key/value heads); random init.",
        arch=GRID_ARCH,
    ),
    "tiny-qwen2-frozenlake": BuiltinModel(
        description="tiny-qwen2-h4 after a cached SFT warm start on a cautious random walker's "
        "FrozenLake play (3x3 maps, bare action-name replies): it avoids holes but has no "
        "plan (low greedy success), so RL has the goal-directed play to learn. Shipped "
        "weights (warm_start.json: how they were made).",
        arch=GRID_ARCH,
        shipped="tiny-qwen2-frozenlake",
    ),
    "tiny-idefics3-shapes": BuiltinModel(
        description="Idefics3 vision-language model (64 px images, 16 image tokens; Llama "
        "text model of 4 layers, hidden 64; SmolLM2's tokenizer) after a short SFT warm start "
        "on synthetic shape images (count, colour, position, box): greedy count/colour "
        "accuracy well above chance and well below the ceiling, so RL has room. Shipped "
        "weights (bf16; warm_start.json: how they were made).",
        shipped="tiny-idefics3-shapes",
        files=VL_SHIPPED_FILES,
    ),
}


def register_builtin_model(name: str, model: BuiltinModel) -> None:
    """Make `builtin://NAME` resolve to `model`: the same entry again is a no-op, another under
    a taken name a ValueError. Register it in a module every process that resolves the name
    imports (a Ray worker runs no registration of the driver's)."""
    if not isinstance(model, BuiltinModel):
        raise ValueError(f"built-in model {name!r}: expected a BuiltinModel, got {model!r}")
    for path in model.trained or ():
        check_import_path(path, f"built-in model {name!r}")
    register_entry(BUILTIN_MODELS, "built-in model", name, model)
