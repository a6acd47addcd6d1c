"""The textbook synchronous on-policy distillation loop, written out in one process from
the strategies' own APIs: actor_infer's `generate`, the teacher's `forward_logprobs`, the
OPD advantage (algorithms/distill), actor_train's `train_step` with the policy loss,
`update_weights`. No Ray, no prefetch thread, no step loop, no rollout: what a run at
async_generation_ratio 0 with a teacher must equal number for number (DESIGN.md
invariant 1). The prompts, their order and the sampling seeds are the run's by
definition (the data order and `batch_chunks`), so they are taken from where they are
defined, not rewritten.

Pure OPD only: the rewards then shape nothing the student learns, so the loop scores no
reward and the comparison is on what training computed (pg/*, actor/*, distill/*,
advantages/*, the train/infer mismatch metrics)."""

from __future__ import annotations

import os

import torch

from flywheel.algorithms.aggregation import masked_mean
from flywheel.algorithms.distill import opd_advantages
from flywheel.algorithms.mismatch import MismatchCorrection
from flywheel.config.derived import infer_is_correction
from flywheel.pipelines.data.prompt_data import prompt_encoder
from flywheel.pipelines.loop.actor_loss_config import build_actor_loss
from flywheel.pipelines.rlvr.domain_mix import training_order
from flywheel.pipelines.rlvr.generation import batch_chunks, chunk_size, sampling_params
from flywheel.pipelines.rlvr.rollout import load_prompt_sets
from flywheel.pipelines.roles.roles import schedule_horizon
from flywheel.workers.batch import pack_sequences
from flywheel.workers.strategies.fused_old_logprobs import FusedOldLogProbs
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_model import load_tokenizer
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.model_head import actor_and_reference_heads


def plain_opd_loop(cfg, model_path: str, teacher_path: str, steps: int) -> list[dict]:
    """Each step's training metrics. One teacher, every row, the run's threads."""
    assert cfg.opd_mode == "pure" and infer_is_correction(cfg) == "none"
    assert not cfg.whiten_advantages and cfg.advantage_clip is None and cfg.init_kl_coef == 0
    (name, tcfg), = cfg.teacher.items()
    previous = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # a synchronous run's workers take every core
    try:
        tokenizer = load_tokenizer(model_path)
        pad = tokenizer.pad_token_id
        records = load_prompt_sets(cfg, tokenizer).train
        order = training_order(records, cfg)
        encode = prompt_encoder(tokenizer, cfg.actor_train.data_args)
        student_head, teacher_head = actor_and_reference_heads(cfg.actor_infer.generating_args)
        student = HFTrainStrategy(model_path, cfg.actor_train, cfg.seed,
                                  schedule_horizon(cfg, cfg.actor_train, cfg.max_steps),
                                  head=student_head)
        sampler = HFInferStrategy(model_path, cfg.actor_infer, cfg.seed)
        teacher = HFTrainStrategy(teacher_path, tcfg, cfg.seed, total_steps=steps,
                                  trainable=False, head=teacher_head)
        loss = build_actor_loss(cfg)
        sampling = sampling_params(cfg.actor_infer.generating_args,
                                   cfg.num_return_sequences_in_group, seed=0)
        size = chunk_size(cfg.rollout_batch_size, 1, cfg.actor_infer.infer_batch_size)
        out = []
        for step in range(steps):
            batch_records = order.batch(step, cfg.rollout_batch_size)
            ids = [encode(r.prompt, r.tag) for r in batch_records]
            prompts, responses, sampled, scored = [], [], [], []
            for chunk in batch_chunks(step, batch_records, ids, sampling, size, cfg.seed):
                generations = sampler.generate(chunk.prompt_ids, chunk.sampling)  # 1. sample
                chunk_rows = [(chunk.prompt_ids[i], g) for i in range(chunk.num_groups)
                              for g in generations if g.prompt_index == i]
                chunk_prompts = [p for p, _ in chunk_rows]
                chunk_responses = [g.token_ids for _, g in chunk_rows]
                teacher_lp = teacher.forward_logprobs(  # 2. the teacher scores the chunk
                    pack_sequences(chunk_prompts, chunk_responses, pad))  # [b, L]
                for row, (prompt, g) in enumerate(chunk_rows):
                    start = len(prompt)
                    scored.append(teacher_lp[row, start:start + len(g.token_ids)])
                prompts += chunk_prompts
                responses += chunk_responses
                sampled += [g.log_probs for _, g in chunk_rows]
            batch = pack_sequences(prompts, responses, pad, sampled)
            teacher_tokens = torch.zeros_like(batch.response_mask)  # [B, L]
            for row, values in enumerate(scored):
                start = len(prompts[row])
                teacher_tokens[row, start:start + len(values)] = values
            advantages, metrics = opd_advantages(  # 3. A_t = ℓ_T − ℓ_S
                batch.infer_log_probs, {name: teacher_tokens}, batch.response_mask,
                coefs={name: tcfg.opd_kl_coef}, gamma=cfg.opd_gamma,
                rl_advantages=torch.zeros_like(batch.response_mask))
            batch.advantages = advantages * batch.response_mask
            valid = batch.response_mask.bool()
            metrics["advantages/mean"] = float(masked_mean(batch.advantages, valid))
            metrics["advantages/abs_mean"] = float(masked_mean(batch.advantages.abs(), valid))
            # 4. train: ℓ_old from the update's own forwards (one optimizer step)
            assert student.fuses_old_logprobs(len(batch), cfg.ppo_epochs)
            fused = FusedOldLogProbs(loss, MismatchCorrection())
            metrics |= student.train_step(batch, fused, cfg.ppo_epochs)
            metrics |= fused.metrics()
            sampler.update_weights(student.state_dict_for_sync(), step + 1)  # 5. sync
            out.append(metrics)
        return out
    finally:
        torch.set_num_threads(previous)
