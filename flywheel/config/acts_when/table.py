"""The "acts when" table: every key that acts only under a condition, and why.

One `ActsWhen` row per (key, condition): the key path, the variant, feature, role, backend or
pipeline type it needs, what it does there, and what to write instead. A key may have
several rows (pg_clip_high needs ppo, then use_pg_clip_range); the first row it breaks is
the one reported. `acts_when/check.py` applies the table (to written keys at load, to every key
when a config is saved or converted). Each row was read off the code that uses the key;
a key that gains a use elsewhere must lose (or widen) its row. Every issue that adds a key
read only in some configs adds its row here.

Policy-loss keys are listed per variant in `LOSS_VARIANT_KEYS` (variant -> the keys its
loss reads, flywheel/algorithms/policy_loss/<variant>.py), from which their rows are
derived: once the loss catalog (algorithms/policy_loss/registry.py `LossSpec`) declares
each variant's settings, that one mapping can be read from it. A variant registered from
outside (`register_policy_loss`) gets every PolicyLossParams field, so no loss key is
refused under it.
"""

from __future__ import annotations

from collections.abc import Callable

from flywheel.algorithms.estimators import EstimatorSpec, estimators_where
from flywheel.config.acts_when.distill_rows import DISTILL_ROWS
from flywheel.config.acts_when.rule import ActsWhen, Condition, field_names
from flywheel.config.catalogs import estimator_of
from flywheel.config.checks.sft import SFT_ACTOR_KEYS, sft_ranks_backend
from flywheel.config.derived import (
    infer_is_correction,
    loads_model,
    lora_on,
    reference_from_actor,
    takes_image_inputs,
    takes_images,
)
from flywheel.config.kinds import (
    KINDS,
    PipelineKind,
    kind_of,
    kind_title,
    kinds_said,
    kinds_where,
    scores_with_rewards,
)
from flywheel.config.schema import ActorTrainConfig, PipelineConfig
from flywheel.platform.config.errors import KeyPath
from flywheel.workers.strategies.registry import BackendSpec, backends_with, has_capability

# ---- policy-loss variants ------------------------------------------------------------------
# ppo's clip keys (policy_loss/ppo.py clipped_surrogate), read by ppo and gspo alike.
PPO_CLIP_KEYS = {
    "pg_clip": "ppo's symmetric ratio clip",
    "use_pg_clip_range": "ppo's switch to the asymmetric clip range",
    "pg_clip_low": "the lower bound of ppo's clip range",
    "pg_clip_high": "the upper bound of ppo's clip range, DAPO's clip-higher",
    "dual_clip_loss": "ppo's dual clip for negative advantages",
    "dual_clip_c": "ppo's dual-clip cap",
}
# pg_variant -> {key path: what it does}: the keys that variant's loss reads, and no other.
LOSS_VARIANT_KEYS: dict[str, dict[str, str]] = {
    "vanilla": {},
    "ppo": PPO_CLIP_KEYS,
    "gspo": PPO_CLIP_KEYS,  # ppo's clip on the sequence ratio (policy_loss/gspo.py)
    "tis": {
        "actor_train.tis_lower_bound": "the lower truncation of tis's importance weight",
        "actor_train.tis_upper_bound": "the upper truncation of tis's importance weight",
    },
    "topr": {
        "actor_train.topr_positive_weight": "topr's weight of positive-score samples",
        "actor_train.topr_negative_weight": "topr's weight of the other samples",
    },
    "topr_seq": {  # topr's weights, the trajectory ratio truncated (policy_loss/topr.py)
        "actor_train.topr_positive_weight": "topr's weight of positive-score samples",
        "actor_train.topr_negative_weight": "topr's weight of the other samples",
    },
    "cispo": {
        "actor_train.cispo_epsilon_low": "the lower bound of cispo's weight clip",
        "actor_train.cispo_epsilon_high": "the upper bound of cispo's weight clip",
        "actor_train.cispo_use_unified_mask": "cispo's trust-region mask",
    },
    "kimi15": {"actor_train.kimi15_tau": "kimi15's squared log-ratio penalty weight"},
    "kimi15_seq": {"actor_train.kimi15_tau": "kimi15's squared log-ratio penalty weight"},
}
# The same knob under another variant: key -> {variant in use: what to write there}.
COUNTERPARTS: dict[str, dict[str, str]] = {
    "pg_clip": {"cispo": "actor_train.cispo_epsilon_low / cispo_epsilon_high",
                "tis": "actor_train.tis_lower_bound / tis_upper_bound"},
    "pg_clip_low": {"cispo": "actor_train.cispo_epsilon_low"},
    "pg_clip_high": {"cispo": "actor_train.cispo_epsilon_high"},
    "actor_train.cispo_epsilon_low": {"ppo": "use_pg_clip_range: true with pg_clip_low"},
    "actor_train.cispo_epsilon_high": {"ppo": "use_pg_clip_range: true with pg_clip_high"},
}


