"""What vllm and sglang refuse that can be told without their packages.

Their strategy_config keys are their engines' own fields (vllm.EngineArgs, sglang
ServerArgs), known only where the package is installed, so an unknown key is refused when
the engine starts (vllm_infer.py, sglang_infer.py). The keys flywheel sets itself, and
sglang's sampling limit, are refused here too, by `platform validate` (registry.py
`config_check`). Key paths are the role's (`generating_args.top_k`) unless they start
outside a role (`validation.`).
"""

from __future__ import annotations

from flywheel.config.derived import served_adapter, truncated_sampling
from flywheel.config.schema import PipelineConfig, WorkerConfig
from flywheel.workers.strategies.strategy_config import StrategyConfigError, refuse_owned

VLLM_OWNED = {"model": "the role's model_args.model_name_or_path (or pretrain)",
              "dtype": "model_args.dtype", "seed": "the top-level seed",
              "logprobs_mode": "flywheel (processed_logprobs, the trainer's quantity)",
              "generation_config": "flywheel (generating_args only, never the model's file)",
              "enable_lora": "actor_train.model_args.lora_sync (adapter: vllm serves it)"}
# vLLM's LoRA engine fields: they shape the adapters `lora_sync: adapter` serves, and do
# nothing without them.
VLLM_LORA_FIELDS = ("max_loras", "max_lora_rank", "max_cpu_loras", "lora_dtype",
                    "fully_sharded_loras", "lora_target_modules", "specialize_active_lora")
SGLANG_OWNED = {"model_path": "the role's model_args.model_name_or_path (or pretrain)",
                "dtype": "model_args.dtype", "random_seed": "the top-level seed",
                "skip_tokenizer_init": "flywheel (token ids in, token ids out)"}
SGLANG_TRUNCATION = ("SGLang's log-probs leave out its top-p truncation, and without "
                     "top_k no fixed number of its top log-probs holds the nucleus, so "
                     "training would use another distribution than the one sampled; set "
                     "top_k too (the log-probs are then renormalised over its top_k), use "
                     "vllm or hf_infer, or unset top_p")


def check_vllm(kind: str, worker: WorkerConfig, cfg: PipelineConfig) -> None:
    given = worker.strategy_args.strategy_config
    refuse_owned("vllm", given, VLLM_OWNED)
    serves_adapter = kind == "actor_infer" and served_adapter(cfg) is not None
    for key in VLLM_LORA_FIELDS:
        if key in given and not serves_adapter:
            raise StrategyConfigError("", f"strategy_args.strategy_config.{key}",
                                      "shapes the LoRA adapters vllm serves, and this vllm "
                                      "serves none (actor_train.model_args.lora_sync: "
                                      "adapter turns it on): remove it")




def check_sglang(kind: str, worker: WorkerConfig, cfg: PipelineConfig) -> None:
    refuse_owned("sglang", worker.strategy_args.strategy_config, SGLANG_OWNED)
    if kind != "actor_infer":
        return
    # top_k set: the log-probs are renormalised over the top_k sglang returns
    # (sglang_outputs.py); top_p alone: refused
    if truncated_sampling(cfg) and cfg.actor_infer.generating_args.top_k <= 0:
        raise StrategyConfigError("", "generating_args.top_p", SGLANG_TRUNCATION)
    if cfg.validation is not None and truncated_sampling(cfg, validation=True) and \
            cfg.validation.generating_args.top_k <= 0:
        raise StrategyConfigError("", "validation.generating_args.top_p", SGLANG_TRUNCATION)
