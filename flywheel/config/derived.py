"""Values derived from a config's other values, resolved in one place.

The loaded config keeps what the user wrote (`auto` stays `auto` in config.yaml); code
that acts on such a key asks here, and `platform show-config` prints the result, so the
value a run uses is never a guess. The checks (`checks.py` and the `*_checks` modules) and
the code that runs a config (pipelines/, workers/) read the same functions: the roles a
config declares and their devices, data-parallel sizes, the context an engine must hold,
the parts of a judge's prompt template, and the `auto` keys.
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from dataclasses import dataclass

from flywheel.config.catalogs import RewardEntry
from flywheel.config.kinds import kind_of, scores_with_rewards
from flywheel.config.schema import ModelArgs, PipelineConfig, RewardConfig, WorkerConfig
from flywheel.platform.config.catalogs import Catalog
from flywheel.platform.config.errors import ConfigError

# The backends' registry is pure data (stdlib imports only): its capability flags are read
# here and by the acts-when rules, which are handed no catalogs.
from flywheel.workers.strategies.registry import BackendSpec, has_capability

# megatron_train splits each worker group into model-parallel groups of this many devices;
# data parallelism is what remains.
MEGATRON_PARALLEL_KEYS = (
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
)
JUDGE_FIELDS = ("prompt", "response", "reference")  # the placeholders of a judge's template


@dataclass(frozen=True)
class Role:
    key_path: str  # "actor_train", "rewards.math_rule"
    kind: str  # actor_train, actor_infer, reference (teachers too), critic or rewards
    #            (BackendEntry.roles)
    worker: WorkerConfig


def roles(cfg: PipelineConfig) -> Iterator[Role]:
    """Every role the config declares, with its key path."""
    yield Role("actor_train", "actor_train", cfg.actor_train)
    yield Role("actor_infer", "actor_infer", cfg.actor_infer)
    if cfg.reference is not None:
        yield Role("reference", "reference", cfg.reference)
    if cfg.critic is not None:
        yield Role("critic", "critic", cfg.critic)
    for name, reward in cfg.rewards.items():
        yield Role(f"rewards.{name}", "rewards", reward)
    # a teacher is, to its backend, what a reference is: a forward-only log-prob scorer
    # (one of the student's own weights is actor_train's forward, no role of its own)
    for name, teacher in cfg.teacher.items():
        if teacher.weights == "own":
            yield Role(f"teacher.{name}", "reference", teacher)


def started_roles(cfg: PipelineConfig) -> list[Role]:
    """The roles the run starts: the blocks its kind has (the schema holds every block, so
    an SFT config still carries a default actor_infer and rewards it never starts), and its
    rewards when they score its samples (kinds.scores_with_rewards)."""
    kind = kind_of(cfg)
    return [r for r in roles(cfg) if (scores_with_rewards(cfg) if r.kind == "rewards"
                                      else kind.has_role(r.key_path.split(".")[0]))]


def is_rule_reward(role: Role, rewards: Catalog[RewardEntry]) -> bool:
    """A rule reward loads no model, so its strategy and devices are unused."""
    return (isinstance(role.worker, RewardConfig) and role.worker.reward_type in rewards
            and rewards.get(role.worker.reward_type, "").kind == "rule")


def loads_model(reward: RewardConfig) -> bool:
    """A reward that loads a model (a local llm_judge, a reward_model) owns its
    device_mapping; the others (rules, an endpoint judge) own no device and go anywhere."""
    return reward.reward_type == "reward_model" or (
        reward.reward_type == "llm_judge" and reward.llm_judge.backend == "local")


def devices(worker: WorkerConfig) -> list[int]:
    """The role's device indices; unset means one worker on slot 0."""
    return worker.device_mapping if worker.device_mapping is not None else [0]