def _variant_row(variants: tuple[str, ...], key: str, does: str) -> ActsWhen:
    """The row of a key read by the losses of `variants` (one or more) and no other."""
    names = " or ".join(variants)

    def instead(cfg: PipelineConfig) -> str:
        used = cfg.actor_train.pg_variant
        other = COUNTERPARTS.get(key, {}).get(used)
        if other:
            return f"with {used} write {other}"
        return f"pg_variant is {used}: remove it, or set actor_train.pg_variant: {names}"

    # a variant registered outside this table (register_policy_loss) may read any key
    needs = Condition(f"with pg_variant {names}",
                      lambda cfg, _: cfg.actor_train.pg_variant in (*variants, *_unlisted(cfg)))
    return ActsWhen(key, needs, does, instead)


def _readers(key: str) -> tuple[str, ...]:
    return tuple(v for v, keys in LOSS_VARIANT_KEYS.items() if key in keys)


def _unlisted(cfg: PipelineConfig) -> tuple[str, ...]:
    used = cfg.actor_train.pg_variant
    return () if used in LOSS_VARIANT_KEYS else (used,)


VARIANT_ROWS = [_variant_row(_readers(key), key, does)
                for key, does in {k: d for keys in LOSS_VARIANT_KEYS.values()
                                  for k, d in keys.items()}.items()]

# ---- conditions ----------------------------------------------------------------------------
# ppo's own switches (under a registered variant of unknown use, every key may act)
CLIP_RANGE = Condition("with use_pg_clip_range: true",
                       lambda cfg, _: cfg.use_pg_clip_range or bool(_unlisted(cfg)))
SYMMETRIC_CLIP = Condition("with use_pg_clip_range: false",
                           lambda cfg, _: not cfg.use_pg_clip_range or bool(_unlisted(cfg)))
DUAL_CLIP = Condition("with dual_clip_loss: true",
                      lambda cfg, _: cfg.dual_clip_loss or bool(_unlisted(cfg)))


# Conditions on the estimator: each asks its catalog entry (algorithms/estimators.py), and
# says the estimators where it holds as the catalog has them when this module is imported.
def estimator_condition(question: Callable[[EstimatorSpec], bool]) -> Condition:
    return Condition(f"with adv_estimator {_listed(estimators_where(question))}",
                     lambda cfg, _: question(estimator_of(cfg)))


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


GAE = estimator_condition(lambda spec: spec.rows == "token")  # a critic's token values
REINFORCE = estimator_condition(lambda spec: spec.normalisation == "configurable")
GIGPO = Condition("with adv_estimator gigpo", lambda cfg, _: cfg.adv_estimator == "gigpo")
# the estimators that credit whole samples: a per-turn one credits each turn itself
EPISODE_BASELINE = Condition("with adv_estimator grpo or reinforce",
                             lambda cfg, _: not estimator_of(cfg).per_turn)
KL_PENALTY = Condition("with init_kl_coef > 0", lambda cfg, _: cfg.init_kl_coef > 0)
ADAPTIVE_KL = Condition("with target_kl set", lambda cfg, _: cfg.target_kl is not None)
KL_LOSS = Condition("with use_kl_loss: true", lambda cfg, _: cfg.use_kl_loss)
KL_TERM = Condition("with use_kl_loss: true or init_kl_coef > 0",
                    lambda cfg, _: cfg.use_kl_loss or cfg.init_kl_coef > 0)


def _per_turn(cfg: PipelineConfig) -> bool:
    return kind_of(cfg).envs and (cfg.turn_level_returns or cfg.step_level_samples)


EPISODE_SCORE = Condition("without agentic turn_level_returns / step_level_samples, or "
                          "with adv_estimator step_reinforce / gigpo",
                          lambda cfg, _: not _per_turn(cfg) or estimator_of(cfg).per_turn)
DISCOUNTED = Condition("with adv_estimator gae, agentic turn_level_returns / "
                       "step_level_samples, or an agent's per-call step_reinforce",
                       lambda cfg, _: estimator_of(cfg).rows == "token" or _per_turn(cfg)
                       or (kind_of(cfg).agents and estimator_of(cfg).per_turn))
EVAL = Condition("with eval_steps > 0", lambda cfg, _: cfg.eval_steps > 0)
PARTIAL = Condition("with partial_rollout: true", lambda cfg, _: cfg.partial_rollout)
GROUP_FILTER = Condition(
    "with a group filter (drop_uniform_groups, group_filter_mean_range or "
    "group_filter_min_std)", lambda cfg, _: cfg.drop_uniform_groups
    or cfg.group_filter_mean_range is not None or cfg.group_filter_min_std > 0)
IS_WEIGHT = Condition("with an infer_is_correction other than none",
                      lambda cfg, _: infer_is_correction(cfg) != "none")
IS_MASK = Condition("with infer_is_correction token-mask or seq-mask",
                    lambda cfg, _: infer_is_correction(cfg) in ("token-mask", "seq-mask"))
INFER_FILTER = Condition("with an infer_filter_level other than none",
                        lambda cfg, _: cfg.infer_filter_level != "none")
DIFFICULTY_MASK = Condition("with difficulty_mask: true", lambda cfg, _: cfg.difficulty_mask)
GROUPS = Condition("with num_return_sequences_in_group > 1",
                   lambda cfg, _: cfg.num_return_sequences_in_group > 1)
