"""Scoring an agent's final answer with `rewards:` (agent.reward: rewards, issue 47).

Under agent.reward: rewards an episode ends with an answer (episodes.py: the agent's
string, AgentResult(answer=...), or its last reply's content), and the rewards score it
by RLVR's own path (rlvr/generation.py `submit_texts` and `ScoringJob`: the same reward
workers, routing by tag, reward_aggregation and weights, the length penalty, the failure
metadata), as if the answer were a response to the conversation it closes:

- the record: the task (`task_record`): its `tag` routes it (rewards.*.tag_included), its
  `answer` is the reference (as text; "" when the task has none), and the whole task is
  the record a reward function gets (so a function may compute the reference itself);
- the prompt a reward reads: the ids of the call the answer closes (the episode's last
  call, its first choice) decoded as RLVR decodes a prompt (prompt_data.reward_prompt);
  its messages: that call's messages as the model's template saw them (tool_format.py);
- the response: the answer's text; its length for response_length_penalty_coef: the ids
  the model sampled in that last reply.

Each episode is scored as a group of one response (the episodes of a task close
different conversations, so each has a prompt of its own); the scores come back as the
episodes' rewards and their group's scores, their metadata as the group's reward_info, so
the reward/* metrics and the reward health check (rlvr/reward_health.py) read an agent
group as they read RLVR's. A task whose tag no reward takes is refused at load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flywheel.config.schema import PipelineConfig, RewardConfig
from flywheel.pipelines.agent.task_record import task_record
from flywheel.pipelines.data.prompt_data import reward_prompt
from flywheel.pipelines.rlvr.generation import Group, ScoringJob, submit_texts
from flywheel.pipelines.rlvr.reward_routing import check_routes
from flywheel.workers.strategies.base import Generation

if TYPE_CHECKING:
    import ray

    from flywheel.pipelines.agent.episodes import CallRow, EpisodeOutcome
    from flywheel.pipelines.agent.jobs import AgentGroup
    from flywheel.pipelines.roles.handles import RewardRole
    from flywheel.platform.cluster import Cluster


def check_task_routes(tasks: list[dict], cfg: PipelineConfig, key: str) -> None:
    """Every task's tag is taken by some reward; else a one-line DataError naming `key`."""
    check_routes([task_record(t, i) for i, t in enumerate(tasks)], cfg, "", key)


def last_reply(episode: EpisodeOutcome) -> CallRow:
    """The row of the call the answer closes: the last call's first choice."""
    return max((r for r in episode.rows if r.choice == 0), key=lambda r: r.call)


def answer_groups(groups: list[AgentGroup], tokenizer: Any
                  ) -> tuple[list[Group], list[str], list[list[dict]]]:
    """One RLVR group per episode (its answer as the one response text), with the prompt
    string and messages each reward gets, in episode order."""
    scored, prompts, messages = [], [], []
    for group in groups:
        record = group.record
        for episode in group.episodes:
            row = last_reply(episode)
            reply = Generation(0, list(row.token_ids), list(row.log_probs), "stop")
            answer = Group(group.seq, record, list(row.prompt_ids), [reply], row.version)
            answer.texts = [episode.answer or ""]
            scored.append(answer)
            prompts.append(reward_prompt(tokenizer, row.prompt_ids))
            messages.append(list(episode.answer_messages))
    return scored, prompts, messages


@dataclass
class AnswerScoring:
    """The rewards' scores of some agent groups' answers, in flight (loop/seams.py
    `Scoring`): RLVR's ScoringJob over one group per episode."""

    groups: list[AgentGroup]
    job: ScoringJob

    @property
    def parts(self) -> list[tuple[Cluster, int, ray.ObjectRef, list[int]]]:
        return self.job.parts

    @property
    def refs(self) -> list[ray.ObjectRef]:
        return self.job.refs

    def finish(self) -> list[AgentGroup]:
        """The groups, each episode's reward its answer's score."""
        answers = iter(self.job.finish())
        for group in self.groups:
            scored = [next(answers) for _ in group.episodes]
            for episode, answer in zip(group.episodes, scored):
                episode.reward = answer.scores[0]
            group.scores = [a.scores[0] for a in scored]
            group.reward_info = [a.reward_info[0] for a in scored]
        return self.groups


def score_answers(groups: list[AgentGroup], reward_clusters: dict[str, RewardRole],
                  reward_cfgs: dict[str, RewardConfig], tokenizer: Any,
                  aggregation: str = "first_match") -> AnswerScoring:
    """Send the groups' answers to the reward workers without waiting."""
    scored, prompts, messages = answer_groups(groups, tokenizer)
    return AnswerScoring(groups, submit_texts(scored, prompts, messages, reward_clusters,
                                              reward_cfgs, aggregation))