def model_parallel_size(worker: WorkerConfig, key_path: str = "") -> int:
    """Devices per model replica inside one worker group (megatron TP x PP x CP), else 1."""
    if not has_capability(worker.strategy_args.strategy_name, lambda s: s.model_parallel):
        return 1
    size = 1
    for key in MEGATRON_PARALLEL_KEYS:
        value = worker.strategy_args.strategy_config.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError("", f"{key_path}.strategy_args.strategy_config.{key}",
                              f"expected an int >= 1, got {value!r}")
        size *= value
    return size


def data_parallel_size(worker: WorkerConfig, key_path: str = "") -> int:
    """Model replicas: len(device_mapping) / num_gpus_per_worker / model-parallel size."""
    return len(devices(worker)) // worker.num_gpus_per_worker // model_parallel_size(
        worker, key_path)


def context_length(cfg: PipelineConfig) -> int | None:
    """Tokens a generation engine must hold per sequence: a kind sampling responses (RLVR)
    prompt_length + response_length; else sequence_length (agentic; None when unset: the
    engine's default)."""
    if kind_of(cfg).responses:
        return cfg.prompt_length + cfg.response_length
    return cfg.sequence_length


ENGINE_MEMORY_FRACTION = 0.9  # vLLM's own default gpu_memory_utilization
ENGINE_MEMORY_MARGIN = 0.05  # of the GPU, left free for the other process's allocations


def engine_memory_fraction(free_bytes: int, total_bytes: int) -> float:
    """vLLM's gpu_memory_utilization when the config leaves it unset: its default 0.9 on a
    GPU of its own; beside a colocated actor_train (whose weights are resident when the
    engine starts) what is free then, less a margin, since vLLM refuses to start when
    less than its fraction of the whole GPU is free. At least 0.05."""
    fraction = min(ENGINE_MEMORY_FRACTION, free_bytes / total_bytes - ENGINE_MEMORY_MARGIN)
    return round(max(0.05, fraction), 3)


def truncated_sampling(cfg: PipelineConfig, validation: bool = False) -> bool:
    """Whether actor_infer samples (training, or validation's sampling) from a top-k / top-p
    truncated distribution, whose log-probs need the whole vocabulary at once."""
    gen = cfg.validation.generating_args if validation and cfg.validation else (
        cfg.actor_infer.generating_args)
    return gen.do_sample and (gen.top_k > 0 or gen.top_p < 1.0)


def loss_norm_length(cfg: PipelineConfig) -> int | None:
    """Dr. GRPO's constant (`loss_agg_mode: seq-mean-token-sum-norm`, arXiv 2503.20783 §3.1:
    divide each sequence's token sum by the generation budget, not by its length): RLVR's
    response_length; agentic: sequence_length, the trajectory budget (the checks refuse the
    mode without it). None under the other modes, which do not read it."""
    if cfg.actor_train.loss_agg_mode != "seq-mean-token-sum-norm":
        return None
    return cfg.response_length if kind_of(cfg).responses else cfg.sequence_length


