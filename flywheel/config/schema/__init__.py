"""The typed shape of a flywheel YAML file, one module per concern, re-exported here as one
`PipelineConfig` and its blocks (import them from `flywheel.config.schema`).

    run.py         what runs, where it writes, how long; tracking, timeouts, Ray, rollout mock
    data.py        the data blocks; batch size and lengths
    roles.py       the role blocks (actor_train, actor_infer, reference, critic, validation)
    rewards.py     the reward blocks (`rewards.<name>`), code sandbox, LLM judge
    distill.py     on-policy distillation: the teacher blocks, opd_mode, opd_gamma
    offline_distill.py  offline distillation: the divergence, top-k, its cache, SFT mix
    algorithm.py   sample filters and masks, advantages, clipping, KL, importance corrections
    asynchrony.py  generation ahead of training, partial rollouts, offloading, weight sync
    agentic.py     env tags, env pools, tools, episodes as training rows
    preference.py  DPO: the pairwise loss, the pair columns, bad pairs
    pipeline.py    PipelineConfig: every top-level key, from the key groups above, in order

The YAML stays flat (ROLL's shape): each module's `...Keys` dataclass holds its top-level
keys, and `PipelineConfig` is all of them. A new key goes beside the others of its concern.
The policy-loss knobs are the one concern declared elsewhere, beside the losses that read them
(algorithms/policy_loss/params.py: `PPOClipKnobs` top-level, `VariantKnobs` in actor_train).
"""

from flywheel.config.schema.agentic import (
    CustomEnvConfig,
    EnvManagerArgs,
    ToolConfig,
    ToolUseConfig,
    default_custom_envs,
)
from flywheel.config.schema.algorithm import KlEstimator, LossAggMode, NormType
from flywheel.config.schema.data import DataArgs, ReasoningGymArgs, ReasoningGymTask
from flywheel.config.schema.distill import TeacherConfig
from flywheel.config.schema.pipeline import PipelineConfig
from flywheel.config.schema.rewards import (
    DEFAULT_JUDGE_TEMPLATE,
    CodeSandboxArgs,
    LlmJudgeArgs,
    RewardConfig,
)
from flywheel.config.schema.roles import (
    ActorInferConfig,
    ActorTrainConfig,
    Dtype,
    GeneratingArgs,
    LoraSync,
    ModelArgs,
    StrategyArgs,
    TrainingArgs,
    ValidationConfig,
    ValidationGeneratingArgs,
    WorkerConfig,
)
from flywheel.config.schema.run import (
    RayConfig,
    RolloutMockConfig,
    TimeoutsConfig,
    TrackerName,
    TrackingConfig,
)

__all__ = [
    "ActorInferConfig",
    "ActorTrainConfig",
    "CodeSandboxArgs",
    "CustomEnvConfig",
    "DEFAULT_JUDGE_TEMPLATE",
    "DataArgs",
    "Dtype",
    "EnvManagerArgs",
    "GeneratingArgs",
    "KlEstimator",
    "LlmJudgeArgs",
    "LoraSync",
    "LossAggMode",
    "ModelArgs",
    "NormType",
    "PipelineConfig",
    "RayConfig",
    "ReasoningGymArgs",
    "ReasoningGymTask",
    "RewardConfig",
    "RolloutMockConfig",
    "StrategyArgs",
    "TeacherConfig",
    "TimeoutsConfig",
    "ToolConfig",
    "ToolUseConfig",
    "TrackerName",
    "TrackingConfig",
    "TrainingArgs",
    "ValidationConfig",
    "ValidationGeneratingArgs",
    "WorkerConfig",
    "default_custom_envs",
]
