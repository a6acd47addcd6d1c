"""Agentic runs: env tags, env pools, tools, and how episodes become training rows.

Part of the schema (`flywheel.config.schema` re-exports it as one `PipelineConfig`);
every field is documented once, here, beside its definition."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


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
    # A tool result (or error) longer than this many characters is cut where the tool ran,
    # before any tokenizer sees it (with a note; counted in env/tool_output_cut). >= 1.
    max_tool_output_chars: int = 20000
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
    # Generation budget of one turn, in tokens. A written actor_infer max_new_tokens caps
    # it (the smaller wins, as in ROLL: turn_budget.py); response_length is RLVR's,
    # refused here.
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
    # An observation longer than this many characters is cut before it is tokenized (with a
    # note; counted in env/observation_cut). >= 1.
    max_observation_chars: int = 20000


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
    # Env groups of this pool in a row that fail with env errors (dropped in training,
    # unsuccessful in validation) with no complete group between them before the run stops,
    # naming the env and its last error: an env that fails every episode never completes a
    # step. >= 1.
    max_consecutive_env_failures: int = 64


@dataclass
class AgenticKeys:
    """Agentic runs (pipeline_type: agentic): env pools, env tags and how episodes become rows."""

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
