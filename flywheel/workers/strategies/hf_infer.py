"""hf_infer: generation with transformers' `generate` (KV cache), one process.

Prompts are left-padded into micro-batches of `infer_batch_size` prompts; each prompt is
sampled `n` times. The log-prob returned per token is log-softmax of the model's raw
logits (temperature 1, no top-k/top-p filtering), the same quantity the trainer computes,
so train/infer mismatch metrics measure the backends and not the sampling knobs.

Sampling is seeded per call (`SamplingParams.seed`), so the same seed and weights give the
same responses: this is what makes a synchronous run reproducible bit for bit.
Partial rollout asks nothing of this backend: the pipeline cuts long responses into
segments of separate `generate` calls (rollout.py), and weights change between calls.
"""

from __future__ import annotations

import torch

from flywheel.platform.config.schema import WorkerConfig
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.base import Generation, InferStrategy, SamplingParams
from flywheel.workers.strategies.hf_model import (
    batched_logprobs,
    load_causal_lm,
    load_tokenizer,
    pick_device,
)


class HFInferStrategy(InferStrategy):
    def __init__(self, model_path: str, cfg: WorkerConfig, seed: int):
        self.cfg = cfg
        self.device = pick_device()
        self.model = load_causal_lm(model_path, cfg.model_args, self.device).eval()
        self.model.requires_grad_(False)
        tokenizer = load_tokenizer(model_path)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.eos_id = tokenizer.eos_token_id
        self.version = 0

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        generator_seed = sampling.seed
        out: list[Generation] = []
        size = self.cfg.infer_batch_size
        for start in range(0, len(prompts), size):
            torch.manual_seed(generator_seed + start)
            out.extend(self._generate_chunk(prompts[start:start + size], start, sampling))
        return out

    def _generate_chunk(self, prompts: list[list[int]], offset: int,
                        sampling: SamplingParams) -> list[Generation]:
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for i, p in enumerate(prompts):  # left padding keeps every prompt's end aligned
            input_ids[i, width - len(p):] = torch.tensor(p)
            attention[i, width - len(p):] = 1
        stop_ids = [self.eos_id, *sampling.stop_token_ids]
        kwargs = dict(
            max_new_tokens=sampling.max_new_tokens,
            num_return_sequences=sampling.n,
            do_sample=sampling.do_sample,
            eos_token_id=stop_ids,
            pad_token_id=self.pad_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        if sampling.do_sample:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p,
                          top_k=sampling.top_k if sampling.top_k > 0 else None)
        result = self.model.generate(
            input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device),
            **kwargs,
        )
        new_tokens = result.sequences[:, width:].cpu()  # [B*n, T]
        logits = torch.stack(result.logits, dim=1).float().cpu()  # [B*n, T, V]
        token_lp = torch.log_softmax(logits, -1).gather(-1, new_tokens[..., None]).squeeze(-1)
        gens = []
        for row in range(new_tokens.shape[0]):
            ids = new_tokens[row].tolist()
            end, reason = len(ids), "length"
            for t, tok in enumerate(ids):
                if tok in stop_ids:
                    end, reason = t + 1, "stop"
                    break
            gens.append(Generation(
                prompt_index=offset + row // sampling.n,
                token_ids=ids[:end],
                log_probs=token_lp[row, :end].tolist(),
                finish_reason=reason,
            ))
        return gens

    def update_weights(self, named_tensors: dict[str, torch.Tensor], version: int) -> None:
        missing, unexpected = self.model.load_state_dict(named_tensors, strict=False)
        if unexpected or [m for m in missing if not m.endswith("lm_head.weight")]:
            raise ValueError(f"weight sync mismatch: missing={missing} unexpected={unexpected}")
        self.model.tie_weights()
        self.version = version

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        return batched_logprobs(self.model, batch, self.cfg.infer_batch_size)
