"""Loading a Hugging Face causal LM, and the one log-prob computation every HF backend shares.

Keeping `sequence_logprobs` in one place is what makes the backends agree: the trainer's
old/new log-probs and the hf_infer reference log-probs are the same function of the
same logits, and of the same sampled distribution (temperature, top-k, top-p).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from flywheel.algorithms.sampled_distribution import (
    RAW,
    SampledDistribution,
    entropy_of_logits,
    picked_logits,
)
from flywheel.config.schema import ModelArgs
from flywheel.platform.liveness import tick
from flywheel.workers.batch import TokenBatch
from flywheel.workers.image_inputs import token_types
from flywheel.workers.strategies.omni_thinker import is_omni, load_thinker
from flywheel.workers.strategies.sequence_packing import PackingPlan
from flywheel.workers.strategies.wrapped_model import hf_core

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ATTN_NAMES = {"fa2": "flash_attention_2"}

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def pick_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def load_causal_lm(path: str, model_args: ModelArgs, device: torch.device) -> torch.nn.Module:
    kwargs = {"dtype": TORCH_DTYPES[model_args.dtype]}
    if model_args.attn_implementation:
        name = model_args.attn_implementation
        kwargs["attn_implementation"] = ATTN_NAMES.get(name, name)
    model = load_pretrained(path, **kwargs)
    if not model_args.disable_gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model.to(device)


def load_pretrained(path: str, **kwargs) -> torch.nn.Module:
    """The checkpoint at `path` as the class flywheel's HF backends (and `platform export`)
    load it as; `kwargs` as for `from_pretrained`."""
    # imported here, not at the top: a worker on a latency-only backend (latency_sim.py)
    # imports this module but loads no model, and transformers' model classes cost seconds
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(path)
    # A Qwen3-Omni checkpoint (no auto class) loads as its thinker (omni_thinker.py).
    if is_omni(config):
        return load_thinker(path, config, **kwargs)
    # an image-text checkpoint (a vision tower beside its language model: Idefics3,
    # Qwen2-VL, ...) loads as transformers' image-text-to-text class, which takes the
    # prompt's image tensors (workers/image_inputs.py); its lm head and base model are
    # where sequence_logprobs reads them, as for a causal LM
    vision = getattr(config, "vision_config", None) is not None
    auto = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    return auto.from_pretrained(path, **kwargs)


def distinct_state_tensors(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The model's state dict as its live tensors (not detached copies), each once: a
    tied parameter (lm_head = embed_tokens) keeps its first name. What a weight sync
    sends; the receivers tie lm_head again."""
    named, seen = [], set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            named.append((name, tensor))
    return named


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


# Positions whose vocabulary-wide logits exist at once. At SmolLM2's 49k vocabulary, 1024
# positions are 200 MB of fp32 logits; a whole batch of 64 x 256 would be 3.2 GB, and
# twice that with the softmax kept for backward.
LOGIT_CHUNK_POSITIONS = 1024
# Config fields of architectures whose output logits are not just lm_head(hidden): for
# those the log-probs come from the model's own logits (whole batch, as transformers
# computes them). A softcap c acts whenever it is set (c * tanh(z / c): 1.0 caps at 1,
# Gemma-2's modeling code tests `is not None`); a scale or divisor of 1.0 changes nothing.
SOFTCAP_LOGITS = ("final_logit_softcapping",)
SCALED_LOGITS = ("logit_scale", "logits_scaling")  # Cohere: z * s; Granite: z / s


