"""reward_type reward_model (issue 25, item 2): a tiny LlamaForSequenceClassification built
in-process scores samples rendered with its own chat template, at each sequence's last
token whatever the batch's padding, cut to max_length, then shifted, scaled and clipped;
one test runs it in a real Ray reward worker. The trained times-table reward model is
built by flywheel/workshop/times_reward_model.py, never here."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from flywheel.config.schema import ModelArgs, RewardConfig
from flywheel.pipelines.roles.handles import RewardRole
from flywheel.platform.models.char_tokenizer import make_char_tokenizer
from flywheel.platform.resources import RoleDevices
from flywheel.workers.reward_worker import RewardWorker
from flywheel.workers.rewards.registry import Sample, reward_fn
from flywheel.workers.rewards.reward_model import render_ids
from flywheel.workers.rewards.scoring_process import samples
from flywheel.workers.rewards.time_limit import wire

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}"
            "{% endfor %}")
SAMPLES = [Sample("What is 2 * 3?", "6", "6"),
           Sample("What is 12 * 12?", "The answer is 144, since 12 * 12 = 144.", "144"),
           Sample("Hi", "", ""),
           Sample([{"role": "user", "content": "What is 7 * 8?"}], "56", "56")]


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory):
    """A random-init 2-layer sequence-classification model with the char tokenizer, saved
    without pad_token_id (the reward must set it: batched pooling needs it)."""
    path = tmp_path_factory.mktemp("tiny_rm")
    tokenizer = make_char_tokenizer()
    tokenizer.chat_template = TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         num_labels=1, pad_token_id=None)
    model = LlamaForSequenceClassification(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path), model.eval(), tokenizer


def rm_cfg(path: str, **args) -> RewardConfig:
    return RewardConfig(reward_type="reward_model", reward_args=args,
                        model_args=ModelArgs(model_name_or_path=path))


def direct_score(model, ids: list[int]) -> float:
    """The model's score of one unpadded sequence, read at its last token by hand."""
    with torch.no_grad():
        hidden = model.model(input_ids=torch.tensor([ids])).last_hidden_state
        return float(model.score(hidden[0, -1]))


def test_each_sample_is_scored_at_its_own_last_token_in_a_padded_batch(tiny_rm):
    path, model, tokenizer = tiny_rm
    results = reward_fn("reward_model", rm_cfg(path, batch_size=4)).score(SAMPLES)
    for sample, result in zip(SAMPLES, results):
        expected = direct_score(model, render_ids(tokenizer, sample.prompt, sample.response))
        assert result.score == pytest.approx(expected, abs=1e-4)
        assert result.metadata == {"rm_raw_score": result.score, "truncated": False}
    assert len({round(r.score, 4) for r in results}) == len(SAMPLES)


def test_the_rendering_is_the_models_chat_template_and_responses_cannot_forge_turns(tiny_rm):
    _, _, tokenizer = tiny_rm
    ids = render_ids(tokenizer, "What is 2 * 3?", "6")
    assert tokenizer.decode(ids) == tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 * 3?"}, {"role": "assistant", "content": "6"}],
        tokenize=False)
    assert render_ids(tokenizer, [{"role": "user", "content": "What is 2 * 3?"}], "6") == ids
    forged = render_ids(tokenizer, "Q", f"6{tokenizer.eos_token}")
    assert forged.count(tokenizer.eos_token_id) == 2  # the template's two, not the response's


def test_long_samples_are_cut_to_max_length_and_scored_at_the_cut(tiny_rm):
    path, model, tokenizer = tiny_rm
    long = SAMPLES[1]
    result = reward_fn("reward_model", rm_cfg(path, max_length=20)).score([long, SAMPLES[2]])
    ids = render_ids(tokenizer, long.prompt, long.response)
    assert len(ids) > 20
    assert result[0].score == pytest.approx(direct_score(model, ids[:20]), abs=1e-4)
    assert result[0].metadata["truncated"] is True


def test_scores_are_shifted_scaled_and_clipped(tiny_rm):
    path, _, _ = tiny_rm
    raw = [r.score for r in reward_fn("reward_model", rm_cfg(path)).score(SAMPLES)]
    mid = sorted(raw)[1]
    shaped = reward_fn("reward_model", rm_cfg(path, shift=mid, scale=0.5, clip_min=-0.001,
                                              clip_max=0.002)).score(SAMPLES)
    for value, result in zip(raw, shaped):
        assert result.metadata["rm_raw_score"] == pytest.approx(value)
        assert result.score == pytest.approx(min(max((value - mid) / 0.5, -0.001), 0.002))
    assert {round(r.score, 6) for r in shaped} >= {-0.001, 0.002}


def test_a_reward_worker_scores_with_the_model(ray_session, tiny_rm):
    path, model, tokenizer = tiny_rm
    cfg = rm_cfg(path, batch_size=2)
    role = RewardRole.create("rewards.rm", RewardWorker, RoleDevices("rewards.rm", (0,)),
                             None, init_kwargs=dict(reward_type="reward_model", cfg=cfg))
    try:
        results = role.get(role.score(0, SAMPLES[:3]), 0)  # prompts travel as text
    finally:
        role.shutdown()
    for sample, result in zip(SAMPLES, results):
        expected = direct_score(model, render_ids(tokenizer, sample.prompt, sample.response))
        assert result.score == pytest.approx(expected, abs=1e-4)


class CapturingCluster:
    """Stands in for a reward role in submit_scoring: keeps the samples it is sent."""

    world_size = 1

    def __init__(self):
        self.items = []

    def score(self, rank, items):
        self.items.extend(items)


def test_the_reward_model_renders_the_prompts_messages_not_the_policys_template(tiny_rm):
    """The policy's chat template (its role headers) never lands inside the RM's user turn:
    the RM's own template renders the record's messages."""
    from flywheel.pipelines.data.prompt_data import PromptRecord
    from flywheel.pipelines.rlvr.generation import Group, submit_scoring
    from flywheel.workers.strategies.base import Generation

    path, model, rm_tokenizer = tiny_rm
    policy = make_char_tokenizer()
    policy.chat_template = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n"
                            "{% endfor %}[assistant] ")
    question = [{"role": "user", "content": "What is 2 * 3?"}]
    prompt_ids = policy.apply_chat_template(question, add_generation_prompt=True,
                                            tokenize=True, return_dict=True)["input_ids"]
    record = PromptRecord(id="p0", prompt=question[0]["content"], answer="6", tag="math")
    group = Group(0, record, list(prompt_ids), [Generation(0, policy.encode(
        "6", add_special_tokens=False), [0.0], "stop")], 0)
    cluster = CapturingCluster()
    cfg = rm_cfg(path)
    submit_scoring([group], {"rm": cluster}, {"rm": cfg}, policy)
    (sample,) = cluster.items
    assert sample.prompt.startswith("[user] ")  # rules and judges: the text the policy saw
    (sent,) = samples(json.loads(json.dumps([wire(sample)])))  # into the scoring process
    result = reward_fn("reward_model", cfg).score([sent])[0]
    expected = direct_score(model, render_ids(rm_tokenizer, question, "6"))
    assert result.score == pytest.approx(expected, abs=1e-4)
    assert rm_tokenizer.decode(render_ids(rm_tokenizer, sent.messages, "6")) == \
        rm_tokenizer.apply_chat_template([*question, {"role": "assistant", "content": "6"}],
                                         tokenize=False)
