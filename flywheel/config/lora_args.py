"""What actor_train's LoRA keys mean (schema.ModelArgs lora_*), and the values refused.

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", arXiv
2106.09685, eq. 3) trains h = W0 x + (alpha / r) B A x with W0 frozen, A [r, k] and
B [d, r]. The keys are ROLL's; `lora_target` is read here once, for the config check and
for the backend that builds the adapter (workers/strategies/lora.py), so the two agree on
what a target names. Which keys act where is the acts-when table's (LORA_ROWS); the
checks that need the model (a tied module, a target matching nothing, an adapter folder
that disagrees) run when the backend starts. Pure: no I/O, no PEFT import.
"""

from __future__ import annotations

from flywheel.config.schema import ModelArgs, PipelineConfig
from flywheel.platform.config.errors import ConfigError

ALL_LINEAR = "all-linear"  # PEFT's name: every linear layer but the output head
ROLL_ALL = "all"  # ROLL's spelling of the same
REGEX_MARKS = ("*", "$", "|", "(")  # ROLL reads a lora_target holding one as a regex


def lora_targets(text: str) -> str | list[str]:
    """PEFT's `target_modules` for a lora_target: "all-linear" (ROLL's "all" too), a regex
    matched against full module names, or the list of comma-separated names (each matches
    a module whose name is it or ends with "." + it)."""
    text = text.strip()
    if text in (ALL_LINEAR, ROLL_ALL):
        return ALL_LINEAR
    if any(mark in text for mark in REGEX_MARKS):
        return text
    return module_names(text)


def module_names(text: str) -> list[str]:
    """The comma-separated names of `text`, blanks dropped."""
    return [name.strip() for name in text.split(",") if name.strip()]


def lora_alpha(args: ModelArgs) -> float:
    """alpha; unset: 2 x r (ROLL's default)."""
    return args.lora_alpha if args.lora_alpha is not None else 2 * args.lora_rank


def check_lora(cfg: PipelineConfig) -> None:
    """actor_train's LoRA values, when LoRA is on (the acts-when table refuses the keys
    otherwise)."""
    args, key = cfg.actor_train.model_args, "actor_train.model_args"
    coef = args.moe_aux_loss_coef  # not LoRA, but checked with actor_train's model_args
    if isinstance(coef, float) and coef < 0:
        raise ConfigError("", f"{key}.moe_aux_loss_coef", f"must be >= 0 (or 'model'), got "
                                                         f"{coef:g}")
    if args.lora_target is None:
        return
    if not module_names(args.lora_target):
        raise ConfigError("", f"{key}.lora_target", "names no module: write module names "
                                                    "(q_proj,v_proj), a regex or all-linear")
    if args.lora_rank < 1:
        raise ConfigError("", f"{key}.lora_rank", f"must be at least 1, got {args.lora_rank}")
    if args.lora_alpha is not None and args.lora_alpha <= 0:
        raise ConfigError("", f"{key}.lora_alpha", f"must be > 0 (unset: 2 x lora_rank), got "
                                                   f"{args.lora_alpha}")
    if not 0 <= args.lora_dropout < 1:
        raise ConfigError("", f"{key}.lora_dropout", f"must be in [0, 1), got "
                                                     f"{args.lora_dropout}")
    if args.additional_target is not None and not module_names(args.additional_target):
        raise ConfigError("", f"{key}.additional_target", "names no module: write module "
                                                          "names (norm,embed_tokens)")
