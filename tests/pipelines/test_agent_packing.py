"""Shared-prefix packing of an agent episode's calls (agent.rows: episode, rows.py): on
the built-in tiny model, a real three-call conversation through the endpoint (hf_infer
sampling, the real `openai` client) trains as one row per episode whose ids are exactly
the ledger's, with the agent's and the template's ids out of the loss, and whose
per-token log-probs, loss and gradient (hf_train, token-mean) equal those of one row per
call. A history rewrite and an n > 1 call start rows of their own."""

from __future__ import annotations

import dataclasses

import openai
import pytest
import torch

from flywheel.config.schema import PipelineConfig, WorkerConfig
from flywheel.pipelines.agent.endpoint import AgentEndpoint, EndpointLimits
from flywheel.pipelines.agent.episodes import CallRow, EpisodeOutcome, rows_of
from flywheel.pipelines.agent.generator import StrategyGenerator
from flywheel.pipelines.agent.jobs import AgentGroup
from flywheel.pipelines.agent.rollout import call_advantages, pack_calls
from flywheel.pipelines.agent.rows import episode_rows
from flywheel.pipelines.loop.actor_loss_config import build_actor_loss
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.train_loop import local_counts

TEMPLATE = ("{% for m in messages %}<bos>{{ m['role'] }}\n{{ m['content'] }}<eos>\n{% endfor %}"
            "{% if add_generation_prompt %}<bos>assistant\n{% endif %}")
MODEL = "tiny"
TURNS = ["12+34=", "5+6=", "7+8="]  # the user's three messages


@pytest.fixture(scope="module")
def episodes(tiny_model_path):
    """Two episodes of three calls each (rewards 1 and 0); each call sends the last reply
    back as it came, then a new user message."""
    strategy = HFInferStrategy(tiny_model_path, WorkerConfig(infer_batch_size=4), seed=0)
    strategy.tokenizer.chat_template = TEMPLATE
    endpoint = AgentEndpoint(StrategyGenerator(strategy), strategy.tokenizer, MODEL,
                             SamplingParams(max_new_tokens=6, temperature=1.0),
                             EndpointLimits(max_tokens_per_call=6, max_calls=4))
    endpoint.start()
    played = []
    try:
        for e in range(2):
            episode = endpoint.open_episode(f"episode {e}", seed=e)
            oa = openai.OpenAI(base_url=endpoint.base_url, api_key=episode.key,
                               max_retries=0, timeout=60)
            messages = []
            for turn in TURNS:
                messages.append({"role": "user", "content": turn})
                reply = oa.chat.completions.create(model=MODEL, messages=messages)
                messages.append(reply.choices[0].message.model_dump(exclude_none=True))
            endpoint.close_episode(episode)
            played.append(episode)
    finally:
        endpoint.stop()
    return played, strategy.tokenizer.pad_token_id or 0


def group_of(played) -> AgentGroup:
    outcomes = [EpisodeOutcome(0, rows_of(e), float(r)) for e, r in zip(played, (1, 0))]
    return AgentGroup(0, {}, outcomes, version=0)


def loss_tokens(batch, values):
    """`values` [B, L] on the loss tokens, row by row, in order."""
    return torch.cat([values[b][batch.response_mask[b].bool()] for b in range(len(batch))])


def test_one_row_per_episode_is_the_ledgers_ids_with_only_sampled_ids_in_the_loss(episodes):
    played, pad = episodes
    packed = pack_calls([group_of(played)], pad, 1, "episode")
    per_call = pack_calls([group_of(played)], pad, 1, "call")
    assert len(packed) == 2 and len(per_call) == 6
    for b, episode in enumerate(played):
        calls = episode.ledger.calls
        assert [c.extends for c in calls] == [None, (0, 0), (1, 0)]
        last = calls[-1]
        ids = last.prompt_ids + list(last.choices[0].token_ids)
        n = int(packed.attention_mask[b].sum())
        assert packed.input_ids[b, :n].tolist() == ids  # the ledger's ids, untouched
        loss_at = [t for c in calls for t in range(len(c.prompt_ids),
                                                   len(c.prompt_ids) + len(c.choices[0].token_ids))]
        assert packed.response_mask[b].nonzero().flatten().tolist() == loss_at
        behaviour = [lp for c in calls for lp in c.choices[0].log_probs]
        assert packed.infer_log_probs[b, loss_at].tolist() == pytest.approx(behaviour)
    assert loss_tokens(packed, packed.input_ids).tolist() == \
        loss_tokens(per_call, per_call.input_ids).tolist()


