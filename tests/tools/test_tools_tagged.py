"""GEM's tool-call format (`tool_use.call_format: tags`, tools/tagged_calls.py), ROLL's
per-call rewards (tool_reward, tool_success_reward), and one scripted episode of a converted
GEM QA tag through the env manager with its search tool."""

from __future__ import annotations

from pathlib import Path

import pytest

from flywheel.config.schema import ToolConfig, ToolUseConfig
from flywheel.envs import EnvManager, EnvManagerConfig, make
from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.errors import ConfigError
from flywheel.tools import MalformedCall, ToolCall
from flywheel.tools.from_config import template_tools, tool_box, with_tools
from flywheel.tools.tagged_calls import parse_tagged_call, tagged_format

DATA = Path(__file__).parents[2] / "examples" / "data"
PYTHON_TAGS = [["<code>", "</code>"], ["```python", "```"]]


def tags_use(**overrides) -> ToolUseConfig:
    tools = [ToolConfig("calculator", call_tags=[["<calc>", "</calc>"]]),
             ToolConfig("search", {"documents": str(DATA / "gem_qa_documents.jsonl"),
                                   "top_k": 1})]
    return ToolUseConfig(**{"tools": tools, "call_format": "tags", **overrides})


def test_the_call_that_closes_first_is_run_with_its_one_argument():
    box = tool_box(tags_use(), [], "k")
    fmt = tagged_format(list(box.tools.values()), [[["<calc>", "</calc>"]], []])
    assert parse_tagged_call("x <search> a </search> <calc>1+1</calc>", fmt) == ToolCall(
        "search", {"query": "a"})
    assert parse_tagged_call("<calc>2*3</calc><search>b</search>", fmt) == ToolCall(
        "calculator", {"expression": "2*3"})
    assert parse_tagged_call("<answer>7</answer>", fmt) is None
    for text, reason in (("<calc>2*", "<calc> without </calc>"),
                         ("<search>  </search>", "nothing between")):
        parsed = parse_tagged_call(text, fmt)
        assert isinstance(parsed, MalformedCall) and reason in parsed.reason


def test_tagged_episode_pays_rolls_tool_rewards_per_call():
    use = tags_use(max_tool_uses=2, tool_reward=0.05, tool_success_reward=0.1)
    env = with_tools(make("roll_qa", data_file=str(DATA / "gem_qa.jsonl")),
                     tool_box(use, [], "k"), use)
    observation, _ = env.reset(seed=5)
    assert "- search: " in observation and "<search>...</search>" in observation
    assert "<calc>...</calc>" in observation  # the tools follow the first observation
    steps = [env.step(reply) for reply in ("<calc>7*6</calc>", "<calc>1/0</calc>",
                                           "<calc>oops", "<calc>1</calc>")]
    assert steps[0][0] == "42" and steps[1][0].startswith("Error:")
    assert "Write <calc>expression</calc> or <search>query</search>" in steps[2][0]
    assert "no tool uses left" in steps[3][0]
    # ok: both rewards; error: tool_reward only; malformed and over budget: nothing
    assert [s[1] for s in steps] == [pytest.approx(0.15), 0.05, 0.0, 0.0]
    assert env.step(f"<answer>{env.env.item[1]}</answer>")[1] == 1.0
    assert template_tools(tool_box(use, [], "k"), use) == []  # no JSON schemas with tags


def test_call_format_keys_act_only_where_they_mean_something():
    base = {"pipeline_type": "agentic", "train_env_manager": {"tags": ["Q"]},
            "val_env_manager": {"tags": ["Q"]}}
    qa = {"env_type": "roll_qa", "env_config": {"data_file": "q.jsonl"}}
    search = {"tool_id": "search", "tool_args": {"documents": "d.jsonl"}}
    cases = [({"tools": [{**search, "call_tags": [["<s>", "</s>"]]}]},
              "tools[0].call_tags", "acts only with tool_use.call_format: tags"),
             ({"tools": [search], "call_format": "tags", "call_start": "<c>"},
              "call_start", "acts only with call_format: json"),
             ({"tools": [{**search, "call_tags": [["<s>"]]}], "call_format": "tags"},
              "tools[0].call_tags", "[start, end]")]
    for tool_use, key, message in cases:
        with pytest.raises(ConfigError, match=message) as error:
            load_config_dict({**base, "custom_envs": {"Q": {**qa, "tool_use": tool_use}}})
        assert error.value.key_path == f"custom_envs.Q.tool_use.{key}"


def test_a_tool_without_one_required_argument_cannot_be_called_by_tags():
    use = ToolUseConfig(tools=[ToolConfig("reverse", tool_import_path="user_tools:Reverse")],
                        call_format="tags")
    with pytest.raises(ValueError, match="k.call_format: tool 'reverse' takes 0 required"):
        tool_box(use, ["user_tools"], "k")


def test_converted_qa_tag_plays_a_search_episode_through_the_env_manager():
    """A scripted model searches, reads the result, answers: the result reaches the
    episode's tokens (mask 0) and the answer scores."""
    use = ToolUseConfig(tools=[ToolConfig("search", {"documents": str(
        DATA / "gem_qa_documents.jsonl"), "top_k": 2}, call_tags=[["<search>", "</search>"]])],
        call_format="tags", max_tool_uses=1)
    manager = EnvManager(EnvManagerConfig("roll_qa", {"data_file": str(DATA / "gem_qa.jsonl")},
                                          num_env_groups=1, group_size=1, max_steps=3,
                                          system_template="", turn_template="{observation}\n"))
    box = tool_box(use, [], "k")
    manager.envs = [with_tools(env, box, use) for env in manager.envs]
    answers = dict(manager.envs[0].env.items)

    def reply(prompt: str) -> str:
        question = prompt.split("Question: ")[1].split("\n")[0]
        if "[1] " not in prompt:
            return f"<search>{question}</search>"
        return f"<answer>{answers[question]}</answer>"

    class Chars:
        def encode(self, text):
            return [ord(c) for c in text]

        def decode(self, ids):
            return "".join(map(chr, ids))

    def generate(prompts, max_tokens):
        ids = [Chars().encode(reply(Chars().decode(p))) for p in prompts]
        return [(i, [-0.5] * len(i)) for i in ids]

    (episode,) = manager.rollout(generate, Chars(), seed=4)
    text = Chars().decode(episode.input_ids)
    masked = Chars().decode(i for i, m in zip(episode.input_ids, episode.response_mask) if m)
    assert episode.rewards == [0.0, 1.0] and episode.metrics["tool_valid_calls"] == 1
    assert "[1] " in text and "[1] " not in masked  # the search result, not trained on
