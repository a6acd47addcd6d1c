"""The load-balancing loss of a mixture-of-experts router, as Megatron-LM computes it.

Switch Transformer's auxiliary loss (Fedus et al. 2021, arXiv 2101.03961, eq. 4-6), in the
form megatron-core's `switch_load_balancing_loss_func` takes for top-k routing: per MoE
layer, over its T routed tokens and E experts,

    aux = coeff · E / (k · T²) · Σ_e c_e · Σ_t p_t,e

where p_t = softmax(router logits of token t) over all E experts and c_e is how many of
the T tokens picked expert e among their top k. With balanced routing (c_e = T·k/E and
Σ_t p_t,e = T/E) it is `coeff`; it grows as tokens crowd onto fewer experts. Megatron adds
one such loss per MoE layer (the layers' losses sum) to the gradient of every micro-batch,
scaled like the main loss by 1 / micro-batches (its MoEAuxLossAutoScaler). transformers'
`load_balancing_loss_func` differs: it pools every layer's tokens into one loss and does
not divide by k, so its coefficient means another amount.

Only the tokens that exist are counted (`token_mask`): padding neither routes nor counts.
"""

from __future__ import annotations

import torch


def switch_load_balancing_loss(router_logits: list[torch.Tensor], token_mask: torch.Tensor,
                               top_k: int, coeff: float) -> torch.Tensor:
    """Sum over MoE layers of the loss above. `router_logits`: one [N, E] tensor per
    layer for the same N flattened positions; `token_mask`: [N], true where a token is."""
    keep = token_mask.reshape(-1).bool()  # [N]
    total = router_logits[0].new_zeros((), dtype=torch.float32)
    for logits in router_logits:
        logits = logits.float()[keep]  # [T, E]
        tokens, experts = logits.shape
        if tokens == 0:
            continue
        probs = torch.softmax(logits, dim=-1)  # [T, E]
        chosen = torch.topk(probs, top_k, dim=-1).indices  # [T, k]
        counts = torch.zeros(experts, device=logits.device).scatter_add_(
            0, chosen.reshape(-1), torch.ones(chosen.numel(), device=logits.device))  # [E]
        total = total + (probs.sum(0) * counts).sum() * experts / (top_k * tokens * tokens)
    return coeff * total