def test_packed_rows_train_as_the_per_call_rows(episodes, tiny_model_path):
    """hf_train's per-token log-probs, the PG loss (token-mean) and its gradient."""
    played, pad = episodes
    cfg = dataclasses.replace(PipelineConfig(), adv_estimator="grpo", whiten_advantages=False)
    cfg.actor_train.loss_agg_mode = "token-mean"
    trainer = HFTrainStrategy(tiny_model_path, WorkerConfig(infer_batch_size=8), seed=0,
                              total_steps=1)
    loss_fn = build_actor_loss(cfg)
    results = []
    for rows in ("episode", "call"):
        batch = pack_calls([group_of(played)], pad, 1, rows)
        with torch.no_grad():
            batch.old_log_probs = trainer.forward_logprobs(batch) * batch.response_mask
        call_advantages(batch, cfg, group_size=2, kl_coef=0.0)
        batch.old_log_probs = batch.infer_log_probs  # ratio != 1 where the engines differ
        trainer.set_training(False)
        metrics = trainer.forward_backward([batch], loss_fn, local_counts(batch))
        grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters()
                          if p.grad is not None]).clone()
        with torch.no_grad():
            log_probs = loss_tokens(batch, trainer.forward_logprobs(batch))
        results.append((log_probs, loss_tokens(batch, batch.advantages),
                        metrics[0]["pg/loss"], grad))
    (lp_e, adv_e, loss_e, grad_e), (lp_c, adv_c, loss_c, grad_c) = results
    assert lp_e.shape == lp_c.shape and lp_e.numel() > 6
    torch.testing.assert_close(lp_e, lp_c, atol=2e-5, rtol=0)
    assert adv_e.tolist() == adv_c.tolist()
    assert loss_e == pytest.approx(loss_c, abs=1e-6) and loss_e != 0
    torch.testing.assert_close(grad_e, grad_c, atol=1e-6, rtol=1e-4)


def row(prompt, tokens, call, choice=0, extends=None, version=0):
    return CallRow(prompt, tokens, [-0.5] * len(tokens), version, 0, call, choice, extends)


def test_a_rewrite_or_a_second_choice_starts_a_row_of_its_own():
    rows = [row([1, 2], [3], 0, version=4),
            row([1, 2], [9, 9], 0, 1, version=4),  # n = 2: the second choice
            row([1, 2, 3, 7], [5], 1, extends=[0, 0], version=5),  # continues choice 0
            row([1, 2, 9, 9, 7], [6], 2, extends=[0, 1], version=6),  # continues choice 1
            row([1, 2, 3, 7, 5, 7], [8], 3, extends=[1, 0], version=6),  # continues call 1
            row([1, 2, 3, 7], [4], 4, extends=[0, 0]),  # branches from choice 0 again
            row([1, 8], [2], 5)]  # a history rewrite: rendered whole
    packed = episode_rows(rows)
    assert [(r.ids, r.generated[-1], r.calls, r.version) for r in packed] == [
        ([1, 2, 3, 7, 5, 7, 8], True, 3, 4),
        ([1, 2, 9, 9, 7, 6], True, 2, 4),
        ([1, 2, 3, 7, 4], True, 1, 0),
        ([1, 8, 2], True, 1, 0)]
    assert packed[0].generated == [True, False, True, False, True]
