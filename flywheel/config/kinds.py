"""The catalog of pipeline kinds: what each `pipeline_type` is, asked by every check.

A check never compares `pipeline_type` with a name ("not sft", "== rlvr"): it asks the
kind's entry (`kind_of(cfg).rl`, `.rewards`, `.prompts`, ...), so a new kind is classified
by what it declares, never by exclusion. The entry names the code that runs it by import
path ("package.module:attr"): reading the catalog imports nothing of pipelines/, Ray or
torch, and `platform run` (pipelines/run/launch.py) imports only the named function.

A new pipeline kind is one folder under `flywheel/pipelines/` (its rollout, or its own
loop) and one line in `KINDS` below, or a `register_kind` call in a user's module (the
same spec again is a no-op, another spec under a taken name an error). The docs' recipe:
docs_site/docs/extending/pipeline-kinds.md.

The ROLL converter (flywheel/interop/roll/) compares ROLL's own pipeline names; those are
ROLL's, not flywheel's kinds, and stay there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from flywheel.config.checks.offline_distill import DISTILL_KIND_KEYS
from flywheel.config.checks.pair_keys import DPO_KEYS, ONLINE_DPO_KEYS, REWARD_MODEL_KEYS
from flywheel.config.checks.sft import SFT_KEYS
from flywheel.platform.config.catalogs import Catalog, check_import_path, register_entry

# The roles a run may declare besides actor_train (each a top-level block of the schema).
# The optional role blocks (schema/roles.py, schema/distill.py); a kind has the RL ones
# unless it says otherwise, and a teacher only where it names it.
RL_ROLES = ("actor_infer", "reference", "critic")
ROLE_BLOCKS = (*RL_ROLES, "teacher")


@dataclass(frozen=True)
class PipelineKind:
    """One kind of pipeline: what it reads and trains, its roles, and the code that runs it.

    Exactly one of `rollout` (the step loop runs it: generator, staleness bound, validation
    pause, checkpoints) and `run` (a loop of its own, e.g. the shared update loop over
    fixed data) is set."""

    # RL on its own samples: the algorithm's keys (adv_estimator, KL, pg_variant, async
    # generation, weight sync, Ray, the roles' devices) act. SFT: false.
    rl: bool
    # What actor_infer samples, if anything: "responses" (prompts -> groups of
    # num_return_sequences_in_group responses, each budgeted by response_length; the
    # context is prompt_length + response_length), "episodes" (multi-turn episodes played
    # in custom_envs; sequence_length bounds one), "calls" (the calls a user's agent makes
    # to the OpenAI-compatible endpoint, agent:; sequence_length bounds one), or None (it
    # samples nothing).
    samples: Literal["responses", "episodes", "calls"] | None
    # Reads prompt records from actor_train.data_args / validation.data_args.
    prompts: bool
    # Scores its samples with the `rewards:` block (reward workers, reward user code); an
    # agent kind only where the config says so (agent.reward: rewards; scores_with_rewards).
    rewards: bool
    # How messages name it ("SFT does not read it"): its name in capitals by default.
    title: str = ""
    # The top-level keys it reads; None: every key of the schema. A key it does not read,
    # written, is refused ("SFT does not read it": acts_when/table.py).
    keys: frozenset[str] | None = None
    # Its rollout carries a prompt's images (derived.takes_images: on image backends).
    images: bool = False
    # Roles it may have besides actor_train (ROLE_BLOCKS; also a new role's block name).
    roles: tuple[str, ...] = RL_ROLES
    # Roles whose outputs its rollout or loss reads whatever the algorithm's terms say: a
    # `reference` listed here acts without a KL term (a distillation teacher's log-probs).
    reads_roles: tuple[str, ...] = ()
    # "module:function" of its own cross-field checks (ConfigError for a key it refuses),
    # run first by checks.check_config; None: it has none beyond the shared ones.
    config_check: str | None = None
    # Step-loop kinds: "module:function" loading what the rollout reads before Ray starts
    # (prepare(cfg, tokenizer)) and "module:function" starting the rollout once the roles
    # run (launch.StartRollout). Own-loop kinds: `run`, "module:function" with launch's
    # OwnLoop signature, runs the whole pipeline.
    prepare: str | None = None
    rollout: str | None = None
    run: str | None = None
    # Step-loop kinds: "module:function" building actor_train's objective from the config
    # (workers/strategies/train_loop.py `Objective`: loss and metrics per micro-batch; it
    # may read the batch's extras, workers/batch.py). PG_LOSS: the policy-gradient loss.
    loss: str | None = None
    # One line a reader of the docs sees (platform validate, the kinds table).
    doc: str = ""
    # An own-loop kind whose actor_train trains in the driver on a backend without a
    # process group (hf_train), and as Ray ranks on one whose ranks form one (registry
    # `process_group`: deepspeed_train; pipelines/sft/trainers.py): there `ray`, `timeouts`
    # and actor_train's devices act (acts_when/table.py ON_RAY).
    ranks_with_process_group: bool = False
    # Step-loop kinds whose groups train only when their samples' scores differ (online
    # DPO's best/worst pairs): the replay buffer's group filter drops tied groups as they
    # are scored, counted as filtered, whatever drop_uniform_groups says
    # (loop/group_filter.py).
    drops_tied_groups: bool = False
    # Step-loop kinds that train a fixed number of rows per group, not every sample (online
    # DPO: the group's chosen and rejected, 2); None: every sample,
    # num_return_sequences_in_group. The batch-size check counts these rows
    # (checks/config.py check_batch_sizes).
    rows_per_group: int | None = None

    def __post_init__(self) -> None:
        if (self.rollout is None) == (self.run is None):
            raise ValueError("a pipeline kind names exactly one of rollout (the step loop "
                             "runs it) and run (a loop of its own)")
        if self.rollout is not None and (self.prepare is None or self.loss is None):
            raise ValueError("a step-loop kind names prepare (what its rollout reads) and "
                             "loss (what actor_train minimises)")
        for path in (self.config_check, self.prepare, self.rollout, self.run, self.loss):
            if path is not None:
                check_import_path(path, "pipeline kind")

    @property
    def loop(self) -> Literal["step", "own"]:
        return "step" if self.rollout is not None else "own"

    @property
    def responses(self) -> bool:
        """It samples one response per prompt request, in groups (RLVR's shape)."""
        return self.samples == "responses"

    @property
    def envs(self) -> bool:
        """It plays episodes in custom_envs (agentic)."""
        return self.samples == "episodes"

    @property
    def agents(self) -> bool:
        """It runs the user's agent against the endpoint (the agent: block)."""
        return self.samples == "calls"

    def reads_key(self, key: str) -> bool:
        """Whether the top-level `key` acts in this kind (`keys`)."""
        return self.keys is None or key in self.keys

    def has_role(self, role: str) -> bool:
        return role == "actor_train" or role in self.roles

    def reads(self, role: str) -> bool:
        return role in self.reads_roles


# The policy-gradient objective (pg_variant, KL loss, entropy bonus) of RLVR and agentic.
PG_LOSS = "flywheel.pipelines.loop.actor_loss_config:build_actor_loss"

# pipeline_type -> its kind; a new kind is one folder under pipelines/ and one line here.
KINDS: dict[str, PipelineKind] = {
    "rlvr": PipelineKind(
        rl=True, samples="responses", prompts=True, rewards=True, images=True, title="RLVR",
        prepare="flywheel.pipelines.rlvr.rollout:load_prompt_sets",
        rollout="flywheel.pipelines.rlvr.rollout:start_rlvr", loss=PG_LOSS,
        roles=(*RL_ROLES, "teacher"), reads_roles=("teacher",),  # on-policy distillation
        doc="RL on prompts scored by verifiers (rewards:)"),
    "agentic": PipelineKind(
        rl=True, samples="episodes", prompts=False, rewards=False, title="agentic",
        prepare="flywheel.pipelines.agentic.rollout:no_data",
        rollout="flywheel.pipelines.agentic.rollout:start_agentic", loss=PG_LOSS,
        roles=(*RL_ROLES, "teacher"), reads_roles=("teacher",),  # OPD over episodes
        doc="RL on multi-turn episodes in environments (custom_envs:)"),
    "agent": PipelineKind(
        rl=True, samples="calls", prompts=False, rewards=True, title="agent",
        config_check="flywheel.config.checks.agent:check_agent",
        prepare="flywheel.pipelines.agent.rollout:load_tasks",
        rollout="flywheel.pipelines.agent.rollout:start_agent", loss=PG_LOSS,
        doc="RL on the user's own agent behind an OpenAI-compatible endpoint (agent:)"),
    "sft": PipelineKind(
        rl=False, samples=None, prompts=True, rewards=False, roles=(), title="SFT",
        keys=SFT_KEYS - {"ray"},  # in this process unless on ranks (ON_RAY)
        config_check="flywheel.config.checks.sft:check_sft",
        run="flywheel.pipelines.sft.run:run_sft", ranks_with_process_group=True,
        doc="supervised fine-tuning on fixed records (cross-entropy on response tokens)"),
    "evaluate": PipelineKind(
        rl=False, samples="responses", prompts=True, rewards=True, roles=("actor_infer",),
        title="evaluate", run="flywheel.pipelines.evaluate.run:run_evaluate",
        keys=frozenset({"pipeline_type", "exp_name", "seed", "output_dir", "logging_dir",
                        "track_with", "tracker_kwargs", "pretrain", "reward_pretrain",
                        "val_batch_size", "prompt_length", "response_length", "actor_train",
                        "actor_infer", "rewards", "reward_aggregation", "import_allowlist",
                        "env_import_allowlist", "tracking", "timeouts", "ray"}),
        doc="generate and score a dataset with a checkpoint, no training"),
    "dpo": PipelineKind(
        rl=False, samples=None, prompts=True, rewards=False, roles=("reference",),
        reads_roles=("reference",), title="DPO", keys=DPO_KEYS,
        config_check="flywheel.config.checks.preference:check_dpo",
        run="flywheel.pipelines.dpo.run:run_dpo", ranks_with_process_group=True,
        doc="offline preference learning on (chosen, rejected) pairs: DPO, IPO, SimPO"),
    "online_dpo": PipelineKind(
        rl=True, samples="responses", prompts=True, rewards=True, title="online DPO",
        keys=ONLINE_DPO_KEYS, roles=("actor_infer", "reference"), reads_roles=("reference",),
        drops_tied_groups=True, rows_per_group=2,
        config_check="flywheel.config.checks.preference:check_online_dpo",
        prepare="flywheel.pipelines.rlvr.rollout:load_prompt_sets",
        rollout="flywheel.pipelines.online_dpo.rollout:start_online_dpo",
        loss="flywheel.pipelines.online_dpo.rollout:pair_loss",
        doc="DPO on the policy's own samples: each group's best and worst by reward"),
    "reward_model": PipelineKind(
        rl=False, samples=None, prompts=True, rewards=False, roles=(),
        title="reward-model training", keys=REWARD_MODEL_KEYS,
        config_check="flywheel.config.checks.preference:check_reward_model_pairs",
        run="flywheel.pipelines.reward_model.run:run_reward_model",
        doc="a scalar-head reward model trained on pairs (Bradley-Terry)"),
    "distill": PipelineKind(
        rl=False, samples=None, prompts=True, rewards=False, roles=("teacher",),
        reads_roles=("teacher",), title="offline distillation", keys=DISTILL_KIND_KEYS,
        config_check="flywheel.config.checks.offline_distill:check_offline_distill",
        run="flywheel.pipelines.distill.offline_run:run_offline_distill",
        doc="a student trained on a teacher's top-k distributions over fixed records, "
            "mixed with SFT"),
}
KIND_CATALOG: Catalog[PipelineKind] = Catalog("pipeline_type", KINDS)


def register_kind(name: str, kind: PipelineKind) -> None:
    """Add a pipeline kind (a user's module calls this before the config loads)."""
    register_entry(KINDS, "pipeline_type", name, kind, PipelineKind)


def kind_of(cfg: Any) -> PipelineKind:
    """The entry of `cfg.pipeline_type`; a ConfigError at pipeline_type listing the known
    kinds when it names none."""
    return KIND_CATALOG.get(cfg.pipeline_type, "pipeline_type")


def scores_with_rewards(cfg: Any) -> bool:
    """Whether the `rewards:` block scores this run's samples (its reward workers start, its
    keys act): the kind's `rewards`, and for a kind that runs the user's agent, whose
    agent may give its reward itself, agent.reward: rewards (pipelines/agent/answers.py)."""
    kind = kind_of(cfg)
    return kind.rewards and (not kind.agents or cfg.agent.reward == "rewards")


def kind_title(cfg: Any) -> str:
    """How messages name the config's kind ("SFT", "RLVR")."""
    return kind_of(cfg).title or cfg.pipeline_type.upper()


def kind_named(name: object) -> PipelineKind | None:
    """The entry of a raw config value (before conversion: any type), or None."""
    return KINDS.get(name) if isinstance(name, str) else None


def kinds_where(question: Callable[[PipelineKind], bool]) -> list[str]:
    """The names of the kinds for which `question` holds, in catalog order."""
    return [name for name, kind in KINDS.items() if question(kind)]


def kinds_said(question: Callable[[PipelineKind], bool]) -> str:
    """'pipeline_type rlvr or sft': how an error names the kinds where a key acts."""
    names = kinds_where(question)
    if not names:
        return "no pipeline_type"
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    return f"pipeline_type {listed}"
