"""Built-in models by name: `builtin://NAME` in a config's `pretrain` becomes a local directory.

Why: a fresh machine has no model hub, yet every example and test needs a real HF checkpoint.
`resolve_pretrain` turns a built-in name into a directory built on first use and cached;
anything else (a hub id, a local path) passes through unchanged for transformers to handle.

Registry. `BUILTIN_MODELS` maps a name to a `BuiltinModel`: either an architecture (with its
init seed), built here in a second, or a `shipped` folder of weights that came with the
package (`shipped/<name>/`: the warm-started models, whose SFT would come out differently on
different CPUs, so they are trained once by `flywheel.workshop.sft_recipes --write-shipped`
and shipped; `warm_start.json` beside the weights records how and with what accuracy). A new
built-in model is one new registry entry.

Cache. `<cache>/<name>-<spec hash>/` (cache.py: where, and how a folder is built once and
atomically). The spec hash covers everything that shapes the weights (architecture, seeds,
tokenizer alphabet, `RECIPE_VERSION`; for a shipped model, the bytes of its files), so a
change builds a new directory instead of reusing a stale one; bump `RECIPE_VERSION` when
code changes the result without changing a setting.
A shipped model is copied into the cache (a few MB) so that every built-in resolves the same
way, to a writable folder of its own.

`tiny-qwen2` builds in <1 s; a shipped model is a copy (of `BuiltinModel.files`: the text
models' SHIPPED_FILES, plus the processor's files for a vision-language model).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from flywheel.platform.config.catalogs import import_object
from flywheel.platform.models.cache import BUILTIN_PREFIX, build_once, default_cache_dir
from flywheel.platform.models.char_tokenizer import char_vocab_and_merges
from flywheel.platform.models.sources import converted_source
from flywheel.platform.models.tiny_qwen2 import TinyQwen2Spec, build_tiny_qwen2

logger = logging.getLogger(__name__)

GRID_ARCH = TinyQwen2Spec(num_attention_heads=4, num_key_value_heads=2)
RECIPE_VERSION = 1
SHIPPED_DIR = Path(__file__).parent / "shipped"
SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "warm_start.json")
# a vision-language model also ships its processor: the image processor's settings and the
# image token count (processor_config.json) and the chat template that writes image parts
VL_SHIPPED_FILES = SHIPPED_FILES + ("processor_config.json", "chat_template.jinja")


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
        "plan (low greedy success), so RL has the goal-directed play to learn: see "
        "flywheel/workshop/frozen_lake_warm_start.py. Shipped weights.",
        arch=GRID_ARCH,
        shipped="tiny-qwen2-frozenlake",
    ),
    "tiny-idefics3-shapes": BuiltinModel(
        description="Idefics3 vision-language model (64 px images, 16 image tokens; Llama "
        "text model of 4 layers, hidden 64; SmolLM2's tokenizer) after a short SFT warm start "
        "on synthetic shape images (count, colour, position, box): greedy count/colour "
        "accuracy well above chance and well below the ceiling, so RL has room: see "
        "flywheel/workshop/tiny_vl_warm_start.py. Shipped weights (bf16).",
        shipped="tiny-idefics3-shapes",
        files=VL_SHIPPED_FILES,
    ),
    "smollm2-135m-times-rm": BuiltinModel(
        description="SmolLM2-135M-Instruct with a scalar head (sequence classification) "
        "trained on synthetic times-table preferences, a reward model for reward_type "
        "reward_model; trained on first use (minutes): "
        "flywheel/workshop/times_reward_model.py.",
        trained=("flywheel.workshop.times_reward_model:build_times_reward_model",
                 "flywheel.workshop.times_reward_model:recipe_key"),
    ),
}


def spec_hash(model: BuiltinModel) -> str:
    """Hex digest of everything that determines the built checkpoint's weights."""
    if model.shipped is not None:
        return shipped_digest(SHIPPED_DIR / model.shipped, model.files)
    if model.trained is not None:
        key = import_object(model.trained[1])()
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    spec = {
        "recipe_version": RECIPE_VERSION,
        "tokenizer": char_vocab_and_merges(),
        "arch": asdict(model.arch),
        "base": None,  # keys of the former warm-start recipes: kept so cache names stay
        "warm_start": None,
        "data": None,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def shipped_digest(folder: Path, files: tuple[str, ...] = SHIPPED_FILES) -> str:
    """Hex digest of a shipped folder's `files` (names and bytes)."""
    digest = hashlib.sha256()
    for name in files:
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(
                f"shipped built-in model {folder.name}: {name} is missing from {folder} "
                f"(package data not installed? its recipe's `--write-shipped` makes it: "
                f"flywheel.workshop.sft_recipes, or tiny_vl_warm_start for a VL model)")
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def resolve_pretrain(name: str, cache_dir: Path | None = None) -> str:
    """`builtin://NAME` -> local checkpoint directory (built once); a `.gguf` file or a
    packaged GGUF model -> its converted folder (sources.py); anything else unchanged."""
    converted = converted_source(name, Path(cache_dir) if cache_dir else default_cache_dir())
    if converted is not None:
        return converted
    if not name.startswith(BUILTIN_PREFIX):
        return name
    key = name[len(BUILTIN_PREFIX) :]
    if key not in BUILTIN_MODELS:
        known = ", ".join(BUILTIN_PREFIX + k for k in sorted(BUILTIN_MODELS))
        raise ValueError(f"unknown built-in model {name!r}; known built-in models: {known}")
    return str(ensure_built(key, Path(cache_dir) if cache_dir else default_cache_dir()))


def ensure_built(key: str, cache_dir: Path) -> Path:
    """The cached directory of registry entry `key`, building it first if it is missing."""
    model = BUILTIN_MODELS[key]
    final = cache_dir / f"{key}-{spec_hash(model)}"

    def build(out: Path) -> None:
        logger.info("building built-in model %s into %s", key, final)
        _build_into(model, out, cache_dir)

    return build_once(final, build)


def _build_into(model: BuiltinModel, out_dir: Path, cache_dir: Path) -> None:
    if model.trained is not None:
        import_object(model.trained[0])(out_dir)
        return
    if model.shipped is None:
        build_tiny_qwen2(out_dir, model.arch)
        return
    for name in model.files:
        shutil.copyfile(SHIPPED_DIR / model.shipped / name, out_dir / name)
