"""The textbook synchronous online DPO loop, written out in one process from the
strategies' own APIs (plain_opd_loop.py's pieces): sample a chunk of prompts with
actor_infer's `generate`, score each sample with the reward itself (its `sample_reward`,
called here, not in a worker), keep a prompt's group only if its scores differ (until the
filter's cap), take chunk after chunk until the step has `rollout_batch_size` groups,
pair each group's first-highest with its first-lowest sample, the reference's
`forward_logprobs`, actor_train's `train_step` with the pairwise loss, `update_weights`.
No Ray, no prefetch thread, no replay buffer, no step loop, no rollout: what online DPO at
async_generation_ratio 0 must equal number for number (DESIGN.md invariant 1).

The refill rule, as the synchronous run has it: the chunks of the prompt stream go out in
order (a step that runs short draws from the next batch's chunks); a step uses the fewest
chunks whose groups with a preference reach the batch; the groups of the last chunk past
the batch were made by this step's weights, so the next step never trains them (stale at
ratio 0), and it starts at the next chunk."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from flywheel.algorithms.preference.pair_logprobs import PAIR_EXTRA, pair_layout
from flywheel.algorithms.preference.pair_losses import PairLossArgs
from flywheel.pipelines.data.prompt_data import prompt_messages, reward_prompt
from flywheel.workers.batch import pack_sequences
from flywheel.workers.pair_objective import PairObjective
from flywheel.workers.rewards.registry import Sample, sample_reward
from flywheel.workers.strategies.hf_train import HFTrainStrategy

from .plain_opd_loop import PlainParts, every_core, plain_parts


def prompt_stream(parts: PlainParts) -> Iterator:
    """Every chunk of batch 0, then of batch 1, ... (lazily: each is sampled when taken)."""
    batch = 0
    while True:
        yield from parts.chunks(batch)
        batch += 1


def plain_online_dpo_loop(cfg, model_path: str, steps: int) -> list[dict]:
    """Each step's training metrics (dpo/*, actor/*, the mismatch metrics, online_dpo/*)."""
    assert not cfg.ipo and cfg.reference is not None and cfg.ppo_epochs == 1
    # the kind's filter is the tie rule alone (group_filter.py: drop_uniform)
    assert cfg.group_filter_mean_range is None and cfg.group_filter_min_std == 0
    (_, rcfg), = cfg.rewards.items()
    assert rcfg.response_length_penalty_coef == 0
    with every_core():
        parts = plain_parts(cfg, model_path)
        reference = HFTrainStrategy(model_path, cfg.reference, cfg.seed, total_steps=steps,
                                    trainable=False, head=parts.reference_head)
        reward = sample_reward(rcfg.reward_type, rcfg)
        loss = PairObjective(cfg.dpo_loss_type,
                             PairLossArgs(cfg.beta, cfg.label_smoothing, cfg.simpo_gamma))
        groups_per_step = cfg.rollout_batch_size
        # past this many tied groups in one step, the filter lets tied groups in
        cap = ((cfg.max_num_gen_batches - 1) * groups_per_step if cfg.max_num_gen_batches
               else None)
        stream = prompt_stream(parts)
        out = []
        for step in range(steps):
            kept, tied_dropped = [], 0  # (prompt ids, samples, scores) per group
            while len(kept) < groups_per_step:  # 1. sample and score chunk after chunk
                chunk = next(stream)
                for i, samples in enumerate(parts.sample(chunk)):
                    record = chunk.records[i]
                    scored = reward.score([
                        Sample(reward_prompt(parts.tokenizer, chunk.prompt_ids[i]),
                               parts.tokenizer.decode(g.token_ids, skip_special_tokens=True),
                               record.answer, record.row, prompt_messages(record.prompt))
                        for g in samples])
                    scores = [rcfg.weight * r.score for r in scored]
                    if len(set(scores)) > 1 or (cap is not None and tied_dropped >= cap):
                        kept.append((chunk.prompt_ids[i], samples, scores))
                    else:
                        tied_dropped += 1
            prompts, responses, sampled, row_scores, tied = [], [], [], [], 0
            for prompt, samples, scores in kept[:groups_per_step]:  # 2. pairs
                best, worst = scores.index(max(scores)), scores.index(min(scores))
                if scores[best] == scores[worst]:
                    tied += 1
                    continue
                for g, score in ((samples[best], scores[best]), (samples[worst], scores[worst])):
                    prompts.append(prompt)
                    responses.append(g.token_ids)
                    sampled.append(g.log_probs)
                    row_scores.append(score)
            batch = pack_sequences(prompts, responses, parts.pad, sampled)
            pairs = len(prompts) // 2
            batch.attach(PAIR_EXTRA, pair_layout(list(range(pairs))), per="sample")
            batch.ref_log_probs = reference.forward_logprobs(batch)  # 3. the reference
            metrics = parts.train(batch, loss)  # 4. train
            metrics |= {"online_dpo/pairs": float(pairs), "online_dpo/tied_groups": float(tied),
                        "online_dpo/chosen_score": float(torch.tensor(row_scores[::2]).mean()),
                        "online_dpo/rejected_score": float(
                            torch.tensor(row_scores[1::2]).mean())}
            parts.sync(step + 1)  # 5. sync
            out.append(metrics)
        return out