# warmup_steps wins when written (workers/strategies/train_loop.py warmup_steps, as ROLL)
NO_WARMUP_STEPS = Condition("with warmup_steps: 0", lambda cfg, path: getattr(
    cfg, str(path[0])).training_args.warmup_steps == 0)
NO_BACKENDS = Condition("without tracking.backends",
                        lambda cfg, _: cfg.tracking.backends is None)


def _mlflow_tracks(cfg: PipelineConfig, _: KeyPath) -> bool:
    from flywheel.platform.tracking import backend_names  # the one rule for the list

    return "mlflow" in backend_names(cfg)


MLFLOW = Condition("when mlflow is a tracking backend", _mlflow_tracks)


def _names_user_code(cfg: PipelineConfig, _: KeyPath) -> bool:
    """A path the allowlist checks (checks/import_allowlist.py) is written where it is read:
    every import-path extension point counts (a user tool alone is configurable)."""
    kind = kind_of(cfg)
    return (scores_with_rewards(cfg) and any(r.reward_import_path
                                             for r in cfg.rewards.values())) or (
        kind.envs and any(e.env_import_path or (e.tool_use and any(
            t.tool_import_path for t in e.tool_use.tools)) for e in cfg.custom_envs.values())
    ) or (kind.agents and bool(cfg.agent.import_path))


USER_CODE = Condition("when the config names user code by import path "
                      "(rewards.*.reward_import_path, custom_envs.*.env_import_path, "
                      "custom_envs.*.tool_use.tools[*].tool_import_path, agent.import_path)",
                      _names_user_code)
PYTHON_REWARD = Condition("with reward_type python",
                          lambda cfg, path: cfg.rewards[str(path[1])].reward_type == "python")
# Conditions on the pipeline kind: each asks the kind's entry (config/kinds.py), and says
# the kinds where it holds as the catalog has them when this module is imported.


def kind_condition(question: Callable[[PipelineKind], bool]) -> Condition:
    return Condition(f"with {kinds_said(question)}", lambda cfg, _: question(kind_of(cfg)))


# scores its samples with rewards: (an agent kind only with agent.reward: rewards)
REWARDS = Condition(f"with {kinds_said(lambda kind: kind.rewards and not kind.agents)}, or "
                    f"{kinds_said(lambda kind: kind.rewards and kind.agents)} with "
                    "agent.reward: rewards", lambda cfg, _: scores_with_rewards(cfg))
RESPONSES = kind_condition(lambda kind: kind.responses)  # groups of sampled responses
RL_RESPONSES = kind_condition(lambda kind: kind.rl and kind.responses)  # trains on them
PROMPTS = kind_condition(lambda kind: kind.prompts)
AGENTIC = kind_condition(lambda kind: kind.envs)
AGENT = kind_condition(lambda kind: kind.agents)  # the user's agent behind the endpoint
RL = kind_condition(lambda kind: kind.rl)
def _on_ray(cfg: PipelineConfig, _: KeyPath) -> bool:
    """Its roles are Ray workers: the kind reads `ray`, or trains actor_train as Ray ranks
    on a process-group backend (kind `ranks_with_process_group`: SFT on deepspeed_train)."""
    kind = kind_of(cfg)
    return kind.reads_key("ray") or (kind.ranks_with_process_group and has_capability(
        cfg.actor_train.strategy_args.strategy_name, sft_ranks_backend))


ON_RAY = Condition(f"with {kinds_said(lambda kind: kind.reads_key('ray'))}, or "
                   f"{kinds_said(lambda kind: kind.ranks_with_process_group)} on "
                   f"{' or '.join(backends_with(sft_ranks_backend, kind='train'))}", _on_ray)


def _OR_RANKS(cfg: PipelineConfig) -> str:
    """', or train on deepspeed_train (Ray ranks)' where the kind trains on ranks too."""
    if not kind_of(cfg).ranks_with_process_group:
        return ""
    ranks = " or ".join(backends_with(sft_ranks_backend, kind="train"))
    return f", or train on {ranks} (Ray ranks)"


# The reference acts with a KL term, or under a kind that reads its log-probs itself
# (`reads_roles`, e.g. a distillation teacher's log-probs read by its loss).
def _reads_reference(kind: PipelineKind) -> bool:
    return kind.reads("reference")


REFERENCE_READ = Condition(
    KL_TERM.says + (f" or {kinds_said(_reads_reference)}"
                    if kinds_where(_reads_reference) else ""),
    lambda cfg, path: KL_TERM.holds(cfg, path) or kind_of(cfg).reads("reference"))
# Fixed records trained without sampling (SFT): ROLL SFT's query column and whole epochs
# (pipelines/sft/run.py) act there.
FIXED_RECORDS = kind_condition(lambda kind: kind.prompts and not kind.rl
                               and kind.samples is None)
NEVER_SAMPLES = Condition("on actor_infer and validation",
                          lambda cfg, _: False)
NEVER_TRAINS = Condition("on actor_train and critic",
                         lambda cfg, _: False)


def _backend(path: KeyPath, cfg: PipelineConfig) -> str:
    return getattr(cfg, str(path[0])).strategy_args.strategy_name


