"""Agents behind flywheel's OpenAI-compatible endpoint (pipeline_type: agent, issue 47).

Part of the schema (`flywheel.config.schema` re-exports it as one `PipelineConfig`);
every field is documented once, here, beside its definition."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class AgentConfig:
    """The user's agent, its tasks and its limits. An episode is one run of the agent
    against the endpoint; rollout_batch_size counts episodes (group_size per task)."""

    # The agent as "package.module:function", an async function
    # `agent(task: dict, client: openai.AsyncOpenAI) -> float | AgentResult` (under
    # agent.reward: rewards its answer: str | None | AgentResult); its module must lie
    # under a prefix of import_allowlist. Exactly one of import_path and command.
    import_path: str | None = None
    # The agent as a command (argv, no shell) run once per episode with OPENAI_BASE_URL,
    # OPENAI_API_KEY, OPENAI_MODEL and FLYWHEEL_TASK (the task as JSON) set; it prints
    # its reward (a number; under agent.reward: rewards its final answer) as the last
    # line of its stdout.
    command: list[str] = field(default_factory=list)
    # Who gives an episode its reward. agent: the agent returns it (a number, or
    # AgentResult(reward=...)). rewards: the `rewards:` block scores the agent's final
    # answer, as RLVR scores a response (the same reward workers, routed by the task's
    # `tag`, the task's `answer` as the reference, the task as the record); the agent
    # returns its answer (a string, or AgentResult(answer=...)) or None (the content of
    # its last reply), a command prints it as its last stdout line. One source per run:
    # an agent that returns a reward under rewards (or no reward under agent) fails its
    # episode as bad_reward, and `rewards:` written under agent is refused at load.
    reward: Literal["agent", "rewards"] = "agent"
    # Training tasks: a .jsonl file, one JSON object per line, handed to the agent as is.
    tasks: str = ""
    # Validation tasks (same format), played every eval_steps; empty: no validation.
    val_tasks: str = ""
    # Episodes per task: the GRPO group (rollout_batch_size must be a multiple). >= 2.
    group_size: int = 8
    # How tools reach the model: auto (the template's own when it renders tools, else
    # hermes), template, hermes (the tool list in the system message, calls as JSON in
    # <tool_call> tags, results in <tool_response> user messages: the format of the
    # SmolLM2 tool-call warm start), tags (tools/tagged_calls.py: <tool>argument</tool>).
    tool_format: Literal["auto", "template", "hermes", "tags"] = "auto"
    # A Jinja chat template file that replaces the model's own (a model without one, or
    # one whose template cannot render what the agent sends). Empty: the model's own.
    chat_template: str = ""
    # One episode's wall clock in seconds; past it the agent is cancelled (a command's
    # process group killed), counted in agent/timeouts, and its group dropped.
    wall_clock_s: float = 300.0
    # Calls one episode may make; the next is answered 429 and the group dropped
    # (agent/over_budget).
    max_calls: int = 16
    # New tokens one call may sample (a request's max_tokens is capped to it). >= 1.
    max_tokens_per_call: int = 256
    # New tokens one episode may sample over all its calls; past it: 429, as max_calls.
    max_episode_tokens: int = 4096
    # A request body over this many bytes is refused (413) before it is read whole.
    max_body_bytes: int = 4 << 20
    # Training rows: episode (a call that continues an earlier reply is appended to that
    # reply's row, its new prompt ids out of the loss: an episode without history
    # rewrites or n > 1 is one row) or call (one row per call choice, each repeating the
    # conversation so far). The same ids and per-token terms; under seq-mean-token-mean a
    # packed episode is one sequence (pipelines/agent/rows.py).
    rows: Literal["episode", "call"] = "episode"


@dataclass
class AgentKeys:
    """The agent kind's one top-level key."""

    # pipeline_type: agent's agent, tasks and limits (docs: pipelines/agent.md); acts only
    # with that kind.
    agent: AgentConfig = field(default_factory=AgentConfig)
