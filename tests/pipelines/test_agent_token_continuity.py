"""Token-in, token-out across an agent's calls (issue 47 item 3), through the endpoint and
the real `openai` client, on SmolLM2-135M-Instruct's tokenizer and chat template (no
tools in it: the `hermes` tool format) and on a Qwen2.5-style template that renders tools.

The engine is scripted (a test double of the one seam, generator.py): each call answers
with given ids, so a reply can be sampled as ids that are *not* its text's tokenization,
which re-tokenizing would lose. The trained rows must be exactly those ids; the whole
conversation must equal `apply_chat_template` of it, except where the ids are the model's
own (asserted); a changed history starts a new segment, counted."""

from __future__ import annotations

import copy
import json

import openai
import pytest

from flywheel.envs.chat_turns import ChatTurns
from flywheel.pipelines.agent.endpoint import AgentEndpoint
from flywheel.pipelines.agent.tool_format import FunctionTool, ToolFormat
from flywheel.tools.base import function_schema
from flywheel.tools.calculator import Calculator
from flywheel.workers.strategies.base import Generation, SamplingParams

MODEL = "smollm2"
SYSTEM = "You can use tools. Call the calculator for every product."
QUESTION = "What is 12 * 34?"
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 * 34"}}\n</tool_call>'
TOOLS = [function_schema(Calculator())]


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    pytest.importorskip("gguf")
    from transformers import AutoTokenizer

    from flywheel.platform.models.builtin import resolve_pretrain

    return AutoTokenizer.from_pretrained(resolve_pretrain("builtin://smollm2-135m-instruct"))


class Scripted:
    """Answers call k with script[k] (ids), n times; log-prob -0.25 per token."""

    def __init__(self, script):
        self.script = list(script)
        self.prompts = []

    async def generate(self, prompt_ids, sampling):
        self.prompts.append(list(prompt_ids))
        ids = self.script[len(self.prompts) - 1]
        return 7, [Generation(0, list(ids), [-0.25] * len(ids), "stop")
                   for _ in range(sampling.n)]


def serve(tokenizer, script):
    generator = Scripted(script)
    endpoint = AgentEndpoint(generator, tokenizer, MODEL, SamplingParams(max_new_tokens=64))
    endpoint.start()
    return endpoint, generator


def ids_of(tok, text):
    return tok.encode(text, add_special_tokens=False)


def three_calls(endpoint, episode):
    """The agent: a call that calls the tool, the tool's result, an answer, a follow-up."""
    oa = openai.OpenAI(base_url=endpoint.base_url, api_key=episode.key, max_retries=0)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    first = oa.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    (tool_call,) = first.choices[0].message.tool_calls
    assert tool_call.function.name == "calculator"
    assert json.loads(tool_call.function.arguments) == {"expression": "12 * 34"}
    assert first.choices[0].finish_reason == "tool_calls"
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": tool_call.id, "content": "408"}]
    second = oa.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "<answer>408</answer>"
    messages += [second.choices[0].message.model_dump(exclude_none=True),
                 {"role": "user", "content": "Sure?"}]
    third = oa.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    messages.append({"role": "assistant", "content": third.choices[0].message.content})
    return messages


def test_three_calls_train_exactly_the_engines_ids(smollm2_tokenizer):
    tok = smollm2_tokenizer
    end = tok.convert_tokens_to_ids("<|im_end|>")
    # The answer sampled as single characters: not how its text tokenizes.
    odd = [i for ch in "<answer>408</answer>" for i in ids_of(tok, ch)]
    assert odd != ids_of(tok, "<answer>408</answer>")
    script = [ids_of(tok, CALL) + [end], odd + [end], ids_of(tok, "Yes.") + [end]]
    endpoint, generator = serve(tok, script)
    try:
        episode = endpoint.open_episode("e", seed=0)
        messages = three_calls(endpoint, episode)
    finally:
        endpoint.stop()
    calls = episode.ledger.calls
    assert [c.segment for c in calls] == [0, 0, 0] and episode.counts["history_rewrites"] == 0
    # each prompt continues the previous prompt and the reply exactly as sampled
    for k in (1, 2):
        before = calls[k - 1].prompt_ids + calls[k - 1].choices[0].token_ids
        assert calls[k].prompt_ids[:len(before)] == before
    assert [c.prompt_ids for c in calls] == generator.prompts
    assert [c.choices[0].token_ids for c in calls] == script
    assert all(c.version == 7 and c.choices[0].log_probs == [-0.25] * len(s)
               for c, s in zip(calls, script))
    # The whole conversation equals the template's own tokenization of it (tools in the
    # system message, the tool result a user message in <tool_response> tags), except the
    # sampled odd ids of the answer and the "\n" the template writes after the last turn.
    trained = calls[2].prompt_ids + calls[2].choices[0].token_ids
    fmt = ToolFormat("hermes", False, [FunctionTool(**t["function"]) for t in TOOLS])
    shown = fmt.messages_for_template(messages)
    shown[2] = {"role": "assistant", "content": CALL}
    reference = tok.apply_chat_template(shown, tokenize=True, return_dict=True)["input_ids"]
    canon = ids_of(tok, "<answer>408</answer>")
    at = len(calls[1].prompt_ids)
    assert trained[:at] == reference[:at] and trained[at:at + len(odd)] == odd
    assert trained[at + len(odd):] == reference[at + len(canon):-1]
    assert tok.decode(reference[-1:]) == "\n"
    # The same conversation as the built-in agentic pipeline renders it (envs/chat_turns.py):
    # the endpoint's step 0 is the warm start's.
    turns = ChatTurns(tok, TOOLS)
    first = turns.first_prompt(SYSTEM, QUESTION)
    assert calls[0].prompt_ids == first
    assert calls[1].prompt_ids == first + script[0] + turns.next_turn(script[0], "408", "tool")