# Conditions on a role's backend ask its registry entry's capabilities
# (workers/strategies/registry.py), and say the backends that have them as the registry
# lists them when this module is imported.
def _on(question: Callable[[BackendSpec], bool]) -> Callable[[PipelineConfig, KeyPath], bool]:
    return lambda cfg, path: has_capability(_backend(path, cfg), question)


def _names(question: Callable[[BackendSpec], bool], last: str = "or",
           kind: str | None = None) -> str:
    names = backends_with(question, kind)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"


def _hf_model(spec: BackendSpec) -> bool:
    return spec.hf_model


def _hf_backward(spec: BackendSpec) -> bool:
    return spec.hf_model and spec.kind == "train"


def _router_loss(spec: BackendSpec) -> bool:
    return spec.router_loss and spec.kind == "train"


def _token_budget(spec: BackendSpec) -> bool:
    return spec.token_budget


def _lora(spec: BackendSpec) -> bool:
    return spec.lora


# transformers' AutoModelForCausalLM.from_pretrained (workers/strategies/hf_model.py
# load_causal_lm) reads these; vllm, sglang and megatron build their own models.
HF_MODEL = Condition(f"on {_names(_hf_model, 'and')}", _on(_hf_model))
HF_BACKWARD = Condition(f"on actor_train with {_names(_hf_backward)}", _on(_hf_backward))
# the token-budget cut of train_loop.micro_batches: megatron's pipeline schedule runs
# micro-batches of one shape (per_device_train_batch_size rows)
TOKEN_BUDGET = Condition(f"on {_names(_token_budget)}", _on(_token_budget))
ROUTER_LOSS = Condition(f"on actor_train with {_names(_router_loss)}", _on(_router_loss))
DYNAMIC_BATCHING = Condition("with training_args.dynamic_batching: true", lambda cfg, path: (
    getattr(cfg, str(path[0])).training_args.dynamic_batching))
SEQUENCE_PACKING = Condition("with training_args.sequence_packing: true", lambda cfg, path: (
    getattr(cfg, str(path[0])).training_args.sequence_packing))
NEVER_CRITIC_MODEL = Condition("on actor_train, actor_infer and reference",
                               lambda cfg, _: False)
NEVER_BACKWARD = Condition("on actor_train",
                           lambda cfg, _: False)


def _loads_model(cfg: PipelineConfig, path: KeyPath) -> bool:
    """derived.loads_model: only a local llm_judge and a reward_model own devices and
    threads; rule rewards and an endpoint judge run in a CPU process placed anywhere."""
    return loads_model(cfg.rewards[str(path[1])])


REWARD_MODEL = Condition("on a local llm_judge or a reward_model reward",
                         _loads_model)

# LoRA (schema.ModelArgs lora_*): trained by hf_train and deepspeed_train on actor_train in
# RL and SFT runs (workers/strategies/lora.py); megatron_train is issue 27's later slice
# (`platform convert` maps a ROLL megatron_train LoRA actor onto deepspeed_train:
# interop/roll/fit/lora.py).
LORA_KEYS = {"lora_target": "turns LoRA on and names its modules",
             "lora_rank": "the adapter's rank r", "lora_alpha": "the adapter's scale alpha",
             "lora_dropout": "dropout on the adapter's input",
             "additional_target": "modules trained in full beside the adapter",
             "adapter_name_or_path": "the adapter to start from",
             "lora_sync": "what a weight sync sends actor_infer: merged weights or the adapter"}
LORA = Condition("with actor_train.model_args.lora_target set",
                 lambda cfg, _: lora_on(cfg.actor_train.model_args))
LORA_BACKEND = Condition(f"on actor_train with {_names(_lora)}", _on(_lora))
NEVER_LORA = Condition("on actor_train", lambda cfg, _: False)


def _adapter_served(cfg: PipelineConfig) -> bool:
    def adapters(spec: BackendSpec) -> bool:
        return spec.adapter_sync

    train = cfg.actor_train
    return (has_capability(cfg.actor_infer.strategy_args.strategy_name, adapters)
            and has_capability(train.strategy_args.strategy_name, adapters)
            and train.model_args.additional_target is None)


ADAPTER_SYNC = Condition(
    "in RL runs (SFT syncs nothing); as adapter with actor_train on hf_train, actor_infer "
    "on vllm and no additional_target",
    lambda cfg, _: kind_of(cfg).rl and (
        cfg.actor_train.model_args.lora_sync == "merged" or _adapter_served(cfg)))
OWN_REFERENCE = Condition(
    "when the reference is a role of its own (not actor_train's LoRA base)",
    lambda cfg, _: not reference_from_actor(cfg))
# What a LoRA key on another role would have meant, and why it does nothing there.
LORA_ELSEWHERE = {
    "actor_infer": "actor_infer receives actor_train's weights with the adapter merged in",
    "reference": "the reference is the base model: with LoRA on actor_train it is "
                 "actor_train's model with the adapter disabled",
    "critic": "the critic trains its whole value model (LoRA critics are not built)",
    "rewards.*": "a judge model is never trained",
    "teacher.*": "a teacher is never trained",
}
# Keys of a reference that runs inside actor_train: its model, devices and backend are
# actor_train's.
_INSIDE_ACTOR = ("device_mapping", "num_gpus_per_worker", "strategy_args", "infer_batch_size",
                 "num_threads", "cpu_affinity", "model_args.dtype",
                 "model_args.attn_implementation")
