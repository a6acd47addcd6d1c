"""Loading a Hugging Face causal LM, and the one log-prob computation every HF backend shares.

Keeping `sequence_logprobs` in one place is what makes the backends agree: the trainer's
old/new log-probs and the hf_infer reference log-probs are the same function of the
same logits.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from flywheel.platform.config.schema import ModelArgs
from flywheel.workers.batch import TokenBatch

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ATTN_NAMES = {"fa2": "flash_attention_2"}


def pick_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def load_causal_lm(path: str, model_args: ModelArgs, device: torch.device) -> torch.nn.Module:
    kwargs = {"dtype": TORCH_DTYPES[model_args.dtype]}
    if model_args.attn_implementation:
        name = model_args.attn_implementation
        kwargs["attn_implementation"] = ATTN_NAMES.get(name, name)
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if not model_args.disable_gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model.to(device)


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(path)


def sequence_logprobs(
    model: torch.nn.Module, batch: TokenBatch, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(x_t | x_<t) for every position, aligned with input_ids; column 0 is 0."""
    device = next(model.parameters()).device
    input_ids = batch.input_ids.to(device)  # [B, L]
    logits = model(input_ids=input_ids, attention_mask=batch.attention_mask.to(device)).logits
    logits = logits[:, :-1].float()  # [B, L-1, V] predicts tokens 1..L-1
    log_norm = torch.logsumexp(logits, dim=-1)  # [B, L-1]
    picked = torch.gather(logits, -1, input_ids[:, 1:, None]).squeeze(-1)  # [B, L-1]
    log_probs = F.pad(picked - log_norm, (1, 0))  # [B, L]
    entropy = None
    if with_entropy:
        probs = torch.softmax(logits, dim=-1)
        entropy = F.pad(log_norm - (probs * logits).sum(-1), (1, 0))  # [B, L]
    return log_probs, entropy


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


def batched_logprobs(model: torch.nn.Module, batch: TokenBatch, chunk: int) -> torch.Tensor:
    """sequence_logprobs over micro-batches of `chunk` rows, on CPU, full width."""
    return batched_outputs(lambda micro: sequence_logprobs(model, micro)[0], batch, chunk)