def template_parts(template: str) -> list[tuple[str, str | None]]:
    """(literal text, placeholder or None) pairs of a judge's `prompt_template`, or
    ValueError (one line) for anything but a bare {prompt} / {response} / {reference}: no
    attribute or index access, no conversion, no format spec, no positional field, and
    {response} present. The config check and the judge (workers/rewards/llm_judge.py) both
    read a template through this."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:  # a lone "{" or "}"
        raise ValueError(f"prompt_template is not a valid template ({e}; write {{{{ and }}}} "
                         f"for literal braces)") from None
    parts = []
    for literal, name, spec, conversion in parsed:
        if name is not None and (name not in JUDGE_FIELDS or spec or conversion):
            shown = name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec
                                                                        else "")
            raise ValueError(f"prompt_template has placeholder {{{shown}}}; only "
                             f"{', '.join('{' + f + '}' for f in JUDGE_FIELDS)} are allowed "
                             f"(write {{{{ and }}}} for literal braces)")
        parts.append((literal, name))
    if not any(name == "response" for _, name in parts):
        raise ValueError("prompt_template has no {response} placeholder: the judge would "
                         "never see the response")
    return parts


def infer_is_correction(cfg: PipelineConfig) -> str:
    """`auto`: token-truncate when generation runs ahead of training, else none."""
    if cfg.infer_is_correction != "auto":
        return cfg.infer_is_correction
    ahead = cfg.async_generation_ratio > 0 or cfg.partial_rollout
    return "token-truncate" if ahead else "none"


def shared_actor_devices(cfg: PipelineConfig) -> list[int]:
    """Devices both actor_train and actor_infer use (an unset device_mapping means [0])."""
    train, infer = (set(w.device_mapping if w.device_mapping is not None else [0])
                    for w in (cfg.actor_train, cfg.actor_infer))
    return sorted(train & infer)


def offloads_between_phases(cfg: PipelineConfig) -> bool:
    """`auto`/true: whether actor_train and actor_infer take turns on shared devices, each
    freeing its memory for the other (pipelines/loop/phase_switch.py); true with no shared
    device is refused by the checks, so both mean the same here."""
    if not kind_of(cfg).rl or cfg.offload_between_phases is False:  # SFT: no phases
        return False
    return bool(shared_actor_devices(cfg)) and cfg.async_generation_ratio == 0


def lora_on(model_args: ModelArgs) -> bool:
    """Whether a role trains a LoRA adapter: ROLL turns it on by naming its targets."""
    return model_args.lora_target is not None


def served_adapter(cfg: PipelineConfig) -> tuple[int, float] | None:
    """(rank, alpha) of the LoRA adapter actor_infer serves (`lora_sync: adapter`), else
    None: it receives merged weights."""
    from flywheel.config.lora_args import lora_alpha  # lora_args imports schema only

    args = cfg.actor_train.model_args
    if not lora_on(args) or args.lora_sync != "adapter":
        return None
    return args.lora_rank, lora_alpha(args)


def reference_from_actor(cfg: PipelineConfig) -> bool:
    """Whether the reference's log-probs come from actor_train's own model with its LoRA
    adapter disabled, so no reference worker is started: actor_train trains an adapter
    and the reference names the same base model (its own model_name_or_path unset or
    equal to actor_train's). The frozen base is exactly the reference policy, held once;
    a reference of another model still runs as a role of its own."""
    if cfg.reference is None or not lora_on(cfg.actor_train.model_args):
        return False
    actor = cfg.actor_train.model_args.model_name_or_path or cfg.pretrain
    return (cfg.reference.model_args.model_name_or_path or cfg.pretrain) == actor


def derived_values(cfg: PipelineConfig) -> dict[str, str]:
    """key -> value for every key set to be derived (shown by show-config)."""
    out = {}
    if cfg.infer_is_correction == "auto":
        out["infer_is_correction"] = infer_is_correction(cfg)
    if cfg.offload_between_phases == "auto" and kind_of(cfg).rl:
        out["offload_between_phases"] = str(offloads_between_phases(cfg)).lower()
    return out


# Images in prompts (issue 29): the backends whose requests and batches carry a prompt's
# image inputs declare `images` in their registry entry (workers/strategies/registry.py;
# workers/image_inputs.py: hf_infer's generate, vllm's multi_modal_data, hf_train's and
# deepspeed_train's forwards). sglang and megatron_train take text alone (their requests
# and forwards carry no image tensors), and so does a critic's value model.


def takes_image_inputs(spec: BackendSpec) -> bool:
    return spec.images


def takes_images(cfg: PipelineConfig) -> bool:
    """Whether an RLVR run's roles can take image prompts (module note above)."""
    roles = [cfg.actor_train] + ([cfg.reference] if cfg.reference is not None else [])
    # packed rows (workers/strategies/sequence_packing.py) carry no per-row image tensors
    return (kind_of(cfg).images and cfg.critic is None
            and not cfg.actor_train.training_args.sequence_packing
            and has_capability(cfg.actor_infer.strategy_args.strategy_name, takes_image_inputs)
            and all(has_capability(r.strategy_args.strategy_name, takes_image_inputs)
                    for r in roles))