LORA_ROWS = [
    *[ActsWhen(f"{role}.model_args.{key}", NEVER_LORA, does, f"{why}: remove it")
      for role, why in LORA_ELSEWHERE.items() for key, does in LORA_KEYS.items()],
    *[ActsWhen(f"actor_train.model_args.{key}", LORA, does, "write lora_target to turn "
               "LoRA on, or remove it")
      for key, does in LORA_KEYS.items() if key != "lora_target"],
    *[ActsWhen(f"actor_train.model_args.{key}", LORA_BACKEND, does,
               "megatron_train trains no LoRA adapter yet: use deepspeed_train (ZeRO "
               "shards it across the same devices) or hf_train, or remove it")
      for key, does in LORA_KEYS.items()],
    ActsWhen("actor_train.model_args.lora_sync", ADAPTER_SYNC,
             "adapter: vllm serves A and B as a LoRA adapter per weight version",
             "vllm alone serves an adapter (hf_infer and sglang take merged weights), "
             "hf_train alone sends one, and a fully trained module (additional_target) has "
             "no place in it: write lora_sync: merged (an SFT run syncs nothing: remove "
             "it)"),
    *[ActsWhen(f"reference.{key}", OWN_REFERENCE, "the reference role's own setting",
               "the reference is actor_train's model with its LoRA adapter disabled, "
               "computed on actor_train's workers (no reference worker): remove it")
      for key in _INSIDE_ACTOR],
]

# ---- rows ------------------------------------------------------------------------------------
_SCORES = "agentic per-turn advantages are normalised discounted returns"


def _turn_budget(cfg: PipelineConfig) -> str:
    """Where a turn or call budget goes instead of the RLVR lengths."""
    if kind_of(cfg).agents:
        return "an agent call's budget is agent.max_tokens_per_call: write it there"
    return "an agentic turn's budget is custom_envs.<tag>.max_tokens_per_step: write it there"


ALGORITHM_ROWS = [
    ActsWhen("pg_clip", SYMMETRIC_CLIP, "ppo's symmetric clip; the range replaces it",
             "remove it (pg_clip_low / pg_clip_high apply), or set use_pg_clip_range: false"),
    ActsWhen("pg_clip_low", CLIP_RANGE, "the lower bound of ppo's clip range",
             "set use_pg_clip_range: true, or write pg_clip"),
    ActsWhen("pg_clip_high", CLIP_RANGE, "the upper bound of ppo's clip range",
             "set use_pg_clip_range: true, or write pg_clip"),
    ActsWhen("dual_clip_c", DUAL_CLIP, "the dual clip's cap", "set dual_clip_loss: true, "
                                                              "or remove it"),
    ActsWhen("lambd", GAE, "GAE's lambda", "grpo and reinforce use no value estimates: "
                                           "remove it, or use adv_estimator: gae"),
    ActsWhen("value_clip", GAE, "the critic's value clip", "there is no critic without gae: "
                                                           "remove it"),
    ActsWhen("critic", GAE, "the value model GAE reads", "remove the critic block, or use "
                                                         "adv_estimator: gae", block=True),
    ActsWhen("gamma", DISCOUNTED, "the discount of returns", "remove it"),
    ActsWhen("kl_penalty", KL_PENALTY, "the estimator of the KL reward penalty",
             "remove it, or set init_kl_coef; the KL loss's is kl_loss_type"),
    ActsWhen("target_kl", KL_PENALTY, "the adaptive KL penalty's target",
             "remove it, or set init_kl_coef"),
    ActsWhen("kl_horizon", KL_PENALTY, "the adaptive KL penalty's horizon",
             "remove it, or set init_kl_coef"),
    ActsWhen("kl_horizon", ADAPTIVE_KL, "the adaptive KL penalty's horizon",
             "a fixed coefficient has no horizon: remove it, or set target_kl"),
    ActsWhen("kl_loss_coef", KL_LOSS, "the KL loss's weight", "set use_kl_loss: true, or "
                                                             "remove it"),
    ActsWhen("kl_loss_type", KL_LOSS, "the KL loss's estimator", "set use_kl_loss: true, or "
                                                                "remove it"),
    ActsWhen("reference", REFERENCE_READ, "the policy a KL term compares against; nothing else "
                                   "reads its log-probs", "remove the reference block, or "
                                                          "add a KL term", block=True),
    ActsWhen("adv_estimator", EPISODE_SCORE, "how scores become advantages", _SCORES),
    ActsWhen("reward_clip", EPISODE_SCORE, "the clip of scores", _SCORES),
    ActsWhen("norm_mean_type", EPISODE_SCORE, "reinforce's baseline", _SCORES),
    ActsWhen("norm_std_type", EPISODE_SCORE, "reinforce's scale", _SCORES),
    ActsWhen("norm_mean_type", REINFORCE, "reinforce's baseline", "grpo always centres on "
             "the group mean and gae uses none: remove it, or use adv_estimator: reinforce"),
    ActsWhen("norm_std_type", REINFORCE, "reinforce's scale", "grpo always divides by the "
             "group std and gae uses none: remove it, or use adv_estimator: reinforce"),
    ActsWhen("infer_is_upper_bound", IS_WEIGHT, "the bound of the behaviour correction",
             "remove it, or set infer_is_correction"),
    ActsWhen("infer_is_lower_bound", IS_MASK, "the lower bound of the masking correction "
                                              "(truncation caps only from above)",
             "remove it, or use a -mask infer_is_correction"),
    *[ActsWhen(key, INFER_FILTER, does, "remove it, or set infer_filter_level")
      for key, does in (("infer_filter_ratio_band", "the ratio band of the train/infer filter"),
                        ("infer_filter_diff_band", "the probability-difference band of the "
                                                   "train/infer filter"))],
]

