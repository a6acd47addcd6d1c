"""Chat-message prompts through a real reward worker (issue 24, item 0).

A record whose prompt is a list of messages (TRL's conversational layout), read from JSONL
and from parquet and encoded with a chat template, is scored by math_rule in its scoring
process: the reward receives one string, the text the policy saw (the system prompt, the
turns and the generation prompt: prompt_data.reward_prompt), and scores the responses.
Before the fix the request carried the message list and every sample failed with "a
request must be a JSON list [prompt, response, reference] of strings".
"""

from __future__ import annotations

import json

import pytest

from flywheel.config.schema import DataArgs, RewardConfig
from flywheel.pipelines.data.prompt_data import load_records, prompt_encoder
from flywheel.pipelines.rlvr.generation import Group, submit_scoring
from flywheel.pipelines.roles.handles import RewardRole
from flywheel.platform.models.char_tokenizer import make_char_tokenizer
from flywheel.platform.resources import RoleDevices
from flywheel.workers.reward_worker import RewardWorker
from flywheel.workers.strategies.base import Generation

# role initial, ":", content, a line per message; then the assistant's turn opens
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}a:{% endif %}")
ROWS = [{"prompt": [{"role": "user", "content": "2+3="}], "answer": "5"},
        {"prompt": [{"role": "user", "content": "4+4="}], "answer": "8"}]


@pytest.fixture(scope="module")
def math_rule(ray_session):
    """One real math_rule reward worker (its own scoring process) for the module."""
    cfg = RewardConfig(reward_type="math_rule")
    role = RewardRole.create("rewards.math_rule", RewardWorker,
                             RoleDevices("rewards.math_rule", (0,)), None,
                             init_kwargs=dict(reward_type="math_rule", cfg=cfg))
    yield role
    role.shutdown()


class SentItems:
    """The reward role as submit_scoring uses it, keeping the items it was sent."""

    def __init__(self, role: RewardRole):
        self.role, self.items = role, []
        self.world_size = role.world_size

    def score(self, rank, items):
        self.items += items
        return self.role.score(rank, items)

    def get(self, ref, rank):
        return self.role.get(ref, rank)


def write_rows(path, rows):
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)  # prompt: list<struct<role, content>>
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_message_prompts_reach_a_real_reward_as_the_text_the_policy_saw(
        tmp_path, math_rule, suffix):
    path = tmp_path / f"chat{suffix}"
    write_rows(path, ROWS)
    args = DataArgs(file_name=[str(path)], template="chat", system_prompt="Add.")
    records = load_records(args, "actor_train")
    assert [r.prompt for r in records] == [row["prompt"] for row in ROWS]  # messages kept
    tokenizer = make_char_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    encode = prompt_encoder(tokenizer, args)

    def reply(text: str) -> Generation:
        ids = tokenizer.encode(text, add_special_tokens=False)
        return Generation(0, ids, [0.0] * len(ids), "stop")

    groups = [Group(i, record, encode(record.prompt), [reply("5"), reply("8")], version=0)
                for i, record in enumerate(records)]
    sent = SentItems(math_rule)
    submit_scoring(groups, {"math_rule": sent}, {"math_rule": RewardConfig()},
                   tokenizer).finish()
    assert [g.scores for g in groups] == [[1.0, 0.0], [0.0, 1.0]]
    assert [item[:3] for item in sent.items] == [
        ("s:Add.\nu:2+3=\na:", "5", "5"), ("s:Add.\nu:2+3=\na:", "8", "5"),
        ("s:Add.\nu:4+4=\na:", "5", "8"), ("s:Add.\nu:4+4=\na:", "8", "8")]
