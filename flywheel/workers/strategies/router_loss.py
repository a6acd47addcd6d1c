"""The MoE load-balancing loss on hf_train and deepspeed_train (`model_args.moe_aux_loss_coef`).

ROLL trains its MoE examples on Megatron, which adds the router's load-balancing loss
(algorithms/moe_balance.py) to every micro-batch's gradient; `platform convert` moves some
of those files onto deepspeed_train (interop/roll/fit/megatron.py), which then must add it
too. megatron_train uses megatron-core's own router loss at the scale below.

How the router logits are taken: transformers' MoE models declare the module whose first
output is a layer's router logits (`_can_record_outputs["router_logits"]`, the TopKRouter
of Qwen2/3-MoE, Qwen3-Next, Qwen3.5-MoE, Mixtral). A forward hook on each records them
during the training forward only (`recording`), whichever path the forward takes
(hf_model.sequence_logprobs' chunked head or the model's own forward), and the hooks are
gone before the backward: gradient checkpointing's recomputation records nothing twice.
The logits keep their graph, so the loss reaches the router and every layer below it.

Scale: Megatron divides the loss of each micro-batch by the micro-batches of the step
and averages the gradient over data-parallel ranks, so the step minimises the mean over
all micro-batches of all ranks. `share` = 1 / (micro-batches x ranks) does the same under
flywheel's sums (train_loop: a rank's micro-batch losses add up, ranks' gradients add up).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from flywheel.algorithms.moe_balance import switch_load_balancing_loss
from flywheel.config.schema import ModelArgs

METRIC = "actor/moe_aux_loss"


class RouterLoss:
    """Records one forward's router logits and turns them into the loss."""

    def __init__(self, model: torch.nn.Module, coeff: float, top_k: int,
                 router_class: type, index: int):
        self.model, self.coeff, self.top_k = model, coeff, top_k
        self.router_class, self.index = router_class, index
        self.logits: list[torch.Tensor] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        self.logits = []
        hooks = [m.register_forward_hook(self._record) for m in self.model.modules()
                 if isinstance(m, self.router_class)]
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()

    def _record(self, module, inputs, output) -> None:
        self.logits.append(output[self.index] if isinstance(output, tuple) else output)

    def loss(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """The recorded forward's loss, summed over its MoE layers; [B, L] mask of the
        micro-batch (the routers saw its B x L positions, flattened row by row)."""
        if not self.logits:
            raise RuntimeError("moe_aux_loss_coef: the forward ran no MoE router")
        mask = attention_mask.to(self.logits[0].device)
        loss = switch_load_balancing_loss(self.logits, mask, self.top_k, self.coeff)
        self.logits = []
        return loss


def router_loss_for(model: torch.nn.Module, model_args: ModelArgs) -> RouterLoss | None:
    """The loss for a policy model under `model_args.moe_aux_loss_coef`, or None when unset
    or 0. "model": the checkpoint's own `router_aux_loss_coef` (what ROLL's Megatron
    takes when the file sets none). A model without an MoE router is refused."""
    setting = model_args.moe_aux_loss_coef
    if setting is None or setting == 0:
        return None
    # the text model's config: a composite one (Qwen3-Omni's thinker) keeps the MoE
    # settings in its text_config; a text model's is its own
    config = model.config.get_text_config()
    recorder = getattr(model, "_can_record_outputs", None) or {}
    spec = recorder.get("router_logits")
    top_k = getattr(config, "num_experts_per_tok", None)
    if spec is None or top_k is None:
        raise ValueError(f"model_args.moe_aux_loss_coef = {setting!r}: "
                         f"{type(model).__name__} has no MoE router to balance")
    coeff = getattr(config, "router_aux_loss_coef", None) if setting == "model" else setting
    if coeff is None:
        raise ValueError("model_args.moe_aux_loss_coef = 'model': the checkpoint's config "
                         "has no router_aux_loss_coef; write the coefficient")
    return RouterLoss(model, float(coeff), int(top_k), spec.target_class, spec.index)