FEATURE_ROWS = [
    ActsWhen("difficulty_mask", GROUPS, "masks groups by their mean score",
             "one sample per prompt has no group: remove it, or raise "
             "num_return_sequences_in_group"),
    *[ActsWhen(key, DIFFICULTY_MASK, "a bound of difficulty_mask",
               "set difficulty_mask: true, or remove it")
      for key in ("difficulty_low_threshold", "difficulty_high_threshold")],
    *[ActsWhen(f"{role}.training_args.warmup_ratio", NO_WARMUP_STEPS,
               "warmup as a fraction of the schedule", "warmup_steps is written and wins: "
               "remove one of the two") for role in ("actor_train", "critic")],
    ActsWhen("validation", EVAL, "the validation set and sampling",
             "it would never run: set eval_steps, or remove validation (on the command "
             "line: validation=null)", block=True),
    ActsWhen("partial_rollout_segment_tokens", PARTIAL, "the segment of a partial rollout",
             "remove it, or set partial_rollout: true"),
    ActsWhen("max_num_gen_batches", GROUP_FILTER, "the cap on refilling filtered groups",
             "remove it"),
    ActsWhen("tracking.mlflow", NO_BACKENDS, "the switch that drops mlflow from the default "
                                             "backends",
             lambda cfg: "tracking.backends lists mlflow: remove one of the two" if (
                 "mlflow" in cfg.tracking.backends and not cfg.tracking.mlflow) else
             "tracking.backends alone says which backends run: remove it"),
    ActsWhen("track_with", NO_BACKENDS, "ROLL's tracker switch", "tracking.backends wins: "
                                                                 "remove one of the two"),
    ActsWhen("tracking.mlflow_uri", MLFLOW, "where mlflow logs", "remove it, or add mlflow "
                                                                 "to tracking.backends"),
    *[ActsWhen(key, USER_CODE, "the module prefixes import paths may name",
               "nothing is imported by path: remove it") for key in ("import_allowlist",
                                                                     "env_import_allowlist")],
    ActsWhen("rewards.*.reward_import_path", PYTHON_REWARD, "the reward function to call",
             "remove it, or set reward_type: python"),
]

ROLE_ROWS = [
    *[ActsWhen(f"{role}.generating_args", NEVER_SAMPLES, "sampling settings",
               "log-probs use actor_infer's temperature, top_k and top_p: remove it")
      for role in ("actor_train", "reference", "critic")],
    *[ActsWhen(f"{role}.training_args", NEVER_TRAINS, "the optimizer and batch sizes",
               "this role never trains: remove it") for role in ("actor_infer", "reference")],
    *[ActsWhen(f"rewards.*.{key}", REWARD_MODEL, does, "this reward runs in a CPU process "
               "of its own wherever Ray places it: remove it")
      for key, does in (("device_mapping", "the devices of its model"),
                        ("num_threads", "the torch threads of its model"))],
    *[ActsWhen(f"{role}.model_args.attn_implementation", HF_MODEL, "the attention kernel "
               "of transformers' model", "this backend builds its own model: remove it")
      for role in ("actor_train", "actor_infer", "reference")],
    ActsWhen("critic.model_args.attn_implementation", NEVER_CRITIC_MODEL,
             "the attention kernel of transformers' model", "the critic's value model loads "
             "with transformers' default: remove it"),
    ActsWhen("actor_train.model_args.disable_gradient_checkpointing", HF_BACKWARD,
             "gradient checkpointing of transformers' model",
             "this backend has its own (megatron: strategy_config.recompute_granularity): "
             "remove it"),
    *[ActsWhen(f"{role}.training_args.{key}", TOKEN_BUDGET, "micro-batches cut by a token "
               "budget", "megatron_train cuts micro-batches of per_device_train_batch_size "
               "rows: remove it") for role in ("actor_train", "critic")
      for key in ("dynamic_batching", "max_tokens_per_micro_batch")],
    *[ActsWhen(f"{role}.training_args.max_tokens_per_micro_batch", DYNAMIC_BATCHING,
               "the token budget of a micro-batch", "set dynamic_batching: true, or remove it")
      for role in ("actor_train", "critic")],
    *[ActsWhen(f"{role}.training_args.{key}", TOKEN_BUDGET, "rows packed end to end",
               "megatron_train runs padded micro-batches of one shape: remove it")
      for role in ("actor_train", "critic")
      for key in ("sequence_packing", "max_packed_sequence_length", "shared_prefix_packing")],
    *[ActsWhen(f"{role}.training_args.{key}", SEQUENCE_PACKING, does,
               "set sequence_packing: true, or remove it")
      for role in ("actor_train", "critic")
      for key, does in (("max_packed_sequence_length", "the width of a packed row"),
                        ("shared_prefix_packing", "one copy of a shared prompt per pack"))],
    *[ActsWhen(f"{role}.model_args.disable_gradient_checkpointing", NEVER_BACKWARD,
               "gradient checkpointing", "this role's model never runs it: remove it")
      for role in ("actor_infer", "reference", "critic")],
    ActsWhen("actor_train.model_args.moe_aux_loss_coef", ROUTER_LOSS,
             "the MoE router's load-balancing loss (workers/strategies/router_loss.py; "
             "megatron-core's router on megatron_train)",
             "this backend adds no router loss: use hf_train, deepspeed_train or "
             "megatron_train"),
    *[ActsWhen(f"{role}.model_args.moe_aux_loss_coef", NEVER_BACKWARD,
               "the MoE router's load-balancing loss", "this role's router is not trained "
               "by it: remove it") for role in ("actor_infer", "reference", "critic")],
]