def sequence_logprobs(
    model: torch.nn.Module, batch: TokenBatch, with_entropy: bool = False,
    distribution: SampledDistribution = RAW, chunked: bool = True,
    positions: torch.Tensor | None = None, packing: PackingPlan | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(x_t | x_<t) for every position, aligned with input_ids; column 0 is 0.

    pi is the distribution the sampler draws from (`algorithms/sampled_distribution.py`).
    The language-model head runs over `LOGIT_CHUNK_POSITIONS` positions at a time (under
    activation checkpointing when training, so backward recomputes each chunk's logits
    instead of keeping them): no [batch, length, vocab] tensor is built. `chunked=False`
    runs the model's own forward and takes its whole logits instead: DeepSpeed ZeRO-3
    gathers parameters through the top-level module's hooks, and calling the decoder and
    the head one by one gave wrong gradients there (measured against hf_train).

    `positions` ([B, L], nonzero where a log-prob is wanted; None: everywhere) restricts
    the head and the vocabulary-wide log-softmax to those positions and leaves 0 (and
    entropy 0) elsewhere. The training forward passes the response mask: a policy loss
    reads no prompt position, and on a short-response RL batch (SmolLM2's example: ~60
    prompt tokens, 16 response tokens) the head over 49k words is most of the work.

    `packing` (not None: `training_args.sequence_packing`) runs the model over the rows
    packed end to end, and with shared prefixes (sequence_packing.py); padding positions
    then get 0 like unwanted ones.
    """
    device = next(model.parameters()).device
    input_ids = batch.input_ids.to(device)  # [B, L]
    attention_mask = batch.attention_mask.to(device)
    # image prompts: the rows' image tensors, collated for this forward (image_inputs.py)
    images = batch.images.model_inputs(device) if batch.images is not None else {}
    targets = input_ids[:, 1:]  # [B, L-1]
    rows, width = targets.shape
    if packing is None:
        packed, source = None, None
    else:
        if images:  # the config refuses sequence_packing with image data
            raise ValueError("sequence packing takes no image rows")
        packs = packing.pack(batch.input_ids, batch.attention_mask, batch.response_mask)
        packed = packs.model_inputs(model)
        source = packs.source[:, :-1].to(device).reshape(-1)  # [B * (L-1)] into [P * W]
        positions = batch.attention_mask if positions is None else positions

    def model_inputs(model_ids: torch.Tensor) -> dict:
        """The forward's arguments: the rows (image tensors with them), or the packs."""
        if packed is not None:
            return packed
        types = token_types(model, model_ids) if images else {}
        return {"input_ids": model_ids, "attention_mask": attention_mask, **images, **types}

    # [N] flat indices (into [B * (L-1)]) of the positions computed; None: all of them
    wanted = (None if positions is None
              else positions.to(device)[:, 1:].reshape(-1).nonzero().squeeze(1))

    def at_wanted(per_position: torch.Tensor) -> torch.Tensor:
        """[N, D] rows of the model's [B, L, D] (packed: [P, W, D]) output that predict
        the wanted targets (position t predicts token t + 1)."""
        if source is not None:
            return per_position.reshape(-1, per_position.shape[-1])[source[wanted]]
        flat = per_position[:, :-1].reshape(rows * width, -1)
        return flat if wanted is None else flat[wanted]

    flat_targets = targets.reshape(-1) if wanted is None else targets.reshape(-1)[wanted]
    if not chunked or own_logits(model):
        with generated_image_tokens_as_text(model, batch, input_ids, images) as model_ids:
            flat_logits = at_wanted(model(**model_inputs(model_ids)).logits)
        log_probs, entropy = _token_logprobs(flat_logits, flat_targets, distribution,
                                             with_entropy)
    else:
        with generated_image_tokens_as_text(model, batch, input_ids, images) as model_ids:
            hidden = model.base_model(**(model_inputs(model_ids) | {"use_cache": False})
                                      ).last_hidden_state  # [B, L, H] (packed: [P, W, H])
        head = model.get_output_embeddings()
        flat_hidden = at_wanted(hidden)
        parts = []
        # at least one (maybe empty) chunk: a micro-batch with no wanted position still
        # gives outputs attached to the graph, so its (zero) loss back-propagates
        for start in range(0, max(1, flat_targets.shape[0]), LOGIT_CHUNK_POSITIONS):
            tick()  # a long forward is progress (platform/liveness.py)
            piece = (flat_hidden[start:start + LOGIT_CHUNK_POSITIONS],
                     flat_targets[start:start + LOGIT_CHUNK_POSITIONS])
            if torch.is_grad_enabled() and flat_hidden.requires_grad:
                parts.append(checkpoint(_head_logprobs, head, *piece, distribution,
                                        with_entropy, use_reentrant=False))
            else:
                parts.append(_head_logprobs(head, *piece, distribution, with_entropy))
        log_probs = torch.cat([lp for lp, _ in parts])
        entropy = torch.cat([e for _, e in parts]) if with_entropy else None
    log_probs = F.pad(_scattered(log_probs, wanted, rows * width).view(rows, width), (1, 0))
    if entropy is not None:
        entropy = F.pad(_scattered(entropy, wanted, rows * width).view(rows, width), (1, 0))
    return log_probs, entropy  # [B, L] each


def own_logits(model: torch.nn.Module) -> bool:
    """Whether the log-probs come from the model's own (whole-batch) logits rather than
    its base model's hidden states through the head in chunks: logits that are not
    lm_head(hidden) (SCALED_LOGITS), and a model that is its own base model (Qwen3-Omni's
    thinker, base_model_prefix "thinker": the images are merged into the embeddings in its
    top-level forward, and its text model takes no image inputs; the cost is the whole
    [B, L, V] logits of a micro-batch at once). A DeepSpeed engine and a
    PEFT model are judged by the model they wrap (an engine's `base_model` is its module's)."""
    core = hf_core(model)
    config = core.config  # the HF config: a DeepSpeed engine's own `config` is DeepSpeed's
    return (core.base_model is core
            or any(getattr(config, k, None) is not None for k in SOFTCAP_LOGITS)
            or any(getattr(config, k, None) not in (None, 1.0) for k in SCALED_LOGITS))


@contextlib.contextmanager
def generated_image_tokens_as_text(model: torch.nn.Module, batch: TokenBatch,
                                   input_ids: torch.Tensor, images: dict
                                   ) -> Iterator[torch.Tensor]:
    """The ids to give an image-text model for `input_ids`, with an image placeholder the
    policy *generated* (on the response mask) read as the text token it is.

    Why: vLLM places a prompt's image features by position, and transformers' `generate`
    passes the pixels at prefill only, so a sampled `<image>` token is embedded as text on
    both engines; the full-sequence forward (the trainer, hf_infer's log-prob pass) puts
    image features at every `<image>` id instead, and fails or scores another sequence.
    Here those response positions get another id for the model's image-token lookup, and
    a pre-hook on the input embedding gives it the placeholder's id back there."""
    generated = batch.response_mask.to(input_ids.device).bool() if images else None
    with image_tokens_as_text(model, input_ids, generated) as model_ids:
        yield model_ids


@contextlib.contextmanager
def image_tokens_as_text(model: torch.nn.Module, input_ids: torch.Tensor,
                         text: torch.Tensor | None) -> Iterator[torch.Tensor]:
    """`generated_image_tokens_as_text` for any mask: the image placeholders at `text`
    ([B, L] bool, or None: none) are embedded as the text token they are. hf_infer's
    `generate` uses it for a partial rollout's continuation, whose prompt holds the
    response so far (hf_infer.py)."""
    image_id = getattr(hf_core(model).config, "image_token_id", None)  # not DeepSpeed's
    generated = None
    if text is not None and image_id is not None:
        generated = (input_ids == image_id) & text
    if generated is None or not generated.any():
        yield input_ids
        return
    embedding = model.get_input_embeddings()

    # The embedding looks the placeholder id up again at those positions (a pre-hook on
    # its input ids, not a read of its weight: under ZeRO-3 the weight is gathered only
    # inside the embedding's own forward, and its gradient flows as for any token).
    def as_text(module, inputs):  # inputs[0]: the ids [B, L]
        rows, width = inputs[0].shape
        if width != generated.shape[1] or rows % generated.shape[0]:
            return None  # a decoding step of `generate`, not the full ids
        # `generate` repeats each row for its num_return_sequences (repeat_interleave)
        mask = generated.repeat_interleave(rows // generated.shape[0], dim=0)
        return (inputs[0].masked_fill(mask, image_id), *inputs[1:])

    handle = embedding.register_forward_pre_hook(as_text)
    try:
        yield input_ids.masked_fill(generated, 0 if image_id != 0 else 1)
    finally:
        handle.remove()


def _scattered(values: torch.Tensor, wanted: torch.Tensor | None, size: int) -> torch.Tensor:
    """[size]: `values` [N] at the flat indices `wanted`, 0 elsewhere (all: `values`)."""
    if wanted is None:
        return values.reshape(size)
    return values.new_zeros(size).index_put((wanted,), values)


def _head_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                   distribution: SampledDistribution, with_entropy: bool
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs (and entropies) [N] of `targets` [N] from hidden states [N, H]."""
    lp, ent = _token_logprobs(head(hidden), targets, distribution, with_entropy)
    return lp, (ent if ent is not None else torch.zeros(0, device=lp.device))


def _token_logprobs(logits: torch.Tensor, targets: torch.Tensor,
                    distribution: SampledDistribution, with_entropy: bool
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    logits = distribution.logits(logits.float())  # [..., V]
    log_norm = torch.logsumexp(logits, dim=-1)  # [...]
    picked = picked_logits(logits, targets)  # [...]
    entropy = entropy_of_logits(logits, log_norm) if with_entropy else None
    return picked - log_norm, entropy


@torch.no_grad()
def batched_outputs(per_token: Callable[[TokenBatch], torch.Tensor], batch: TokenBatch,
                    chunk: int) -> torch.Tensor:
    """`per_token` ([b, L] outputs of a model) over micro-batches of `chunk` rows, each cut
    to its own width, gathered on CPU at the batch's full width."""
    width = batch.input_ids.shape[1]
    out = []
    for micro in batch.chunks(chunk):
        values = per_token(micro.trimmed())
        out.append(F.pad(values.cpu(), (0, width - values.shape[1])))
    return torch.cat(out)


def batched_logprobs(model: torch.nn.Module, batch: TokenBatch, chunk: int,
                     distribution: SampledDistribution = RAW) -> torch.Tensor:
    """sequence_logprobs over micro-batches of `chunk` rows, on CPU, full width."""
    return batched_outputs(lambda micro: sequence_logprobs(model, micro, False, distribution)[0],
                           batch, chunk)
