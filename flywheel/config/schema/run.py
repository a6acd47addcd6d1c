"""The run itself: what runs, where it writes, how long, and the infrastructure blocks (tracking,
timeouts, Ray, rollout mock).

Part of the schema (`flywheel.config.schema` re-exports it as one `PipelineConfig`);
every field is documented once, here, beside its definition."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from flywheel.platform.config.field_bounds import bounded

TrackerName = Literal["mlflow", "tensorboard", "wandb", "jsonl"]


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
class RunKeys:
    """What runs, where it writes, what it continues from."""

    # Which pipeline runs this file, a name in the pipeline-kinds catalog
    # (flywheel/config/kinds.py; an unknown name is refused, listing the known ones):
    # rlvr (prompts scored by verifiers), agentic (episodes in envs), or sft
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
    pipeline_type: str = "rlvr"
    # Experiment name: the runs/<exp_name>/ folder and the mlflow experiment.
    exp_name: str = "flywheel"
    # Seeds the prompt order, each generation request's sampling and the workers' random
    # state; the same seed and config (async_generation_ratio 0) give the same metrics.
    seed: int = bounded(42, 0, 2**32 - 1, why="numpy's and torch's seed range")
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


@dataclass
class StepKeys:
    """How long the run trains, and when it saves, logs and validates."""

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


@dataclass
class InfraKeys:
    """Where metrics go, liveness limits, and the Ray cluster."""

    # Where metrics go besides metrics.jsonl (mlflow).
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # Liveness limits: how long each kind of work may go without progress (see above).
    timeouts: TimeoutsConfig = field(default_factory=TimeoutsConfig)
    # Local Ray start or the cluster to join.
    ray: RayConfig = field(default_factory=RayConfig)
