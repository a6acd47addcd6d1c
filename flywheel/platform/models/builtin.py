"""Built-in models by name: `builtin://NAME` in a config's `pretrain` becomes a local directory.

Why: a fresh machine has no model hub, yet every example and test needs a real HF checkpoint.
`resolve_pretrain` turns a built-in name into a directory built on first use and cached;
anything else (a hub id, a local path) passes through unchanged for transformers to handle.

Registry. `BUILTIN_MODELS` (catalog.py) maps a name to a `BuiltinModel`: an architecture
(with its init seed), built here in a second; a `shipped` folder of weights that came with
the package (`shipped/<name>/`: trained once elsewhere, because training would come out
differently on different CPUs; `warm_start.json` beside the weights records how and with
what accuracy); or a model trained on first use by a function its entry names by import
path, registered from above platform (`register_builtin_model`). A new built-in model is
one new registry entry.

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
from dataclasses import asdict
from pathlib import Path

from flywheel.platform.config.catalogs import import_object
from flywheel.platform.models.cache import BUILTIN_PREFIX, build_once, default_cache_dir
from flywheel.platform.models.catalog import (
    BUILTIN_MODELS,
    SHIPPED_FILES,
    BuiltinModel,
)
from flywheel.platform.models.char_tokenizer import char_vocab_and_merges
from flywheel.platform.models.sources import converted_source
from flywheel.platform.models.tiny_qwen2 import build_tiny_qwen2

logger = logging.getLogger(__name__)

RECIPE_VERSION = 1
SHIPPED_DIR = Path(__file__).parent / "shipped"


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
                f"(package data not installed? reinstall the package, or rebuild the folder "
                f"with its recipe's `--write-shipped`)")
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