IMAGES = Condition(f"with {kinds_said(lambda kind: kind.images)}, actor_train (and "
                   f"reference) on hf_train "
                   f"without sequence_packing, actor_infer on "
                   f"{_names(takes_image_inputs, kind='infer')} and no critic",
                   lambda cfg, _: takes_images(cfg))
_NO_IMAGES = ("images reach only those backends' models (sglang, megatron_train, "
              "deepspeed_train, packed rows and a critic's value model take text alone "
              "here): switch backends, or remove it")
IMAGE_ROWS = [
    ActsWhen(f"{block}.data_args.{key}", IMAGES, does, _NO_IMAGES)
    for block in ("actor_train", "validation")
    for key, does in (("image_key", "the column of a record's images"),
                      ("image_folder", "the folder image paths are read from"),
                      ("image_max_pixels", "the largest image, in pixels"),
                      ("image_min_pixels", "the smallest image, in pixels"),
                      ("bad_images", "what a record with a bad image does"))]

FREEZE = Condition("on actor_train with hf_train or deepspeed_train and no LoRA",
                   lambda cfg, path: str(path[0]) == "actor_train"
                   and has_capability(_backend(path, cfg), _lora)
                   and not lora_on(cfg.actor_train.model_args))
FREEZE_ROWS = [
    ActsWhen(f"{role}.model_args.freeze_module_prefix", FREEZE, "modules that do not train "
             "(workers/strategies/frozen_modules.py)", instead)
    for role, instead in (
        ("actor_train", "only a full fine-tune on hf_train or deepspeed_train freezes "
                        "modules (LoRA already trains the adapter alone): remove it, or "
                        "use one of them"),
        ("actor_infer", "this role never trains: remove it"),
        ("reference", "this role never trains: remove it"),
        ("critic", "the critic's value model trains whole here: remove it"))]

def _scored_otherwise(cfg: PipelineConfig) -> str:
    """What a rewards key written where no reward scores should become instead."""
    if kind_of(cfg).agents:
        return ("the agent returns its episodes' rewards (agent.reward: agent): remove it, "
                "or set agent.reward: rewards to score the agent's final answer with it")
    return "agentic episodes are scored by their envs: remove it"