def test_a_changed_history_starts_a_counted_segment(smollm2_tokenizer):
    tok = smollm2_tokenizer
    end = tok.convert_tokens_to_ids("<|im_end|>")
    script = [ids_of(tok, "Hello") + [end], ids_of(tok, "Again") + [end],
              ids_of(tok, "Third") + [end]]
    endpoint, _ = serve(tok, script)
    try:
        episode = endpoint.open_episode("e", seed=0)
        oa = openai.OpenAI(base_url=endpoint.base_url, api_key=episode.key, max_retries=0)
        messages = [{"role": "user", "content": "Hi"}]
        reply = oa.chat.completions.create(model=MODEL, messages=messages)
        # the agent summarises its history: the reply it sends back is not the one sampled
        edited = [*messages, {"role": "assistant", "content": "Hello!"},
                  {"role": "user", "content": "More"}]
        oa.chat.completions.create(model=MODEL, messages=edited)
        kept = [*messages, reply.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": "More"}]
        oa.chat.completions.create(model=MODEL, messages=kept)  # continues call 0
    finally:
        endpoint.stop()
    calls = episode.ledger.calls
    assert [c.segment for c in calls] == [0, 1, 0] and episode.counts["history_rewrites"] == 1
    fresh = tok.apply_chat_template(edited, add_generation_prompt=True, tokenize=True,
                                    return_dict=True)["input_ids"]
    assert calls[1].prompt_ids == fresh
    assert calls[2].prompt_ids[:len(calls[0].prompt_ids) + len(script[0])] \
        == calls[0].prompt_ids + script[0]


def test_a_template_with_tools_gets_them_and_tool_messages(smollm2_tokenizer):
    from tests.envs.test_envs_chat_turns import QWEN_STYLE

    tok = copy.deepcopy(smollm2_tokenizer)
    tok.chat_template = QWEN_STYLE
    end = tok.convert_tokens_to_ids("<|im_end|>")
    script = [ids_of(tok, CALL) + [end], ids_of(tok, "<answer>408</answer>") + [end],
              ids_of(tok, "Yes.") + [end]]
    endpoint, _ = serve(tok, script)
    try:
        episode = endpoint.open_episode("e", seed=0)
        messages = three_calls(endpoint, episode)
    finally:
        endpoint.stop()
    calls = episode.ledger.calls
    assert [c.segment for c in calls] == [0, 0, 0]
    trained = calls[2].prompt_ids + calls[2].choices[0].token_ids
    messages[2] = {"role": "assistant", "content": CALL}  # the template has no tool_calls
    messages[3] = {"role": "tool", "content": "408"}
    reference = tok.apply_chat_template(messages, tools=TOOLS, tokenize=True,
                                        return_dict=True)["input_ids"]
    assert trained == reference[:-1]
    assert "<|im_start|>user\n<tool_response>\n408" in tok.decode(trained)


def test_tagged_format_parses_calls_and_leaves_malformed_ones_as_text():
    fmt = ToolFormat("tags", False, [FunctionTool(**function_schema(Calculator())["function"])])
    parsed = fmt.parse("Let me see <calculator>12 * 34</calculator> and "
                       "<calculator>1+1</calculator>")
    assert parsed.content == "Let me see" and parsed.malformed == 0
    assert parsed.tool_calls == [("calculator", {"expression": "12 * 34"}),
                                 ("calculator", {"expression": "1+1"})]
    broken = fmt.parse("<calculator>12 * 34")
    assert broken.tool_calls == [] and broken.malformed == 1
    assert broken.content == "<calculator>12 * 34"
    hermes = ToolFormat("hermes", False, fmt.tools)
    assert hermes.parse('<tool_call>\n{"name": 3}\n</tool_call>').malformed == 1
    shown = fmt.messages_for_template([{"role": "user", "content": "Q"}])
    assert shown[0]["content"].startswith("Q\nYou can use tools.")
    assert "<calculator>...</calculator>" in shown[0]["content"]


# ---- the example agent plays the built-in multiply env's episodes, id for id ------------
def _builtin_episode(tok, replies):
    """The built-in agentic pipeline's row of one multiply episode (agent_smollm2_multiply_
    tools.yaml: ToolEnv over MultiplyEnv, 3 turns, 2 tool uses, format penalty 0) whose
    model says `replies(a, b)` (ids per turn)."""
    from examples.agents.multiply_agent import SYSTEM as AGENT_SYSTEM
    from flywheel.envs.env_manager import EnvManager, EnvManagerConfig
    from flywheel.envs.multiply import MultiplyEnv
    from flywheel.tools.tool_env import ToolEnv
    from flywheel.tools.toolbox import ToolBox
    from flywheel.workers.env_worker import _TextCodec

    box = ToolBox([Calculator()], 10.0)
    config = EnvManagerConfig(env_type="multiply", tag="Multiply", group_size=1,
                              max_steps=3, max_tokens_per_step=48,
                              system_template=AGENT_SYSTEM, turn_template="{observation}",
                              chat_template=True, max_tool_output_tokens=64)
    manager = EnvManager(config, ChatTurns(tok, box.schemas()),
                         lambda: ToolEnv(MultiplyEnv(format_penalty=0.0), box, 2))
    turn = []

    def generate(prompts, max_tokens):
        ids = replies(*manager.envs[0].env.factors)[len(turn)]
        turn.append(ids)
        return [(ids, [-0.25] * len(ids))]
    (played,) = manager.rollout(generate, _TextCodec(tok), seed=3)
    return played, manager.envs[0].env.factors


@pytest.mark.parametrize("shape", ["call, answer", "malformed call, call, answer",
                                   "unknown tool, call, answer", "no answer, call, answer"])
def test_the_example_agent_plays_the_builtin_multiply_episode(smollm2_tokenizer, shape):
    """examples/agents/multiply_agent.py is the task of agent_smollm2_multiply_tools.yaml:
    for the same replies its trained row (agent.rows: episode) is the built-in env's, id for
    id, with the same loss mask and reward (a malformed call answered with the env's error,
    not the answer nudge; an unknown tool named as the tool box names it)."""
    import asyncio

    from examples.agents.multiply_agent import agent
    from flywheel.pipelines.agent.episodes import AgentLimits, run_episode
    from flywheel.pipelines.agent.rows import episode_rows

    tok = smollm2_tokenizer
    end = tok.convert_tokens_to_ids("<|im_end|>")

    def call(name, a, b, close="}"):
        return (f'<tool_call>\n{{"name": "{name}", "arguments": {{"expression": "{a} * {b}"}}'
                f'{close}\n</tool_call>')

    def replies(a, b):
        good, answer = call("calculator", a, b), f"<answer>{a * b}</answer>"
        texts = {"call, answer": [good, answer],
                 "malformed call, call, answer": [call("calculator", a, b, close=""), good,
                                                  answer],
                 "unknown tool, call, answer": [call("multiply", a, b), good, answer],
                 "no answer, call, answer": ["I think it is big.", good, answer]}[shape]
        return [ids_of(tok, t) + [end] for t in texts]

    played, (a, b) = _builtin_episode(tok, replies)
    assert played.score == 1.0 and not played.error
    endpoint = AgentEndpoint(Scripted(replies(a, b)), tok, "policy",
                             SamplingParams(max_new_tokens=48), tool_format="hermes")
    endpoint.start()
    try:
        outcome = asyncio.run(run_episode(endpoint, {"a": a, "b": b}, 0, "e", 0,
                                          AgentLimits(60.0), agent))
    finally:
        endpoint.stop()
    assert outcome.failure is None and outcome.reward == played.score
    (row,) = episode_rows(outcome.rows)
    prompt = len(row.prompt)
    assert row.ids == played.input_ids, tok.decode(row.ids[prompt:])
    assert [0] * prompt + [int(g) for g in row.generated] == played.response_mask
    assert [0.0] * prompt + row.log_probs == played.behaviour_logprobs
