"""The typed shape of a flywheel YAML file.

Key names follow ROLL's so that a ROLL config loads as written (see
`shared/seeds/002_*`): top-level run settings, then one block per role (`actor_train`,
`actor_infer`, `reference`, `critic`, `rewards`, `validation`). Each field is documented
once, here, beside its definition; `platform show-config` prints the resolved values.

Some keys act only under a condition (a loss variant, a feature, a role, a backend or a
pipeline type); `acts_when_table.py` lists each with why, and a key written where its
condition is off is refused.

This module only declares. Loading (YAML, `defaults:`, `${...}`, overrides, strict
conversion) lives in `loader.py`; cross-field rules live in `checks.py`. Nothing here does
I/O or fills one field from another: values derived from others (the output directory,
a role's model path) are resolved at run time by the code that needs them, so the file
you wrote and the config you see stay the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Dtype = Literal["fp32", "bf16", "fp16"]
LoraSync = Literal["merged", "adapter"]
LossAggMode = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]
KlEstimator = Literal["k1", "k2", "k3", "abs"]
NormType = Literal["batch", "group", "none"]
TrackerName = Literal["mlflow", "tensorboard", "wandb", "jsonl"]


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
    # Optimizer steps of linear warmup from 0 to learning_rate.
    warmup_steps: int = 0
    # Warmup as a fraction of the schedule's optimizer steps, in [0, 1]: warmup_steps =
    # ceil(warmup_ratio x the run's optimizer steps) (ROLL's and transformers' rule); acts
    # only while warmup_steps is 0 (a written warmup_steps wins, as in ROLL).
    warmup_ratio: float = 0.0
    # Learning-rate schedule after warmup, over the run's optimizer steps.
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "constant"
    # Global gradient-norm clip; 0 disables.
    max_grad_norm: float = 1.0
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
    # response_length, the two must agree. Agentic runs budget each turn with
    # custom_envs.<tag>.max_tokens_per_step alone: written there, it is refused.
    max_new_tokens: int = 128
    # Sampling temperature; log-probs used in training are those of this distribution.
    temperature: float = 1.0
    # Nucleus sampling; 1.0 disables.
    top_p: float = 1.0
    # Top-k sampling; 0 or -1 disables.
    top_k: int = -1
    # Must be 1 (checked): RL trains on sampled responses and their sampling log-probs,
    # which beam search does not give; kept so ROLL configs (num_beams: 1) load.
    num_beams: int = 1
    # Samples per prompt. RLVR sets it from `num_return_sequences_in_group`.
    num_return_sequences: int = 1
    # false means greedy decoding (validation usually wants this).
    do_sample: bool = True
    # CTRL repetition penalty (> 0; 1.0 off) on every token already in prompt or response,
    # applied the same way by hf_infer, vllm and sglang. The model's own
    # generation_config.json never applies: only what is written here.
    repetition_penalty: float = 1.0
    # A response ends (finish "stop") at the token that completes any of these strings,
    # kept in the response; every infer backend honours them, beside the tokenizer's eos.
    stop_strings: list[str] | None = None


@dataclass
class ReasoningGymTask:
    # Relative share of this task's prompts among the block's tasks (> 0): each record's
    # task is drawn with probability weight / sum of weights (reasoning-gym's composite).
    weight: float = 1.0
    # The task's own settings (its config dataclass in reasoning-gym, e.g. basic_arithmetic's
    # min_digits, max_digits, operators): unknown keys and bad values are refused when the
    # data loads. seed and size are the block's, never a task's.
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReasoningGymArgs:
    # reasoning-gym task name -> its weight and settings, e.g. {basic_arithmetic: {}}; the
    # names are reasoning-gym's (`reasoning_gym.factory.DATASETS`), an unknown one is refused
    # when the data loads. A record's tag is its task's name (domain/* metrics, routing).
    tasks: dict[str, ReasoningGymTask] = field(default_factory=dict)
    # How many records are generated (>= 1): the prompt set, reshuffled every epoch.
    size: int = 500
    # Seed of the generator: the same seed, tasks and size give the same records, so a
    # resumed run draws the same prompts. Give validation another seed than training.
    seed: int = 0


@dataclass
class DataArgs:
    # Prompt template by name: "native" sends the prompt text as is after the tokenizer's
    # bos (a messages-list prompt is an error); "chat" applies the tokenizer's own chat
    # template. ROLL's names (qwen2_5, qwen3, chatml, llama3, ...; see
    # pipelines/data/prompt_templates.py) mean "chat": the template always comes from the
    # tokenizer.
    # An unknown name is an error. Unset: native; validation: actor_train's (a validation
    # value that differs from actor_train's is refused: both encode alike).
    template: str | None = None
    # Per-tag templates (ROLL's tag_to_template): a record whose tag (tag_key) is a key here
    # is encoded with that template, any other with `template`. Names as for `template`; a
    # tag that no training or validation record carries is an error (RLVR only; validation:
    # actor_train's).
    tag_to_template: dict[str, str] = field(default_factory=dict)
    # System message put first by the chat template (chat templates only); unset: the
    # template's own default, if any.
    system_prompt: str | None = None
    # Keyword arguments of the tokenizer's apply_chat_template (e.g. enable_thinking:
    # false), chat templates only.
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # JSONL (.jsonl/.json, one record a line) or parquet files; `builtin://arithmetic/train`
    # and `/val` name the built-in synthetic math set. A single string is one file (ROLL).
    file_name: list[str] = field(default_factory=list)
    # JSONL field holding the prompt text.
    prompt_key: str = "prompt"
    # JSONL field holding the reference answer the reward compares against. A dotted name
    # the row lacks as a column reads inside a dict column ("reward_model.ground_truth":
    # ROLL's VL and verl's layout).
    answer_key: str = "answer"
    # Records tagged with a domain route to the reward whose tag_included holds it.
    tag_key: str = "tag"
    # Keep only the first N records (0 = all): quick runs and CI.
    max_samples: int = 0
    # ROLL's column names, accepted beside prompt_key/answer_key/tag_key: prompt (text
    # column), messages (a column of chat-message lists, or their JSON text), response (the
    # reference answer), id, tag. Each replaces its flywheel key; written together with a
    # flywheel key (not at its default) that names another column, it is an error.
    prompt: str | None = None
    messages: str | None = None
    response: str | None = None
    id: str | None = None
    tag: str | None = None
    # A prompt longer than the top-level prompt_length tokens (after templating): "filter"
    # drops it when the data loads and logs how many were dropped; "error" stops the run.
    overlong_prompts: Literal["filter", "error"] = "filter"
    # Images in prompts (issue 29; ROLL's VL data layout, pipelines/data/image_files.py).
    # The column holding a record's image or list of images: file paths under
    # image_folder, bytes, `data:image/...;base64,` URIs or {"bytes", "path"} structs. A
    # record without it (or with it empty) is a text prompt. Records with images need a
    # model with an image processor, and backends that take images: actor_train hf_train,
    # actor_infer hf_infer (acts_when_table.py refuses the image keys elsewhere).
    image_key: str = "images"
    # The folder every image path is read from and must resolve inside (symlinks
    # followed); unset: image paths are refused (bytes and data URIs need none).
    image_folder: str | None = None
    # Pixel bounds (width * height) each image is resized into before the model's
    # processor sees it, aspect ratio kept (ROLL's image_max_pixels / image_min_pixels;
    # unset: no bound on that side). Both sides of a run get the same resized image.
    image_max_pixels: int | None = None
    image_min_pixels: int | None = None
    # A record whose image cannot be used (missing file, unreadable or corrupt bytes, a
    # decompression bomb, a path outside image_folder, a URL): "error" stops the load with
    # a one-line message naming the record; "skip" drops it and logs how many were skipped.
    bad_images: Literal["error", "skip"] = "error"
    # RLVR training mix by domain (ROLL's key; actor_train only): domain -> probability,
    # e.g. {math: 0.7, code: 0.3}. A domain is a record tag found in the data or, as in
    # ROLL, a reward's name (the records that reward scores); a tag wins when a name is
    # both. Probabilities are >= 0 and sum to 1 (within 0.01, then rescaled exactly); every
    # record must fall in exactly one domain (probability 0 leaves a domain out). Each batch
    # then holds p * rollout_batch_size prompts of each domain, rounded with the remainder
    # carried to the next batch (so the long-run share is exact), each domain drawn in its
    # own seeded order, epoch after epoch (pipelines/rlvr/domain_mix.py). Empty: one shuffled
    # order over all records, whatever their tags.
    domain_interleave_probs: dict[str, float] = field(default_factory=dict)
    # Prompts generated by reasoning-gym tasks (pipelines/data/reasoning_gym_data.py) in
    # place of file_name (RLVR only); score them with `reward_type: reasoning_gym`, which
    # calls each task's own score_answer. The column keys and max_samples name file
    # columns and rows, so they are refused beside it.
    reasoning_gym: ReasoningGymArgs | None = None


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
class ActorTrainConfig(WorkerConfig):
    """actor_train adds the policy loss: which off-policy variant and its knobs."""

    # Policy-gradient loss by name, from the catalog in
    # flywheel/algorithms/policy_loss/registry.py: vanilla REINFORCE, ppo (clipped ratio),
    # gspo (ppo's clip on one length-normalised ratio per response, GSPO; ROLL's
    # importance_sampling: seq), tis (truncated IS), topr, cispo (MiniMax-M1), kimi15 (Kimi
    # k1.5), or a variant registered with register_policy_loss. On-policy (ratio 0, one
    # ppo_epoch) they all reduce to REINFORCE's gradient.
    pg_variant: str = "ppo"
    # Settings of a pg_variant that declares its own (a LossSpec naming a settings
    # dataclass, e.g. a variant registered with register_policy_loss): key -> value, checked
    # against that dataclass's fields, types and checks when the config loads. flywheel's
    # variants read the keys below (ROLL's names) and refuse it.
    pg_variant_args: dict[str, Any] = field(default_factory=dict)
    # How token losses become one number: token-mean over the global batch, or per
    # sequence then mean (seq-mean-*); seq-mean-token-sum-norm is Dr. GRPO's.
    loss_agg_mode: LossAggMode = "seq-mean-token-mean"
    # tis: importance ratio truncated to [tis_lower_bound, tis_upper_bound].
    tis_lower_bound: float = 0.0
    tis_upper_bound: float = 1.0
    # topr: weights of the positive-score (topr_positive_weight) and non-positive-score
    # (topr_negative_weight) terms.
    topr_positive_weight: float = 1.0
    topr_negative_weight: float = 1.0
    # cispo: ratio clip bounds 1-cispo_epsilon_low .. 1+cispo_epsilon_high, and
    # (cispo_use_unified_mask) whether to drop tokens already outside the trust region in
    # the direction of the advantage.
    cispo_epsilon_low: float = 0.1
    cispo_epsilon_high: float = 0.1
    cispo_use_unified_mask: bool = False
    # kimi15: weight of the squared log-ratio penalty (tau/2)(logp - logp_old)^2.
    kimi15_tau: float = 0.1


@dataclass
class ActorInferConfig(WorkerConfig):
    """actor_infer generates; its backend defaults to hf_infer even when the block is
    written without strategy_args (a default_factory on the PipelineConfig field would only
    apply when the whole block is left out)."""

    # Backend by name and its settings; hf_infer unless named.
    strategy_args: StrategyArgs = field(default_factory=lambda: StrategyArgs("hf_infer"))


@dataclass
class CodeSandboxArgs:
    """code_sandbox: how a response's program is run against the record's tests. Every
    test case runs in its own bubblewrap sandbox (no network, read-only system, private
    tmpfs, PID namespace, an unprivileged user); these are its limits."""

    # Score: "fraction" of test cases passed, or "all_or_nothing" (1 only if all pass).
    scoring: Literal["fraction", "all_or_nothing"] = "fraction"
    # Wall-clock seconds per test case; the sandbox's whole process tree is killed after.
    test_timeout_s: float = 5.0
    # CPU seconds per test case (RLIMIT_CPU); at most test_timeout_s is useful.
    cpu_seconds: int = 4
    # Address space per process in MiB (RLIMIT_AS); CPython needs about 30.
    memory_mb: int = 512
    # Processes and threads the sandbox user may have (RLIMIT_NPROC).
    max_processes: int = 32
    # Largest file a program may write, stdout and stderr included, in MiB (RLIMIT_FSIZE);
    # also the size of the private /tmp.
    max_file_mb: int = 8
    # Open file descriptors per process (RLIMIT_NOFILE).
    max_open_files: int = 64
    # Test cases run per sample, at most (the first N); 0: all.
    max_tests: int = 0


DEFAULT_JUDGE_TEMPLATE = (
    "Question:\n{prompt}\n\nReference answer:\n{reference}\n\nStudent answer:\n{response}"
    "\n\nIs the student answer correct? Reply with only yes or no.")


@dataclass
class LlmJudgeArgs:
    """llm_judge: a language model reads (prompt, response, reference) through a prompt
    template and answers; a parser turns its answer into a score in [0, 1]. The judge is
    a model this reward role loads itself (`backend: local`) or an OpenAI-compatible
    server (`backend: endpoint`). Its answer is untrusted text: one that does not parse
    scores 0 and counts in reward/judge_parse_failures."""

    # "local": generate greedily with this role's strategy_args backend (hf_infer or vllm)
    # on its device_mapping, with model_args.model_name_or_path (else the top-level
    # reward_pretrain). "endpoint": POST to an OpenAI-compatible {base_url}/chat/completions
    # (temperature 0); then model_args, strategy_args and device_mapping must stay unset.
    backend: Literal["local", "endpoint"] = "local"
    # endpoint: the server's API root, e.g. "http://127.0.0.1:8000/v1" (http or https).
    base_url: str | None = None
    # endpoint: the model name sent in each request.
    model: str | None = None
    # endpoint: NAME of the environment variable that holds the API key (sent as
    # "Authorization: Bearer ..."), never the key itself; unset: no key is sent. A named
    # variable that is not set when the reward starts is an error.
    api_key_env: str | None = None
    # endpoint (an error on a local judge): seconds to wait for one reply. A server that
    # cannot be reached, or answers with an HTTP error or not in time, stops the run with an
    # error naming base_url (a down judge must not score every sample 0); keep it below
    # sample_timeout_s.
    request_timeout_s: float = 20.0
    # The judge's prompt (one user message; the local judge applies its tokenizer's chat
    # template when it has one). Placeholders: {prompt}, {response}, {reference}; {response}
    # is required, "{{" and "}}" are literal braces; any other placeholder, attribute,
    # index, conversion or format spec is an error. Values are inserted as is, never
    # formatted again.
    prompt_template: str = DEFAULT_JUDGE_TEMPLATE
    # System message sent before the prompt; unset: none (the local model's chat template
    # may add its own default).
    system_prompt: str | None = None
    # How the judge's answer becomes a score. "yes_no": the first whole word "yes" (1) or
    # "no" (0), any case. "number": the last number in the answer (in "7/10" or "7 out of 10",
    # the 7), which must lie in [score_min, score_max]; score = (x - score_min) /
    # (score_max - score_min). Anything else is a parse failure: score 0.
    score_parser: Literal["number", "yes_no"] = "yes_no"
    # number: the range the template asks the judge to answer in (score_min < score_max);
    # written with yes_no, an error.
    score_min: float = 0.0
    score_max: float = 10.0
    # Most tokens the judge writes per answer (greedy decoding).
    max_new_tokens: int = 32


@dataclass
class RewardConfig(WorkerConfig):
    # Reward by name: "math_rule" compares the final answer (math-verify where it parses);
    # "code_sandbox" runs the response's last fenced code block against the record's
    # stdin/stdout tests in a bubblewrap sandbox (code_sandbox below); "llm_judge" asks a
    # language model for a verdict (llm_judge below); "ifeval" checks the instruction
    # constraint the reference names (ROLL's GeneralRuleRewardWorker); "multiple_choice"
    # compares the answer's choice letter with the reference's (ROLL's
    # CrossThinkQARuleRewardWorker), both with reward_args; "detection" scores the IoU of
    # the reply's boxes against the reference's (ROLL's DetectionRewardWorker, reward_args
    # format_ratio / min_iou); "python" calls a function of the
    # user's own (reward_import_path below); or a reward registered with
    # register_reward (flywheel/workers/rewards/registry.py holds the catalog).
    reward_type: str = "math_rule"
    # reward_type python: the function, "package.module:function". Its module must be
    # importable (working directory or PYTHONPATH) and lie under a prefix of the top-level
    # import_allowlist; it is imported with importlib in the scoring process, never
    # evaluated. Accepted forms (told by parameter names): fn(prompt, response, reference,
    # record), verl's compute_score(data_source, solution_str, ground_truth, extra_info),
    # TRL's batched fn(prompts, completions, **columns) (workers/rewards/user_function.py).
    # Required with reward_type python, refused with any other.
    reward_import_path: str | None = None
    # Settings of a reward that declares its own (a RewardSpec naming a settings dataclass,
    # e.g. a reward registered with register_reward): key -> value, checked against that
    # dataclass when the config loads. ifeval, multiple_choice and detection declare theirs
    # (repetition penalty; multiple_choice's scoring; detection's format_ratio and min_iou);
    # code_sandbox / llm_judge take theirs
    # from the blocks below and refuse it.
    reward_args: dict[str, Any] = field(default_factory=dict)
    # Record tags this reward scores; empty means every record.
    tag_included: list[str] = field(default_factory=list)
    # Multiplier of this reward's score under the top-level reward_aggregation:
    # weighted_sum (a record's score is the sum of weight * score over the rewards that
    # take its tag). first_match uses the one reward's score as is: only 1.0 is accepted.
    weight: float = 1.0
    # Number of reward workers (ROLL key); device_mapping may stay unset for rule rewards.
    world_size: int = 1
    # Hard limit in seconds on scoring one sample, enforced from outside: the reward runs
    # in a child process that is killed at the limit (even inside C code), and the sample
    # scores 0 with `timed_out` counted (reward/timed_out). Covers all of a code sample's
    # test cases, so keep it above code_sandbox.test_timeout_s times the tests run.
    sample_timeout_s: float = 30.0
    # Child processes per reward worker scoring samples in parallel (each has the limit).
    scoring_processes: int = 1
    # A regex every response this reward scores must match (ROLL's key): Python re.match
    # with DOTALL and MULTILINE on the whole response; a response that does not match gets
    # -1 added to its score (ROLL's format reward; metadata format_ok,
    # reward/format_rate). On any reward_type; unset: no format check.
    # E.g. "^<think>.*?</think>.*?<answer>.*?</answer>$" (ROLL's default pattern).
    format_pattern: str | None = None
    # ROLL's response length reward, times this coefficient, added to the score of each
    # sample this reward scores (ROLL's key; CrossThinkQA's worker): with n the response's
    # tokens, -0.5 for n < 100, -0.5 * (400 - n) / 300 up to 400, 0 beyond: it pushes
    # answers towards 400 tokens or more. 0 (the default) turns it off; any reward_type.
    response_length_penalty_coef: float = 0.0
    # Limits of the code_sandbox reward (ignored by other reward types).
    code_sandbox: CodeSandboxArgs = field(default_factory=CodeSandboxArgs)
    # The judge of the llm_judge reward; written on another reward type, an error.
    llm_judge: LlmJudgeArgs = field(default_factory=LlmJudgeArgs)


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
class ToolConfig:
    """One tool of an env tag (ROLL's `tool_configs` entry; flywheel/tools)."""

    # A built-in tool: calculator (exact arithmetic), python (a program in the bubblewrap
    # sandbox), search (BM25 over a local document file); or the name of the user's tool
    # given by tool_import_path. The model calls it by this name.
    tool_id: str = ""
    # The tool's settings (python: timeout_s, cpu_seconds, memory_mb, max_processes,
    # max_file_mb, max_code_chars, max_output_chars; search: documents (a .jsonl with "text"
    # or one document per line), top_k, max_chars, max_query_chars; calculator: none). An
    # unknown key is an error naming the accepted ones; a user tool gets them as keywords.
    tool_args: dict[str, Any] = field(default_factory=dict)
    # A user's tool as "package.module:attr" (a class or function called with tool_args,
    # returning an object with name, description, parameters and run(arguments) -> str);
    # its module must lie under a prefix of import_allowlist, imported with importlib.
    tool_import_path: str | None = None
    # With tool_use.call_format: tags, the [start, end] tag pairs the model may write around
    # the tool's argument (its one required parameter: python's code, search's query), as
    # GEM's tools parse them (ROLL's python_code: <code>...</code> or a ```python block);
    # of the pairs in a reply, the one that closes first is the call. Unset: the tool's
    # name as a tag, <tool_id>...</tool_id>. Refused with call_format: json.
    call_tags: list[list[str]] = field(default_factory=list)


@dataclass
class ToolUseConfig:
    """Tools the model may call inside this tag's episodes (flywheel/tools/tool_env.py). A
    reply holding a call (`call_start` JSON `call_end`, Hermes/Qwen's <tool_call> format)
    is answered by the tool instead of the env, and spends one of max_steps' turns;
    malformed calls, unknown tools, tool errors and timeouts become the observation and
    count in env/tool_* metrics, never stopping the run. With chat_template: true the model
    sees the tools' descriptions (the template's `tools`, or the system message); with raw
    text turns it sees only what agent_system_template says (a character-level model
    cannot afford the descriptions' length)."""

    # The tools of this tag, each named by tool_id; at least one.
    tools: list[ToolConfig] = field(default_factory=list)
    # Calls run per episode (ROLL's wrapper_args.max_tool_uses); a further call is answered
    # "no tool uses left", unrun. >= 1.
    max_tool_uses: int = 5
    # Wall clock of one call in seconds, below the pool's step_timeout_s (which bounds the
    # whole step); a call past it is answered "timed out" and counted.
    tool_timeout_s: float = 30.0
    # A tool result longer than this many tokens is cut (with a note); 0: no limit.
    max_tool_output_tokens: int = 512
    # The tag that opens a call's JSON {"name": ..., "arguments": {...}} ...
    call_start: str = "<tool_call>"
    # ... and the tag that closes it; different from call_start.
    call_end: str = "</tool_call>"
    # How a call is written. json: call_start JSON call_end (above), the tools described
    # by the chat template or the system message. tags: GEM's format, which ROLL's tool
    # block (tool_wrapper) uses: each tool's own tags around its one argument
    # (ToolConfig.call_tags), the tools described after the first observation, as GEM's
    # ToolEnvWrapper appends them there.
    call_format: Literal["json", "tags"] = "json"
    # Reward added to the turn of every call that reached its tool (ran, with or without
    # an error; not a malformed, unknown or over-budget call): ROLL's
    # wrapper_args.tool_reward, paid by GEM's ToolEnvWrapper per call. Part of the
    # episode's return, like the env's rewards.
    tool_reward: float = 0.0
    # Added on top for a call that returned without error (ROLL's tool_success_reward).
    tool_success_reward: float = 0.0


@dataclass
class CustomEnvConfig:
    """One env tag (ROLL's `custom_envs.<tag>`): which env to build and how its episodes are
    shown to the model. The tag is the key; metrics are reported under it
    (`env/<tag>/success`). Keys of the same meaning keep ROLL's names."""

    # Registered env name: frozen_lake, sokoban, guess_number, multiply (flywheel.envs), or
    # the name a user env is registered under with env_import_path.
    env_type: str = "frozen_lake"
    # A user env as "package.module:ClassName" (a flywheel.envs.TextEnv subclass), registered
    # as env_type when the env workers start. Its module must lie under a prefix listed in
    # env_import_allowlist; it is imported with importlib, never evaluated.
    env_import_path: str | None = None
    # Turns per episode (ROLL's max_actions_per_traj); an episode still running after its
    # last turn is truncated, with success 0.
    max_steps: int = 10
    # Generation budget of one turn, in tokens: the only one in agentic runs
    # (actor_infer's max_new_tokens and response_length are RLVR's, refused here; ROLL's
    # min(max_tokens_per_step, max_new_tokens) is written here by `platform convert`).
    # Every turn's prompt is the whole history, so an episode's sequence grows by about
    # this much plus the env's text each turn.
    max_tokens_per_step: int = 128
    # Keyword arguments of the env (frozen_lake: size, p, is_slippery, action_pattern,
    # format_penalty, env_instruction); an unknown key is an error naming the accepted ones.
    env_config: dict[str, Any] = field(default_factory=dict)
    # Text before the first turn, verbatim (ROLL's agent_system_template); unset: the env
    # manager's default, which asks for <answer>ACTION</answer>.
    agent_system_template: str | None = None
    # Text before every turn, with {observation}, {turn_idx} (0-based) and {actions_left}
    # (ROLL's agent_template uses {state} for {observation}); unset: the env manager's default.
    agent_template: str | None = None
    # Render turns with the model's own chat template (flywheel/envs/chat_turns.py):
    # agent_system_template becomes the system message, agent_template the user messages'
    # content (write no role markup in them), tool results the template's tool messages.
    # Token-in/token-out: the trained ids are the engine's, turn after turn. Needs a model
    # whose tokenizer has a chat template (checked when the run starts). false: raw text.
    chat_template: bool = False
    # Tools the model may call in these episodes; unset: none.
    tool_use: ToolUseConfig | None = None


def default_custom_envs() -> dict[str, CustomEnvConfig]:
    """The tags a config can name without declaring them (ROLL's traj_envs.yaml set)."""
    return {
        "FrozenLake": CustomEnvConfig("frozen_lake", env_config={"is_slippery": False}),
        "SimpleSokoban": CustomEnvConfig("sokoban"),
        "GuessNumber": CustomEnvConfig("guess_number"),
    }


@dataclass
class EnvManagerArgs:
    """The env pool of training (`train_env_manager`) or validation (`val_env_manager`).

    Envs live in env worker Ray actors; each plays its groups' episodes turn by turn and asks
    actor_infer for every turn, so env stepping runs beside generation. A group is
    `group_size` envs reset with one seed: GRPO compares their episodes."""

    # At most this many envs per env worker (one Ray actor, one CPU process), as in ROLL:
    # a cap, not a divisor. Each worker holds the whole groups that fit (a group never
    # straddles two workers, so at least group_size); workers = ceil(num_env_groups /
    # groups per worker). 0: every env in one worker (ROLL's default).
    max_env_num_per_worker: int = 0
    # Groups in the pool, i.e. played at a time. Training: a step takes
    # rollout_batch_size / group_size groups (more than the pool: envs play several episodes).
    # Validation: val_batch_size / group_size groups on fixed seeds (0: the whole pool).
    num_env_groups: int = 128
    # Envs per group, all reset with the same seed. Validation decodes greedily: keep 1.
    group_size: int = 1
    # Tags (keys of custom_envs) the pool plays.
    tags: list[str] = field(default_factory=lambda: ["FrozenLake"])
    # Groups per tag, in the order of tags, summing to num_env_groups; empty: divided equally.
    num_groups_partition: list[int] = field(default_factory=list)
    # Reward of an unparseable action (<= 0), for envs whose env_config sets none.
    format_penalty: float | None = None
    # Wall-clock limit of one env reset or step, in seconds: a slower env ends its episode as
    # failed (reported with its env id; the episode's group is dropped and counted) and is
    # replaced, so a hung env never stalls the run.
    step_timeout_s: float = 60.0


@dataclass
class TimeoutsConfig:
    """How long a role may go without progress before the run stops, naming the role, the
    rank and what it was doing. Workers report progress while they work (a counter the
    driver polls: latency-sim backends tick while they wait, reward and env workers per
    item), so a long call that keeps making progress is never cut; a call whose backend
    reports nothing inside it is limited by the same number as a wall clock. A dead worker
    is reported at once, whatever these say."""

    # Starting a role's workers (model load, engine start), per worker; also each reward
    # scoring process's start (a local llm_judge loads its model there).
    startup_s: float = 1800.0
    # A call to a role without progress: train step, log-probs, weight sync, save / load.
    call_s: float = 600.0
    # A generation request (one chunk) without progress.
    generate_s: float = 600.0
    # A reward scoring request without progress. Each sample also has a hard limit of its
    # own (rewards.<name>.sample_timeout_s: the sample scores 0 and is counted).
    score_s: float = 600.0
    # Env reset / step: train_env_manager.step_timeout_s and val_env_manager.step_timeout_s
    # (per env pool; a slow env ends its episode as failed, the run goes on).


@dataclass
class RolloutMockConfig:
    """Record the training batches of a run, or train on those of a recorded one
    (pipelines/loop/rollout_mock.py; ROLL's rollout_mock)."""

    # dump: write every training step's generated, scored groups to
    # <dump_dir>/train/step_<step>.json. mock: take them from there instead of generating
    # and scoring (actor_infer still validates); the dump run's batch sizes, and at most
    # its max_steps.
    mode: Literal["dump", "mock"]
    dump_dir: str


@dataclass
class TrackingConfig:
    # Where metrics go besides the run directory's metrics.jsonl (always written: plots and
    # `platform runs` read it). mlflow: a local sqlite store (runs/mlruns.db) unless
    # mlflow_uri names another; tensorboard: event files in <output_dir>/tensorboard;
    # wandb: offline run files in <output_dir>/wandb (`wandb sync` uploads them later);
    # jsonl: metrics.jsonl alone. Every backend gets the same metric names. Unset: ROLL's
    # `track_with` when given, else [mlflow].
    backends: list[TrackerName] | None = None
    # false drops mlflow from the default backends (track_with, else [mlflow]): the switch
    # configs used before `backends`. Written beside tracking.backends it is refused (the
    # list alone says what runs).
    mlflow: bool = True
    # Any mlflow tracking URI (http://127.0.0.1:5000, sqlite:///path.db, file:/dir).
    mlflow_uri: str | None = None
    # mlflow experiment / wandb project; unset: exp_name.
    experiment_name: str | None = None
    # Every N train steps, and at the first and the last step, the texts of a few trained
    # samples (prompt, response, reward) go to sample_texts.jsonl in the run directory and
    # to the backends that show text (mlflow table, tensorboard text, wandb table).
    # 0 = never.
    sample_text_steps: int = 10
    # How many samples per logging of sample texts (the first of the step's batch).
    sample_text_count: int = 4


@dataclass
class RayConfig:
    # Join an existing cluster ("auto" or host:port); unset starts a local Ray.
    # `platform run --address` and then RAY_ADDRESS take precedence over it.
    address: str | None = None
    # CPUs for a local Ray; unset means all of this machine's.
    num_cpus: int | None = None
    # Object-store cap in MiB for a local Ray (Ray's default takes ~30% of RAM). Unset:
    # sized from the policy model, room for two weight syncs in flight (each sync puts one
    # copy of the weights there, and an async run may publish the next before the last is
    # loaded) plus 256 MiB, at least 512 (platform/ray_runtime.py).
    object_store_memory_mb: int | None = None


@dataclass
class PipelineConfig:
    """A whole run. ROLL's top-level keys, plus flywheel's `pipeline_type`."""

    # Which pipeline runs this file: rlvr (prompts scored by verifiers), agentic, or sft
    # (supervised fine-tuning, e.g. before RL: cross-entropy on response tokens only;
    # pipelines/sft/run.py). SFT reads pretrain, seed, max_steps, output_dir, exp_name,
    # tracking, logging_steps, save_steps / save_total_limit (checkpoints are HF folders
    # usable as an RL run's pretrain), eval_steps with validation.data_args (val/loss, and
    # val/accuracy: greedy exact match of the response) and val_batch_size, prompt_length /
    # response_length (longer records dropped or refused by data_args.overlong_prompts;
    # response tokens count the eos), and actor_train's model_args, training_args (one
    # step = one optimizer step on per_device_train_batch_size x
    # gradient_accumulation_steps records, drawn in a seeded shuffled order, epoch after
    # epoch), data_args (records: prompt/answer pairs, or chat messages whose last message
    # is the assistant's reply), infer_batch_size and num_threads. RL-only keys are refused.
    pipeline_type: Literal["rlvr", "agentic", "sft"] = "rlvr"
    # Experiment name: the runs/<exp_name>/ folder and the mlflow experiment.
    exp_name: str = "flywheel"
    # Seeds the prompt order, each generation request's sampling and the workers' random
    # state; the same seed and config (async_generation_ratio 0) give the same metrics.
    seed: int = 42
    # Where the run writes config, metrics.jsonl and checkpoints; unset means
    # runs/<exp_name>/<timestamp> (chosen when the run starts).
    output_dir: str | None = None
    # Accepted for ROLL configs; flywheel logs under output_dir.
    logging_dir: str | None = None
    # ROLL's tracker switch: one of tracking.backends' names (ROLL's "stdout" means jsonl:
    # the console line is always printed). Written beside tracking.backends, refused.
    track_with: Literal["mlflow", "tensorboard", "wandb", "jsonl", "stdout"] | None = None
    # ROLL's tracker options, read by the chosen backend: project / name / notes / tags
    # (wandb), log_dir (tensorboard, wandb). Keys a backend does not know are an error.
    tracker_kwargs: dict[str, Any] = field(default_factory=dict)
    # What to continue from: a checkpoint directory (.../checkpoint-<step>) or a run
    # directory (its newest complete checkpoint); `true` (or "latest"): output_dir's newest
    # complete checkpoint, or when output_dir is unset the newest run under
    # runs/<exp_name>/ that has one. The run continues in place (same run directory,
    # metrics.jsonl, samples.jsonl, mlflow run); a config that differs from the saved one
    # may change only what is safe (max_steps, logging, eval, checkpoints, tracking,
    # timeouts). null or `false` (ROLL's spelling): start fresh.
    resume_from_checkpoint: str | None = None
    # Train on recorded batches: see RolloutMockConfig (RLVR and agentic).
    rollout_mock: RolloutMockConfig | None = None

    # Policy model for every role that does not name its own.
    pretrain: str = "builtin://tiny-qwen2-arith"
    # Model for reward roles that load one; the built-in math_rule reward loads none.
    reward_pretrain: str | None = None

    # Prompts per training step (before num_return_sequences_in_group expansion).
    rollout_batch_size: int = 32
    val_batch_size: int = 0  # 0 = the whole validation set
    # Most prompt tokens (after templating) of an RLVR or SFT record (refused in agentic
    # configs, whose prompts are the env's turns); longer ones are dropped or
    # refused by data_args.overlong_prompts. With response_length it sizes vllm's
    # max_model_len when strategy_config leaves it unset.
    prompt_length: int = 256
    # Response budget in tokens: the default of actor_infer's and validation's
    # max_new_tokens (a different written max_new_tokens is an error). RLVR and SFT only:
    # agentic turns are budgeted by custom_envs.<tag>.max_tokens_per_step.
    response_length: int = 128
    # Most tokens of a whole sequence. Agentic: vllm's max_model_len when strategy_config
    # leaves it unset. RLVR: when written, prompt_length + response_length must fit in it.
    sequence_length: int | None = None

    # Training steps in the run (one step = one rollout batch trained and synced).
    max_steps: int = 100
    # Checkpoint every N steps (0 = only at the end).
    save_steps: int = 0
    # Keep only the newest N complete checkpoints (older ones are deleted after each save);
    # null or 0: keep every one.
    save_total_limit: int | None = None
    # Print the console progress line every N steps (metrics.jsonl and mlflow get every
    # step).
    logging_steps: int = 1
    # Validate every N steps and after the last (0 = never). RLVR and SFT validate on the
    # validation block: eval_steps > 0 without one, or one with eval_steps 0, is refused.
    eval_steps: int = 0

    # How many batches generation may run ahead of training; 0 is synchronous.
    # A batch trained at step t only holds samples started at policy version
    # >= t - ceil(ratio); older ones are dropped and counted.
    async_generation_ratio: float = 0.0
    # Sync trainer weights to actor_infer every N train steps.
    model_update_frequency: int = 1
    # Colocated (hybrid) mode: free device memory between phases when actor_train and
    # actor_infer share devices in a synchronous run (pipelines/loop/phase_switch.py): the
    # engine sleeps while training runs (vllm sleep mode, sglang memory release, hf_infer
    # model to CPU) and actor_train moves optimizer state and parameters to CPU while the
    # engine generates. auto: on exactly when the two roles share a device (and then
    # async_generation_ratio is 0, which sharing requires); true: the same, but refused
    # when they share none; false: never (both phases' memory stays resident). On CPU
    # nothing is freed; the switch still runs in order (each call says it is a no-op).
    # ROLL's `is_offload_states` maps here. Refused by SFT (one role, no phases).
    offload_between_phases: Literal["auto", True, False] = "auto"
    # Weight sync bucket size in MiB, >= 1: actor_train's rank 0 cuts the weights into
    # buckets of at most this size (a larger tensor travels alone), puts each into Ray's
    # object store as it is built, and actor_infer loads each in place as it reads it
    # (workers/weight_buckets.py). Bounds the extra memory a sync takes on either side
    # beyond the object store's copy; smaller buckets cost a little more overhead per sync.
    # Bit-identical weights whatever the size. Refused by SFT (no weight sync there).
    weight_sync_bucket_mb: int = 128
    # How weight syncs travel from actor_train's rank 0 to actor_infer (pipelines/roles/
    # handles.py). auto: a collective broadcast (NCCL) when both run on CUDA on devices of
    # their own and each sync is loaded at once (model_update_frequency 1), else shared
    # memory (/dev/shm) when all sit on one node with room, else Ray's object store.
    # collective: a broadcast group always (NCCL on CUDA, gloo on CPU), refused with a
    # model_update_frequency > 1 (a broadcast keeps no copy for a checkpoint) or devices the
    # two roles share; shared_memory: refused at start where it cannot be used;
    # object_store: always. Each carries the same weights bit for bit.
    weight_sync_carrier: Literal["auto", "collective", "shared_memory", "object_store"] = "auto"
    # Pin the driver's prefetch thread (it feeds actor_infer and hands finished groups to
    # the reward workers) to these CPU cores (Linux); unset: no pinning. On a CPU-only
    # machine, keep it on actor_infer's cores so that it does not take time from training.
    prefetch_cpu_affinity: list[int] | None = None
    # Pause in-flight generations at a weight sync and continue them on new weights
    # (RLVR, needs async_generation_ratio > 0). Each token then carries the version that
    # produced it; a sample's staleness is still counted from its first token's version.
    partial_rollout: bool = False
    # With partial_rollout: new tokens per generation request, in 1..max_new_tokens. An
    # unfinished response comes back after this many and continues as a new request, on
    # whatever weights are newest by then. Smaller picks up new weights sooner but re-reads
    # the prompt (a prefill) per segment. Unset: a quarter of actor_infer's max_new_tokens.
    # Not for vllm, which needs no segments (running requests continue on new weights).
    partial_rollout_segment_tokens: int | None = None
    # Drop groups whose responses all scored the same (no GRPO signal; DAPO's dynamic
    # sampling) as they are scored, and generate more prompts to refill the batch, at any
    # async_generation_ratio. Dropped groups are counted in rollout/dropped_filtered and in
    # samples.jsonl (fate "filtered"). See pipelines/loop/group_filter.py.
    drop_uniform_groups: bool = False
    # Dynamic sampling band, [lo, hi]: also drop groups whose mean score lies outside it
    # (e.g. [0.1, 0.9] keeps prompts solved sometimes). Unset: no band.
    group_filter_mean_range: list[float] | None = None
    # Also drop groups whose score standard deviation is at most this (0: off).
    group_filter_min_std: float = 0.0
    # Cap on the refilling: groups generated for one trained batch, in batches, at most
    # (verl's max_num_gen_batches). Past it the batch is filled with unfiltered groups,
    # counted in rollout/filter_cap_kept, so a run never loops forever. 0: no cap.
    max_num_gen_batches: int = 10

    # RLVR loss masks (ROLL's): a masked sample stays in the batch (its score still counts
    # in its group's GRPO mean and std) but carries no loss and no token of the loss's
    # counts, for the policy and the critic; nothing is refilled, unlike the group filter
    # above, which drops groups and generates others. Counted per step in
    # rollout/masked_truncated and rollout/masked_difficulty (samples).
    # max_len_mask: mask every response the length limit cut off (finish reason "length":
    # max_new_tokens, or sequence_length), whose score judges an unfinished answer (TRL's
    # mask_truncated_completions; DAPO's overlong filtering).
    max_len_mask: bool = False
    # Mask every sample of a group whose mean score is outside the open interval
    # (difficulty_low_threshold, difficulty_high_threshold): kept only when low < mean <
    # high, both bounds exclusive as in ROLL (the defaults 0 and 1 mask the groups that all
    # failed or all passed; ROLL's examples use 0.1 and 0.95). Needs
    # num_return_sequences_in_group > 1.
    difficulty_mask: bool = False
    # difficulty_low_threshold and difficulty_high_threshold: the bounds of difficulty_mask,
    # in score units, low < high.
    difficulty_low_threshold: float = 0.0
    difficulty_high_threshold: float = 1.0

    # Samples per prompt (GRPO group size).
    num_return_sequences_in_group: int = 1
    # ROLL key: send each prompt num_return_sequences_in_group times with n=1 instead of
    # once with n samples (infer_worker.py); same distribution, another request layout.
    is_num_return_sequences_expand: bool = False
    # Passes over each rollout batch (each pass = its mini-batches' optimizer steps).
    ppo_epochs: int = 1

    # Advantages: grpo (group mean/std), reinforce (REINFORCE/REINFORCE++ with the
    # normalisation below) or gae (needs a critic). Agentic with step_level_samples only
    # (algorithms/step_credit.py): step_reinforce (each turn's discounted return G_t,
    # normalised as reinforce's scores) and gigpo (GiGPO: the episode's normalised reward
    # plus G_t normalised among the group's turns that saw the same observation, weighted
    # by episode_reward_weight / step_reward_weight).
    adv_estimator: Literal["grpo", "reinforce", "gae", "step_reinforce", "gigpo"] = "grpo"
    # reinforce: subtract the batch or group mean score (norm_mean_type) and divide by the
    # batch or group std (norm_std_type), or skip either with none; batch/batch is
    # REINFORCE++, group/none Dr. GRPO. grpo always uses group/group: other values
    # under grpo are refused (use reinforce).
    norm_mean_type: NormType = "group"
    norm_std_type: NormType = "group"
    # Normalise advantages to zero mean and unit variance over the batch's response tokens.
    whiten_advantages: bool = False
    # Clip scores (reward_clip) / advantages (advantage_clip) to [-x, x]; unset disables.
    reward_clip: float | None = None
    advantage_clip: float | None = None
    # Discount factor (gae; agentic turn_level_returns).
    gamma: float = 1.0
    # GAE lambda (gae only).
    lambd: float = 1.0

    # PPO ratio clip (pg_variant ppo, and gspo on its sequence ratio); with
    # use_pg_clip_range the asymmetric low/high bounds apply.
    pg_clip: float = 0.2
    use_pg_clip_range: bool = False
    # Ratio clipped to [1 - pg_clip_low, 1 + pg_clip_high] when use_pg_clip_range is set
    # (DAPO's clip-higher).
    pg_clip_low: float = 0.2
    pg_clip_high: float = 0.28
    # Dual clip (Ye et al. 2020): for A < 0 the loss is capped at -dual_clip_c * A.
    dual_clip_loss: bool = False
    dual_clip_c: float = 3.0
    # Critic value clip (gae only); unset disables.
    value_clip: float | None = None

    # KL to the reference policy, either as a loss term (use_kl_loss) with weight
    # kl_loss_coef and estimator kl_loss_type (k1 log-ratio, k2 half squared, k3
    # Schulman's unbiased, abs) ...
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.0
    kl_loss_type: KlEstimator = "k3"
    # ... or as a token-level reward penalty (init_kl_coef > 0), fixed or adaptive.
    init_kl_coef: float = 0.0
    # Estimator of the reward-penalty KL (as kl_loss_type).
    kl_penalty: KlEstimator = "k1"
    # Set: the penalty coefficient adapts toward this KL (Ziegler et al. 2019) over
    # kl_horizon samples; unset: it stays init_kl_coef.
    target_kl: float | None = None
    kl_horizon: int = 10000
    # Entropy bonus: entropy_loss_coef * entropy is subtracted from the loss (0 disables).
    entropy_loss_coef: float = 0.0

    # Weight each token (or sequence) by pi_old / pi_behaviour, the proximal policy
    # (actor_train before the update) over the one that sampled it, as in decoupled PPO
    # (Hilton et al. 2022): it corrects for staleness (generation ahead of training) and
    # for train/infer kernel mismatch together. truncate caps the weight, mask zeroes what
    # is out of bounds. auto: token-truncate when generation runs ahead
    # (async_generation_ratio > 0 or partial_rollout), none in the synchronous pipeline;
    # `platform show-config` prints what auto became.
    infer_is_correction: Literal["auto", "none", "token-truncate", "seq-truncate",
                                 "token-mask", "seq-mask"] = "auto"
    # Bounds of that weight: truncate caps it at infer_is_upper_bound; mask zeroes tokens
    # (or sequences) whose weight is outside [infer_is_lower_bound, infer_is_upper_bound].
    infer_is_lower_bound: float = 0.5
    infer_is_upper_bound: float = 2.0
    # ROLL's train_infer_correction filter (algorithms/infer_filter.py): a token whose
    # train/infer disagreement, aggregated at this level, leaves a band below gets weight 0
    # in the loss, on top of infer_is_correction's weight (1 when that is none). token;
    # sequence (summed over the response); geometric (mean over the response); segment
    # (mean over each run of consecutive model tokens: a turn of a multi-turn episode).
    # none: no filter; any other level needs at least one band.
    infer_filter_level: Literal["none", "token", "sequence", "geometric", "segment"] = "none"
    # [low, high] on the ratio pi_old / pi_infer at infer_filter_level (exp of the summed
    # or mean log-ratio), e.g. [0.8, 1.2]; unset: no ratio band.
    infer_filter_ratio_band: list[float] | None = None
    # [low, high] on the probability difference pi_old - pi_infer at infer_filter_level
    # (summed or averaged like the log-ratio), e.g. [-0.1, 0.1]; unset: no difference band.
    infer_filter_diff_band: list[float] | None = None

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
    # Reward workers by name (RLVR); each scores the records its tag_included selects.
    rewards: dict[str, RewardConfig] = field(
        default_factory=lambda: {"math_rule": RewardConfig()}
    )
    # When several rewards take a record's tag (tag_included; an empty list takes every
    # tag): first_match scores it with the first of them in file order (one reward per
    # domain, as in ROLL; put a catch-all reward last); weighted_sum scores it with every
    # one of them and trains on the sum of weight * score (e.g. a correctness reward plus a
    # format reward). A record that no reward takes is refused when the data loads.
    reward_aggregation: Literal["first_match", "weighted_sum"] = "first_match"
    # Validation set and sampling (RLVR; agentic reads only its generating_args, and plays
    # val_env_manager's envs); unset: no validation. Needs eval_steps > 0.
    validation: ValidationConfig | None = None

    # ---- agentic (pipeline_type: agentic); rollout_batch_size counts trajectories ----
    # Env pools of training (train_env_manager) and validation (val_env_manager).
    train_env_manager: EnvManagerArgs = field(default_factory=EnvManagerArgs)
    val_env_manager: EnvManagerArgs = field(default_factory=EnvManagerArgs)
    # Env tags by name; train/val_env_manager.tags pick from them.
    custom_envs: dict[str, CustomEnvConfig] = field(default_factory=default_custom_envs)
    # Module prefixes that every import path a config names may import from: user envs
    # (custom_envs.*.env_import_path) and reward functions (rewards.*.reward_import_path).
    # "my_pkg" allows my_pkg.maze, not my_pkg_extra. Empty: nothing is imported by path.
    import_allowlist: list[str] = field(default_factory=list)
    # The former name of import_allowlist, still read; writing both with different values
    # is refused.
    env_import_allowlist: list[str] = field(default_factory=list)
    # Advantages: false gives every model token of an episode the GRPO advantage of its
    # score (sum of rewards). true gives the tokens of turn t the discounted return
    # G_t = sum_k gamma^k r_(t+k) (gamma above), normalised by the mean/std of the group's
    # episode returns G_0: later turns stop being credited for penalties already paid.
    turn_level_returns: bool = False
    # Samples: false trains one sequence per trajectory (all turns, loss on model tokens);
    # true trains one sample per turn whose prompt is the history before it (step-wise
    # credit; more, shorter rows; needs turn_level_returns for per-turn advantages).
    step_level_samples: bool = False
    # adv_estimator gigpo: A = episode_reward_weight * (episode part) + step_reward_weight
    # * (anchor-state part) (ROLL's names; GiGPO's omega is step_reward_weight).
    episode_reward_weight: float = 1.0
    step_reward_weight: float = 1.0
    # Fitting the rows of a step's batch to whole optimizer steps of actor_train (a
    # multiple of per_device_train_batch_size x gradient_accumulation_steps x dp size), by
    # ROLL's batch_adjust_mode, after advantages are computed over every episode played:
    # copy (random rows repeated), delete (random rows dropped), auto (copy when the
    # remainder is at least half the batch, else delete), random_sample (exactly one
    # global batch of random rows). none: the trajectory view needs rollout_batch_size to
    # be a multiple of the global batch, and the step view pads loss-free rows to the
    # data-parallel size (its last optimizer step may be short).
    batch_adjust_mode: Literal["none", "copy", "delete", "auto", "random_sample"] = "none"

    # Where metrics go besides metrics.jsonl (mlflow).
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # Liveness limits: how long each kind of work may go without progress (see above).
    timeouts: TimeoutsConfig = field(default_factory=TimeoutsConfig)
    # Local Ray start or the cluster to join.
    ray: RayConfig = field(default_factory=RayConfig)