PIPELINE_ROWS = [
    # item 7: agentic turns are budgeted per env tag, never by the RLVR lengths
    ActsWhen("actor_infer.generating_args.max_new_tokens", PROMPTS,
             "the response budget of a prompt", _turn_budget),
    ActsWhen("validation.generating_args.max_new_tokens", PROMPTS,
             "the response budget of a validation prompt", _turn_budget),
    ActsWhen("response_length", PROMPTS, "the response budget of a prompt", _turn_budget),
    ActsWhen("prompt_length", PROMPTS, "the longest prompt of a record",
             "agentic prompts are the env's turns: remove it (sequence_length bounds an "
             "episode)"),
    ActsWhen("actor_train.data_args", PROMPTS, "the training records",
             "agentic episodes come from custom_envs: remove it"),
    ActsWhen("validation.data_args", PROMPTS, "the validation records",
             "agentic validation plays val_env_manager's envs: remove it"),
    *[ActsWhen(f"{block}.data_args.reasoning_gym", RESPONSES, "prompts generated by "
               "reasoning-gym tasks", lambda cfg: f"{kind_title(cfg)} trains on data files "
               f"(file_name): remove it" if kind_of(cfg).prompts else "remove it")
      for block in ("actor_train", "validation")],
    *[ActsWhen(f"{role}.data_args.tag_to_template", RESPONSES, "the template of a record's tag",
               "SFT records carry no tag: remove it") for role in ("actor_train",
                                                                   "validation")],
    *[ActsWhen(key, REWARDS, does, _scored_otherwise)
      for key, does in (("rewards", "the reward workers"),
                        ("reward_pretrain", "the reward model"),
                        ("reward_aggregation", "how several rewards combine"))],
    *[ActsWhen(key, RESPONSES, does, instead) for key, does, instead in (
        ("num_return_sequences_in_group", "samples per prompt",
         "agentic groups are train_env_manager.group_size envs: remove it"),
        ("is_num_return_sequences_expand", "the request layout of a prompt's samples",
         "remove it"))],
    *[ActsWhen(key, RL_RESPONSES, does, instead) for key, does, instead in (
        ("partial_rollout", "partial rollout", "agentic turns are short requests that each "
                                               "run on the newest weights: remove it"),
        ("max_len_mask", "masks responses cut by the length limit", "an agentic episode is "
         "many turns, each budgeted by custom_envs.<tag>.max_tokens_per_step (ROLL's "
         "agentic max_len_mask masks nothing either): remove it"),
        *[(key, "masks groups by their mean score", "agentic groups are not masked by "
           "difficulty (group filtering by score is the RLVR group filter): remove it")
          for key in ("difficulty_mask", "difficulty_low_threshold",
                      "difficulty_high_threshold")])],
    *[ActsWhen(key, AGENTIC, does, "this is not an agentic config: set pipeline_type: "
               "agentic, or remove it")
      for key, does in (("train_env_manager", "the training env pool"),
                        ("val_env_manager", "the validation env pool"),
                        ("custom_envs", "the env tags"),
                        ("turn_level_returns", "per-turn returns"),
                        ("step_level_samples", "per-turn samples"),
                        ("batch_adjust_mode", "fitting a step's rows to whole optimizer "
                                              "steps"))],
    ActsWhen("agent", AGENT, "the user's agent, its tasks and limits", "this is not an agent "
             "config: set pipeline_type: agent, or remove it"),
    ActsWhen("turn_level_returns", EPISODE_BASELINE, "per-turn returns against the group's "
             "episode returns", "step_reinforce and gigpo always credit each turn with its "
             "discounted return: remove it"),
    *[ActsWhen(key, GIGPO, does, "remove it, or use adv_estimator: gigpo")
      for key, does in (("episode_reward_weight", "the weight of GiGPO's episode advantage"),
                        ("step_reward_weight", "the weight of GiGPO's anchor-state "
                                               "advantage"))],
    # issue 26: an env tag's chat rendering and tools act wherever its episodes are played
    # (envs/chat_turns.py, tools/tool_env.py); their own bounds are refused at load
    # (checks/tools.py), and every key of tool_use acts once tool_use is written.
    *[ActsWhen(f"custom_envs.*.{key}", AGENTIC, does, "this is not an agentic config: set "
               "pipeline_type: agentic, or remove it")
      for key, does in (("chat_template", "renders turns with the model's chat template"),
                        ("tool_use", "the tools the model may call in the tag's episodes"))],
    # SFT trains actor_train in the driver process: no Ray, no other role, one device (a
    # kind whose `keys` lack "ray" runs in this process), unless its kind trains on Ray
    # ranks with a process-group backend (`ranks_with_process_group`: deepspeed_train)
    ActsWhen("ray", ON_RAY, "the Ray cluster",
             lambda cfg: f"{kind_title(cfg)} runs in this process, without Ray: remove it"
                         f"{_OR_RANKS(cfg)}"),
    *[ActsWhen(key, ON_RAY, does, lambda cfg: f"{kind_title(cfg)} runs in this process: "
               f"remove it{_OR_RANKS(cfg)}")
      for key, does in (("timeouts", "how long a worker may start or stall"),
                        ("actor_train.cpu_affinity", "the cores actor_train's workers use"))],
    *[ActsWhen(f"{block}.data_args.query", FIXED_RECORDS, "ROLL SFT's query column, after "
               "the prompt", "the other pipelines read prompts from the prompt column alone: "
               "remove it") for block in ("actor_train", "validation")],
    ActsWhen("actor_train.training_args.num_train_epochs", FIXED_RECORDS, "whole passes over "
             "the records", "RL runs count train steps (max_steps): remove it"),
    ActsWhen("actor_train.device_mapping", ON_RAY, "the devices of actor_train's workers",
             lambda cfg: f"{kind_title(cfg)} trains on this process's one device (CUDA when "
                         f"present): remove it"),
    ActsWhen("actor_train.num_gpus_per_worker", ON_RAY, "devices per worker",
             lambda cfg: f"{kind_title(cfg)} trains on this process's one device: remove it"),
    *[ActsWhen(name, kind_condition(lambda kind, name=name: kind.reads_key(name)),
               "an RL setting", lambda cfg: f"{kind_title(cfg)} does not read it: remove it")
      for name in field_names(PipelineConfig) if name != "ray" and not all(
          kind.reads_key(name) for kind in KINDS.values())],
    *[ActsWhen(f"actor_train.{name}", RL, "an RL setting of the policy",
               lambda cfg: "SFT trains with cross-entropy on response tokens: remove it"
               if kind_of(cfg).samples is None else f"{kind_title(cfg)} trains nothing: "
                                                    f"remove it")
      for name in field_names(ActorTrainConfig) if name not in SFT_ACTOR_KEYS],
]

# Pipeline rows first: a key the pipeline never reads is reported as such.
ROWS: list[ActsWhen] = [*PIPELINE_ROWS, *VARIANT_ROWS, *ALGORITHM_ROWS, *FEATURE_ROWS,
                        *ROLE_ROWS, *LORA_ROWS, *IMAGE_ROWS,
                        *FREEZE_ROWS, *DISTILL_ROWS]
