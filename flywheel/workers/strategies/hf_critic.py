"""The critic on hf_train: the policy's transformer with a scalar value head per position.

Values are aligned like log-probs: `values[b, t]` is the head applied to the hidden state
after tokens `< t`, i.e. V(s_t) for the state in which token t was chosen, so GAE can pair
it with the reward and log-prob of token t. Column 0 is 0. The head starts untrained
(transformers' token-classification head with one label); the body starts from the policy.
Only `adv_estimator: gae` starts a critic.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AutoModelForTokenClassification

from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.hf_model import TORCH_DTYPES
from flywheel.workers.strategies.hf_train import HFTrainStrategy


class HFCriticStrategy(HFTrainStrategy):
    metric_prefix = "critic"

    def _load_model(self, model_path: str) -> torch.nn.Module:
        model = AutoModelForTokenClassification.from_pretrained(
            model_path, num_labels=1, dtype=TORCH_DTYPES[self.cfg.model_args.dtype])
        return model.to(self.device)

    def _forward(self, micro: TokenBatch, with_entropy: bool
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return token_values(self.model, micro), None

    @torch.no_grad()
    def forward_values(self, batch: TokenBatch) -> torch.Tensor:
        width = batch.input_ids.shape[1]
        out = [token_values(self.model, m.trimmed()).cpu()
               for m in batch.chunks(self.cfg.infer_batch_size)]
        return torch.cat([F.pad(v, (0, width - v.shape[1])) for v in out])

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        raise TypeError("the critic computes values, not log-probs (use forward_values)")

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        raise TypeError("the critic's weights are never synced to actor_infer")


def token_values(model: torch.nn.Module, batch: TokenBatch) -> torch.Tensor:
    """V(s_t) for every position t, aligned with input_ids; column 0 is 0."""
    device = next(model.parameters()).device
    logits = model(input_ids=batch.input_ids.to(device),
                   attention_mask=batch.attention_mask.to(device)).logits  # [B, L, 1]
    return F.pad(logits[:, :-1, 0].float(), (1, 0))  # [B, L]
