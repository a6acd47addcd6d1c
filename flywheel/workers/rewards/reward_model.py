"""reward_model: a sequence-classification model's scalar score of (prompt, response).

A reward model in the style of Skywork-Reward or OpenRLHF's: an HF `*ForSequenceClassification`
checkpoint with one output (num_labels 1), trained on preferences, so its raw score has no
fixed range; only differences between responses to one prompt mean something (Bradley-Terry,
Ouyang et al. 2022). That is also why GRPO's group-relative advantages suit it.

Rendering: the policy's prompt format is not the reward model's, so each sample is rendered
again with the reward model's own tokenizer and chat template as the conversation
[user: prompt, assistant: response], from the prompt's messages before the policy's
template (`Sample.messages`: the record's messages, or its text as the user turn), never
from the policy's rendered prompt, whose role headers would land inside the RM's user turn.
A sample without messages (a direct call) renders its `prompt` text. The response is model
output: its text is tokenized with special tokens split, so a response writing
"<|im_end|>" cannot close its own turn. A tokenizer without a
chat template gets prompt + response as plain text. The tokens are cut to `max_length`
(from the right: the score is then read at the last kept token, `truncated` in the metadata).

Scoring: batches of `batch_size` samples, right-padded; the model reads the score at the
last non-pad token (transformers' pooling for sequence classification, which needs the
config's pad_token_id: set here when the checkpoint has none). The raw score is kept in the
metadata (`rm_raw_score`); the reward is (raw - shift) / scale, then clipped to
[clip_min, clip_max] where set.

The model loads on the reward role's devices (its device_mapping: the worker sees those
as cuda:0 when there are GPUs, else it runs on the CPU), inside the scoring process's
start-up, not under the first sample's limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from flywheel.config.schema import RewardConfig
from flywheel.platform.config.catalogs import settings_from
from flywheel.workers.rewards.registry import Sample, SampleReward
from flywheel.workers.rewards.result import RewardResult


@dataclass
class RewardModelArgs:
    # Most tokens of one rendered (prompt, response); longer ones are cut from the right.
    max_length: int = 1024
    # Samples per forward pass.
    batch_size: int = 8
    # The reward is (raw score - shift) / scale: e.g. the mean and std of the model's
    # scores on typical responses, so that rewards sit near [-1, 1].
    shift: float = 0.0
    scale: float = 1.0
    # Bounds of the reward after the shift and scale; unset: unbounded.
    clip_min: float | None = None
    clip_max: float | None = None

    def __post_init__(self) -> None:
        if self.max_length < 2:
            raise ValueError(f"max_length must be at least 2 tokens, got {self.max_length}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale must be a finite number > 0, got {self.scale}")
        if not math.isfinite(self.shift):
            raise ValueError(f"shift must be a finite number, got {self.shift}")
        for name in ("clip_min", "clip_max"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value}")
        if (self.clip_min is not None and self.clip_max is not None
                and not self.clip_min < self.clip_max):
            raise ValueError(f"clip_min ({self.clip_min}) must be below clip_max "
                             f"({self.clip_max})")


def conversation(prompt: Any, response: str) -> list[dict[str, str]]:
    """[user prompt, assistant response]; a prompt of chat messages keeps its turns."""
    if isinstance(prompt, list):
        return [*prompt, {"role": "assistant", "content": response}]
    return [{"role": "user", "content": str(prompt)},
            {"role": "assistant", "content": response}]


def _ids(tokenizer, text: str, untrusted: bool) -> list[int]:
    return tokenizer(text, add_special_tokens=False,
                     split_special_tokens=untrusted)["input_ids"]


def render_ids(tokenizer, prompt: Any, response: str) -> list[int]:
    """The tokens of (prompt, response) in the reward model's chat template; the response's
    special-token text stays text."""
    if not tokenizer.chat_template:
        bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        text = prompt if isinstance(prompt, str) else "\n".join(
            str(m.get("content", "")) for m in prompt)
        return bos + _ids(tokenizer, text, False) + _ids(tokenizer, response, True)
    marker = "\x00RM_RESPONSE\x00"  # cut the rendered template where the response goes
    pieces = tokenizer.apply_chat_template(conversation(prompt, marker),
                                           tokenize=False).split(marker)
    if len(pieces) != 2:
        raise ValueError(f"reward_model: the chat template shows the response "
                         f"{len(pieces) - 1} times, not once")
    before, after = pieces
    return (_ids(tokenizer, before, False) + _ids(tokenizer, response, True)
            + _ids(tokenizer, after, False))


def shaped(raw: float, args: RewardModelArgs) -> float:
    value = (raw - args.shift) / args.scale
    if args.clip_min is not None:
        value = max(value, args.clip_min)
    if args.clip_max is not None:
        value = min(value, args.clip_max)
    return value


def load(path: str, dtype: str = "fp32"):
    """The sequence-classification model at `path` (eval mode, on the role's device) and
    its tokenizer, with pad_token_id set on the config."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from flywheel.workers.strategies.hf_model import TORCH_DTYPES, pick_device

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path,
                                                               dtype=TORCH_DTYPES[dtype])
    if model.config.num_labels != 1:
        raise ValueError(f"reward_model: {path} has {model.config.num_labels} labels; a "
                         f"reward model has one scalar output (num_labels 1)")
    if model.config.pad_token_id is None:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None \
            else tokenizer.eos_token_id
        if pad is None:
            raise ValueError(f"reward_model: {path} names no pad, nor eos, token")
        model.config.pad_token_id = pad
    return model.to(pick_device()).eval(), tokenizer


def raw_scores(model, batch: list[list[int]]) -> list[float]:
    """The model's score of each token list, read at its last token (right padding)."""
    import torch

    pad = model.config.pad_token_id
    width = max(len(ids) for ids in batch)
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, ids in enumerate(batch):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        mask[row, :len(ids)] = 1
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits
    return [float(x) for x in logits[:, 0].float().cpu()]


def score_samples(model, tokenizer, args: RewardModelArgs,
                  samples: list[Sample]) -> list[RewardResult]:
    # the prompt's messages, not the policy's rendered template (`Sample.messages`)
    rendered = [render_ids(tokenizer, s.prompt if s.messages is None else s.messages,
                           s.response) for s in samples]
    results = []
    for start in range(0, len(rendered), args.batch_size):
        chunk = rendered[start:start + args.batch_size]
        cut = [ids[:args.max_length] for ids in chunk]
        for ids, kept, raw in zip(chunk, cut, raw_scores(model, cut)):
            results.append(RewardResult(shaped(raw, args), {
                "rm_raw_score": raw, "truncated": len(kept) < len(ids)}))
    return results


def build(cfg: RewardConfig) -> SampleReward:
    from flywheel.platform.models.builtin import resolve_pretrain

    args = settings_from(RewardModelArgs, cfg.reward_args, "reward_args")
    if not cfg.model_args.model_name_or_path:
        raise ValueError("reward_model needs model_args.model_name_or_path (or the "
                         "top-level reward_pretrain)")
    model, tokenizer = load(resolve_pretrain(cfg.model_args.model_name_or_path),
                            cfg.model_args.dtype)

    def score(samples: list[Sample]) -> list[RewardResult]:
        return score_samples(model, tokenizer, args, samples)

    return SampleReward(score, batched=True)
