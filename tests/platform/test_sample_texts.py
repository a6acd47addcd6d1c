"""Sample texts for the trackers, from RLVR groups and agentic episodes (no Ray)."""

from __future__ import annotations

import json

from flywheel.envs.trajectory import Trajectory
from flywheel.pipelines.agentic.env_jobs import EpisodeGroup
from flywheel.pipelines.data.prompt_data import PromptRecord
from flywheel.pipelines.rlvr.generation import Group
from flywheel.pipelines.run.sample_texts import SampleTextLog
from flywheel.platform.tracking import Tracker


class CharTokenizer:
    """Id = code point; id 0 is the one special token (a bos)."""

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == 0))


def tracker(tmp_path, every: int, count: int) -> Tracker:
    return Tracker(output_dir=tmp_path, total_steps=10, sample_text_steps=every,
                   sample_text_count=count)


def read(tmp_path) -> list[dict]:
    path = tmp_path / "sample_texts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_rlvr_groups_every_n_steps_first_samples_only(tmp_path):
    log = SampleTextLog(tracker(tmp_path, every=2, count=3), CharTokenizer())
    # the prompt shown is decoded from the ids (bos skipped), whatever the record holds
    groups = [Group(seq=i, record=PromptRecord(id=str(i), prompt=[
                        {"role": "user", "content": f"{i}+1="}], answer="", tag="math"),
                    prompt_ids=[0, *map(ord, f"{i}+1=")], responses=[], version=0,
                    scores=[1.0, 0.0],
                    texts=[f"{i + 1}", "9"]) for i in range(3)]
    log.trained(groups, step=3)  # not a logging step (nor the first or last)
    assert read(tmp_path) == []
    log.trained(groups, step=2)
    assert read(tmp_path) == [
        {"step": 2, "prompt": "0+1=", "response": "1", "reward": 1.0},
        {"step": 2, "prompt": "0+1=", "response": "9", "reward": 0.0},
        {"step": 2, "prompt": "1+1=", "response": "2", "reward": 1.0}]


def test_agentic_episode_decoded_first_prompt_then_the_rest(tmp_path):
    log = SampleTextLog(tracker(tmp_path, every=1, count=4), CharTokenizer())
    episode = Trajectory(env_id=0, group_id=0, seed=3, env_type="FrozenLake", tag="lake",
                         input_ids=[ord(c) for c in "map?Right"], prompt_length=4,
                         rewards=[0.0, 1.0])
    group = EpisodeGroup(seq=0, tag="lake", trajectories=[episode], version=0,
                         turn_versions=[0], scores=[episode.score])
    log.trained([group], step=1)
    assert read(tmp_path) == [{"step": 1, "prompt": "map?", "response": "Right",
                               "reward": 1.0}]
