"""The agent endpoint (issue 47) with the real `openai` client, sync and async, on the
built-in tiny model generating through hf_infer in this process: chat, n > 1, streaming,
logprobs; every reply's ids are the engine's; security refusals each with their status.

The tiny model has no chat template; a ChatML-like one written with its own special
tokens (<bos> opens a turn, <eos> closes it) stands in for a model's."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import openai
import pytest

from flywheel.config.schema import WorkerConfig
from flywheel.pipelines.agent.endpoint import AgentEndpoint, EndpointLimits
from flywheel.pipelines.agent.generator import StrategyGenerator
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy

TEMPLATE = ("{% for m in messages %}<bos>{{ m['role'] }}\n{{ m['content'] }}<eos>\n{% endfor %}"
            "{% if add_generation_prompt %}<bos>assistant\n{% endif %}")
MODEL = "tiny"


class Recording(StrategyGenerator):
    """The real strategy, with each answer kept to compare the replies with."""

    def __init__(self, strategy):
        super().__init__(strategy)
        self.answers = []

    async def generate(self, prompt_ids, sampling):
        version, generations = await super().generate(prompt_ids, sampling)
        self.answers.append((list(prompt_ids), generations))
        return version, generations


@pytest.fixture(scope="module")
def served(tiny_model_path):
    strategy = HFInferStrategy(tiny_model_path, WorkerConfig(infer_batch_size=4), seed=0)
    strategy.tokenizer.chat_template = TEMPLATE
    generator = Recording(strategy)
    endpoint = AgentEndpoint(generator, strategy.tokenizer, MODEL,
                             SamplingParams(max_new_tokens=8, temperature=1.0),
                             EndpointLimits(max_body_bytes=20_000, max_tokens_per_call=8,
                                            max_calls=6))
    endpoint.start()
    yield endpoint, generator
    endpoint.stop()


def client(endpoint, key, cls=openai.OpenAI):
    return cls(base_url=endpoint.base_url, api_key=key, max_retries=0, timeout=60)


def test_chat_n_and_logprobs_are_the_engines_ids(served):
    endpoint, generator = served
    episode = endpoint.open_episode("chat", seed=1)
    oa = client(endpoint, episode.key)
    assert [m.id for m in oa.models.list().data] == [MODEL]
    reply = oa.chat.completions.create(model=MODEL, n=3, max_tokens=5, logprobs=True,
                                       messages=[{"role": "user", "content": "2+3="}])
    prompt, generations = generator.answers[-1]
    assert len(reply.choices) == 3 and reply.model_extra["prompt_token_ids"] == prompt
    tok = endpoint.tokenizer
    assert prompt == tok.encode("<bos>user\n2+3=<eos>\n<bos>assistant\n",
                                add_special_tokens=False, split_special_tokens=False)
    assert prompt[0] == tok.bos_token_id  # the template's <bos> is the control token
    for choice, g in zip(reply.choices, generations):
        assert choice.model_extra["token_ids"] == g.token_ids and len(g.token_ids) <= 5
        assert choice.message.content == tok.decode(g.token_ids, skip_special_tokens=True)
        assert [t.logprob for t in choice.logprobs.content] == g.log_probs
        assert choice.finish_reason == ("length" if g.finish_reason == "length" else "stop")
    assert reply.usage.prompt_tokens == len(prompt)
    call = episode.ledger.calls[-1]
    assert call.prompt_ids == prompt and call.choices == generations


def test_async_client_and_streaming(served):
    endpoint, generator = served
    episode = endpoint.open_episode("stream", seed=2)

    async def run():
        oa = client(endpoint, episode.key, openai.AsyncOpenAI)
        stream = await oa.chat.completions.create(
            model=MODEL, stream=True, n=2, stream_options={"include_usage": True},
            messages=[{"role": "system", "content": "add"}, {"role": "user", "content": "1+1="}])
        return [chunk async for chunk in stream]

    chunks = asyncio.run(run())
    _, generations = generator.answers[-1]
    texts = {}
    for chunk in chunks:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
    tok = endpoint.tokenizer
    assert texts == {i: tok.decode(g.token_ids, skip_special_tokens=True)
                     for i, g in enumerate(generations)}
    assert chunks[-1].usage.completion_tokens == sum(len(g.token_ids) for g in generations)


def post(endpoint, body: bytes, key: str | None, path="/v1/chat/completions"):
    request = urllib.request.Request(endpoint.base_url + path[3:], data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {key}"}
                                                 if key else {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_security_refusals_each_with_its_status(served):
    endpoint, _ = served
    episode = endpoint.open_episode("secure", seed=3)
    ok = {"model": MODEL, "messages": [{"role": "user", "content": "1+2="}], "max_tokens": 2}
    body = json.dumps(ok).encode()
    assert post(endpoint, body, episode.key)[0] == 200
    assert post(endpoint, body, None)[0] == 401
    assert post(endpoint, body, "fw-not-a-key")[0] == 401
    other = endpoint.open_episode("other", seed=4)
    endpoint.close_episode(other)
    status, error = post(endpoint, body, other.key)
    assert status == 401 and "ended" in error["error"]["message"]
    with pytest.raises(openai.AuthenticationError):
        client(endpoint, other.key).models.list()
    assert post(endpoint, b'{"model": "tiny", "messages": [', episode.key)[0] == 400
    status, error = post(endpoint, json.dumps({**ok, "frobnicate": 1}).encode(), episode.key)
    assert status == 400 and error["error"]["param"] == "frobnicate"
    status, error = post(endpoint, json.dumps({**ok, "response_format": {}}).encode(),
                         episode.key)
    assert status == 400 and "not supported" in error["error"]["message"]
    bad_message = {**ok, "messages": [{"role": "user", "content": "x", "colour": 1}]}
    assert post(endpoint, json.dumps(bad_message).encode(), episode.key)[0] == 400
    assert post(endpoint, json.dumps({**ok, "temperature": 0.3}).encode(), episode.key)[0] \
        == 400
    assert post(endpoint, json.dumps({**ok, "model": "gpt-4o"}).encode(), episode.key)[0] \
        == 404
    huge = {**ok, "messages": [{"role": "user", "content": "1" * 30_000}]}
    assert post(endpoint, json.dumps(huge).encode(), episode.key)[0] == 413
    calls_left = endpoint.limits.max_calls - episode.counts["calls"]
    for _ in range(calls_left):
        assert post(endpoint, body, episode.key)[0] == 200
    with pytest.raises(openai.RateLimitError):  # not retried: x-should-retry false
        client(endpoint, episode.key).chat.completions.create(**ok)
    assert episode.over_budget == f"more than {endpoint.limits.max_calls} calls"
    assert post(endpoint, body, episode.key)[0] == 429  # the server is unharmed
    with pytest.raises(ValueError, match="loopback"):
        AgentEndpoint(endpoint.generator, endpoint.tokenizer, MODEL,
                      endpoint.sampling).start(host="0.0.0.0")
