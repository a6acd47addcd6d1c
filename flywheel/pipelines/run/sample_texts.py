"""A few trained samples as text (prompt, response, reward), for the trackers.

Numbers say how a run goes; reading what the policy writes says why (a format it found,
answers cut short, a reward it games). Every `tracking.sample_text_steps` steps the first
`sample_text_count` samples trained at that step go to `Tracker.log_texts`. RLVR groups
carry their response texts already, and show their prompt as the rewards saw it
(prompt_data.reward_prompt: a string, also for a chat-message record); an agentic episode
is decoded from its token ids (first prompt, then every later turn and reply as one
response); an agent's episode shows its last call (prompt and reply).
"""

from __future__ import annotations

from dataclasses import dataclass

from flywheel.pipelines.agent.jobs import AgentGroup
from flywheel.pipelines.agentic.env_jobs import EpisodeGroup
from flywheel.pipelines.data.prompt_data import reward_prompt
from flywheel.pipelines.rlvr.generation import Group
from flywheel.platform.trackers import SampleText
from flywheel.platform.tracking import Tracker


@dataclass
class SampleTextLog:
    tracker: Tracker
    tokenizer: object

    def trained(self, groups: list, step: int) -> None:
        """Called with the groups trained at `step` (by the sample ledger)."""
        if not self.tracker.wants_texts(step):
            return
        samples: list[SampleText] = []
        for group in groups:
            samples += self.texts(group)
            if len(samples) >= self.tracker.sample_text_count:
                break
        self.tracker.log_texts(step, samples)

    def texts(self, group: Group | EpisodeGroup | AgentGroup) -> list[SampleText]:
        if isinstance(group, AgentGroup):
            return [SampleText(prompt=self.tokenizer.decode(e.rows[-1].prompt_ids),
                               response=self.tokenizer.decode(e.rows[-1].token_ids),
                               reward=float(e.reward)) for e in group.episodes if e.rows]
        if isinstance(group, EpisodeGroup):
            out = []
            for episode, score in zip(group.trajectories, group.scores):
                ids = episode.input_ids
                out.append(SampleText(
                    prompt=self.tokenizer.decode(ids[: episode.prompt_length]),
                    response=self.tokenizer.decode(ids[episode.prompt_length:]),
                    reward=float(score)))
            return out
        prompt = reward_prompt(self.tokenizer, group.prompt_ids)
        return [SampleText(prompt=prompt, response=text, reward=float(score))
                for text, score in zip(group.texts, group.scores)]
