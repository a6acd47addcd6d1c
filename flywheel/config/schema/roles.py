"""The role blocks (actor_train, actor_infer, reference, critic, validation) and what each holds:
model, training, generation, data and backend settings.

Part of the schema (`flywheel.config.schema` re-exports it as one `PipelineConfig`);
every field is documented once, here, beside its definition."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from flywheel.algorithms.policy_loss.params import VariantKnobs
from flywheel.config.schema.algorithm import LossAggMode
from flywheel.config.schema.data import DataArgs
from flywheel.platform.config.field_bounds import bounded

Dtype = Literal["fp32", "bf16", "fp16"]


LoraSync = Literal["merged", "adapter"]


@dataclass
class StrategyArgs:
    # Backend by name: hf_train, deepspeed_train, megatron_train (training roles);
    # hf_infer, vllm, sglang (generation roles); the catalog in
    # flywheel/workers/strategies/registry.py says which roles each can run.
    strategy_name: str = "hf_train"
    # Passed to the backend as is (e.g. ZeRO stage, tensor_parallel_size,
    # gpu_memory_utilization); each backend checks its own keys when it starts.
    strategy_config: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelArgs:
    # Model to load; unset means the top-level `pretrain` (or `reward_pretrain`).
    model_name_or_path: str | None = None
    # Parameter/compute dtype. fp32 is exact on CPU; bf16/fp16 are for GPUs.
    dtype: Dtype = "fp32"
    # transformers attention implementation ("eager", "sdpa", "fa2" = flash_attention_2).
    attn_implementation: str | None = None
    # ROLL semantics: true turns gradient checkpointing off (trading memory for speed).
    disable_gradient_checkpointing: bool = True
    # -- LoRA (Hu et al. 2021, arXiv 2106.09685): actor_train, hf_train or deepspeed_train, RL --
    # Writing lora_target turns LoRA on: W x + (lora_alpha / lora_rank) B A x on the named
    # modules, only A and B (and additional_target) trained, in fp32, the base frozen in
    # `dtype`. Comma-separated module names ("q_proj,v_proj": every module whose name ends
    # with one), a regex matched against full module names (any of * $ | ( in it), or
    # all-linear (ROLL's "all" too): every linear layer but the output head. A module
    # tied to another (SmolLM2's lm_head = embed_tokens) is refused: its update would
    # split the pair. The reference then runs on actor_train with the adapter off.
    lora_target: str | None = None
    # r, the adapter's inner dimension (>= 1).
    lora_rank: int = 8
    # alpha; the update is scaled by alpha / r. Unset: 2 x lora_rank (ROLL's default).
    lora_alpha: float | None = None
    # Dropout on the adapter's input in training, in [0, 1). Above 0 the training forward
    # is random, so the old log-probs get a pass of their own (no fused old log-probs).
    lora_dropout: float = 0.0
    # Comma-separated modules trained in full beside the adapter (PEFT modules_to_save:
    # every module whose name ends with one, so "norm" takes every RMSNorm and
    # "model.norm" only the final one); kept in fp32, synced in place of the originals.
    additional_target: str | None = None
    # A PEFT adapter folder (adapter_config.json + weights) to start from instead of a
    # fresh one; its rank, alpha and targets must equal lora_rank, lora_alpha and
    # lora_target (checked at start).
    adapter_name_or_path: str | None = None
    # What a weight sync sends actor_infer: "merged", every weight with W0 + (alpha / r) B A
    # folded in (any infer backend), or "adapter", only A and B (a few MB), which vllm
    # serves as one LoRA adapter per weight version (actor_train on hf_train; a request
    # keeps the adapter it started on, so partial rollout's tokens stay on their start
    # version). workers/strategies/vllm_adapters.py.
    lora_sync: LoraSync = "merged"
    # -- Frozen modules (ROLL's key): actor_train on hf_train, without LoRA --
    # Comma-separated module prefixes whose parameters do not train (ROLL's VL configs
    # freeze the vision tower: "vision_model"). A prefix matches a parameter whose dotted
    # name starts with it or holds it after a dot ("vision_model" takes Idefics3's
    # model.vision_model.*); a prefix matching no parameter is refused at start.
    freeze_module_prefix: str | None = None
    # -- MoE: actor_train on hf_train or deepspeed_train --
    # Coefficient of the router's load-balancing loss, Megatron's form (per MoE layer,
    # coeff x E / (k x T^2) x sum_e tokens_e x sum_t p_t,e; the layers' losses add up;
    # algorithms/moe_balance.py), added to each micro-batch's loss at Megatron's scale
    # (workers/strategies/router_loss.py). >= 0; "model": the checkpoint's own
    # router_aux_loss_coef, what ROLL's Megatron takes when moe_aux_loss_coeff is unset.
    # Unset or 0: no such loss. Refused at start on a model without an MoE router.
    moe_aux_loss_coef: float | Literal["model"] | None = None


@dataclass
class TrainingArgs:
    # Peak learning rate of the AdamW optimizer (after warmup).
    learning_rate: float = 1.0e-6
    # AdamW decoupled weight decay.
    weight_decay: float = 0.0
    # Samples per micro-batch on one data-parallel rank.
    per_device_train_batch_size: int = 8
    # Micro-batches summed before one optimizer step. One optimizer step consumes
    # per_device_train_batch_size * gradient_accumulation_steps * dp_size samples.
    gradient_accumulation_steps: int = 1
    # Optimizer steps of linear warmup from 0 to learning_rate (train steps with agentic
    # step_level_samples, whose schedule counts train steps: its optimizer steps vary).
    warmup_steps: int = 0
    # Warmup as a fraction of the schedule's optimizer steps, in [0, 1]: warmup_steps =
    # ceil(warmup_ratio x the run's optimizer steps) (ROLL's and transformers' rule); acts
    # only while warmup_steps is 0 (a written warmup_steps wins, as in ROLL).
    warmup_ratio: float = 0.0
    # Learning-rate schedule after warmup, over the run's optimizer steps (train steps
    # with agentic step_level_samples).
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "constant"
    # Global gradient-norm clip; 0 disables.
    max_grad_norm: float = 1.0
    # SFT and DPO (ROLL's num_train_epochs): whole passes over actor_train's records. SFT:
    # the run's steps are then epochs x records // (per_device_train_batch_size x
    # gradient_accumulation_steps x ranks), counted once the data is read, and max_steps
    # must stay unset. DPO (as ROLL's DPO loop): the run stops at max_steps or after
    # int(epochs) such passes over the pairs, whichever comes first. 0: max_steps counts
    # the steps.
    num_train_epochs: float = bounded(0.0, 0)
    # AdamW moment decay rates (adam_beta1, adam_beta2) and denominator epsilon
    # (adam_epsilon).
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1.0e-8
    # Cut each mini-batch into micro-batches by a token budget instead of by
    # per_device_train_batch_size rows: rows sorted by length, each micro-batch as many
    # rows as keep rows x its longest row's length <= max_tokens_per_micro_batch (a longer
    # row alone). Less padding, fewer and fuller forwards; the gradient is the same (the
    # loss divides by the mini-batch's counts), the per-micro-batch loss metrics are means
    # over other cuts. hf_train and deepspeed_train (ROLL: use_dynamic_batching_in_train).
    dynamic_batching: bool = False
    # The token budget of one micro-batch under dynamic_batching (padded tokens: rows x
    # width), >= 1 (ROLL: max_tokens_per_microbatch_in_train). Larger: fewer, bigger
    # forwards and more activation memory.
    max_tokens_per_micro_batch: int = 4096
    # Lay the rows of each micro-batch (and of each log-prob forward of this role) end to
    # end instead of padding each to the longest: position ids restart per sequence and
    # transformers masks attention to within each one (workers/strategies/
    # sequence_packing.py). The same log-probs and gradient as padded, within float
    # rounding; a model whose attention ignores position ids is refused when it loads.
    # hf_train and deepspeed_train (ROLL: use_sequence_packing).
    sequence_packing: bool = False
    # Tokens in one packed row under sequence_packing, >= 0; 0: the micro-batch's longest
    # row (attention work as padded, only short rows merge). Wider merges more rows into
    # fewer, longer ones: attention costs about this many keys per token (ROLL:
    # sequence_packing_args.max_packed_sequence_length_train).
    max_packed_sequence_length: int = 0
    # Under sequence_packing, rows that start with the same prompt (the tokens before their
    # first response token: a GRPO group's samples) carry it once per pack, each row's
    # response seeing the prompt and itself through a 4-D attention mask (the shared-prefix
    # forward, workers/strategies/sequence_packing.py). The same log-probs and gradient as
    # padded, within float rounding; with 8 samples of a short answer per prompt, about
    # half the tokens of a step. Needs sdpa or eager attention (checked when the model
    # loads). hf_train and deepspeed_train.
    shared_prefix_packing: bool = False


@dataclass
class GeneratingArgs:
    # Most tokens generated per response (RLVR). Unset in actor_infer / validation: the
    # top-level response_length (length_defaults.py); written beside a written
    # response_length, the two must agree. Agentic (actor_infer's): written, it caps each
    # tag's custom_envs.<tag>.max_tokens_per_step, the smaller wins, as in ROLL
    # (turn_budget.py); unset it caps nothing.
    max_new_tokens: int = bounded(128, 1)
    # Sampling temperature; log-probs used in training are those of this distribution.
    temperature: float = bounded(1.0, 0)
    # Nucleus sampling; 1.0 disables.
    top_p: float = bounded(1.0, 0, 1, low_open=True)
    # Top-k sampling; 0 or -1 disables.
    top_k: int = bounded(-1, -1)
    # Must be 1 (checked): RL trains on sampled responses and their sampling log-probs,
    # which beam search does not give; kept so ROLL configs (num_beams: 1) load.
    num_beams: int = 1
    # Samples per prompt. RLVR sets it from `num_return_sequences_in_group`.
    num_return_sequences: int = 1
    # false means greedy decoding (validation usually wants this).
    do_sample: bool = True
    # CTRL repetition penalty (> 0; 1.0 off) on every token already in prompt or response,
    # applied the same way by hf_infer, vllm and sglang. The model's own
    # generation_config.json never applies: only what is written here. Validation only:
    # refused in actor_infer (the trainer's log-probs do not include it).
    repetition_penalty: float = 1.0
    # A response ends (finish "stop") at the token that completes any of these strings,
    # kept in the response; every infer backend honours them, beside the tokenizer's eos.
    stop_strings: list[str] | None = None


@dataclass
class WorkerConfig:
    """One role: which model, which backend, which devices, and its knobs."""

    # ROLL's role name; flywheel names roles by their key, so when written it must equal
    # that key (actor_train, rewards.<name> -> <name>, ...): checked.
    name: str | None = None
    # Which weights this role loads, in which dtype.
    model_args: ModelArgs = field(default_factory=ModelArgs)
    # Optimizer and batch sizes (training roles).
    training_args: TrainingArgs = field(default_factory=TrainingArgs)
    # Sampling settings (generation roles).
    generating_args: GeneratingArgs = field(default_factory=GeneratingArgs)
    # Training prompts (read from actor_train's block).
    data_args: DataArgs = field(default_factory=DataArgs)
    # Backend by name and its own settings.
    strategy_args: StrategyArgs = field(default_factory=StrategyArgs)
    # Devices this role owns: a YAML list of ints or ROLL's string forms
    # "list(range(0,4))", "list(range(0,2))+list(range(14,16))", "[1]" (parsed by a
    # grammar, never evaluated). On a machine without GPUs an index is a logical slot.
    # Unset: the role runs as one worker on slot 0.
    device_mapping: list[int] | None = None
    # Devices per worker (tensor/pipeline parallel group size); workers =
    # len(device_mapping) / num_gpus_per_worker.
    num_gpus_per_worker: int = 1
    # Micro-batch size for forward-only work (log-probs), and the most prompts in one
    # generation request: hf_infer cuts a batch into at least two requests per worker (so
    # scoring overlaps generation), vllm and sglang take it in one request per worker up to
    # this many prompts (pipelines/rlvr/generation.py `chunk_size`).
    infer_batch_size: int = 16
    # torch intra-op threads per worker; unset: every core when generation and training
    # take turns (async_generation_ratio 0), half of them each when they overlap.
    num_threads: int | None = None
    # Pin this role's worker processes (every thread) to these CPU cores (Linux); unset:
    # no pinning. Reward workers take it too.
    cpu_affinity: list[int] | None = None


@dataclass
class ActorTrainConfig(VariantKnobs, WorkerConfig):
    """actor_train adds the policy loss: which off-policy variant and its knobs (tis_*,
    topr_*, cispo_*, kimi15_tau: `VariantKnobs`, declared beside the losses in
    algorithms/policy_loss/params.py)."""

    # Policy-gradient loss by name, from the catalog in
    # flywheel/algorithms/policy_loss/registry.py: vanilla REINFORCE, ppo (clipped ratio),
    # gspo (ppo's clip on one length-normalised ratio per response, GSPO; ROLL's
    # importance_sampling: seq), tis (truncated IS), topr, cispo (MiniMax-M1), kimi15 (Kimi
    # k1.5), topr_seq / kimi15_seq (the papers' forms on the whole response's log-ratio;
    # topr and kimi15 are ROLL's per-token forms), or a variant registered with
    # register_policy_loss. On-policy (ratio 0, one ppo_epoch) they all reduce to
    # REINFORCE's gradient.
    pg_variant: str = "ppo"
    # Settings of a pg_variant that declares its own (a LossSpec naming a settings
    # dataclass, e.g. a variant registered with register_policy_loss): key -> value, checked
    # against that dataclass's fields, types and checks when the config loads. flywheel's
    # variants take their knobs as keys of this block (VariantKnobs, ROLL's names) and
    # refuse it.
    pg_variant_args: dict[str, Any] = field(default_factory=dict)
    # How token losses become one number: token-mean over the global batch, or per
    # sequence then mean (seq-mean-*); seq-mean-token-sum-norm is Dr. GRPO's.
    loss_agg_mode: LossAggMode = "seq-mean-token-mean"


@dataclass
class ActorInferConfig(WorkerConfig):
    """actor_infer generates; its backend defaults to hf_infer even when the block is
    written without strategy_args (a default_factory on the PipelineConfig field would only
    apply when the whole block is left out)."""

    # Backend by name and its settings; hf_infer unless named.
    strategy_args: StrategyArgs = field(default_factory=lambda: StrategyArgs("hf_infer"))


@dataclass
class ValidationGeneratingArgs(GeneratingArgs):
    # Validation decodes greedily unless told otherwise, so accuracy is not sampling noise.
    do_sample: bool = False


@dataclass
class ValidationConfig:
    # Validation prompts (RLVR): file_name, keys, max_samples.
    data_args: DataArgs = field(default_factory=DataArgs)
    # Sampling for validation; greedy unless do_sample is set.
    generating_args: ValidationGeneratingArgs = field(default_factory=ValidationGeneratingArgs)


@dataclass
class ModelKeys:
    """The models every role starts from."""

    # Policy model for every role that does not name its own.
    pretrain: str = "builtin://tiny-qwen2-arith"
    # Model for reward roles that load one; the built-in math_rule reward loads none.
    reward_pretrain: str | None = None


@dataclass
class RoleKeys:
    """The role blocks: the policy trained, its generating copy, the reference, the critic."""

    # The policy being trained.
    actor_train: ActorTrainConfig = field(default_factory=ActorTrainConfig)
    # The policy copy that generates; gets actor_train's weights after each sync.
    actor_infer: ActorInferConfig = field(default_factory=ActorInferConfig)
    # Reference policy of a KL term (use_kl_loss, or init_kl_coef > 0); unset means no
    # reference role is started. Without a KL term it is refused (it would run every step
    # for nothing). Runs on a training backend (log-probs of the sampled distribution).
    reference: WorkerConfig | None = None
    # Value model for adv_estimator gae; unset means no critic role. With another
    # estimator it is refused.
    critic: WorkerConfig | None = None


@dataclass
class ValidationKeys:
    """The validation set and its sampling."""

    # Validation set and sampling (RLVR; agentic reads only its generating_args, and plays
    # val_env_manager's envs); unset: no validation. Needs eval_steps > 0.
    validation: ValidationConfig | None = None
