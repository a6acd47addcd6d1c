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
advantages/*, the train/infer mismatch metrics).

The pieces every plain loop of this kind needs (the strategies a synchronous run starts,
a batch's chunks, a chunk's sampled rows, the fused train step) are the functions below;
plain_online_dpo_loop.py builds its loop from them too."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from flywheel.algorithms.aggregation import masked_mean
from flywheel.algorithms.distill import opd_advantages
from flywheel.algorithms.mismatch import MismatchCorrection
from flywheel.config.derived import infer_is_correction
from flywheel.pipelines.data.prompt_data import prompt_encoder
from flywheel.pipelines.loop.actor_loss_config import build_actor_loss
from flywheel.pipelines.rlvr.domain_mix import training_order
from flywheel.pipelines.rlvr.generation import Chunk, batch_chunks, chunk_size, sampling_params
from flywheel.pipelines.rlvr.rollout import load_prompt_sets
from flywheel.pipelines.roles.roles import schedule_horizon
from flywheel.workers.batch import TokenBatch, pack_sequences
from flywheel.workers.strategies.base import Generation
from flywheel.workers.strategies.fused_old_logprobs import FusedOldLogProbs
from flywheel.workers.strategies.hf_infer import HFInferStrategy
from flywheel.workers.strategies.hf_model import load_tokenizer
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.model_head import ModelHead, actor_and_reference_heads
from flywheel.workers.strategies.train_loop import Objective


@contextlib.contextmanager
def every_core() -> Iterator[None]:
    """A synchronous run's workers take every core: so does the plain loop."""
    previous = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@dataclass
class PlainParts:
    """What a synchronous run starts, as plain objects: the tokenizer, the prompt order and
    encoder, actor_train (`student`) and actor_infer (`sampler`), and how a batch is cut."""

    cfg: object
    tokenizer: object
    order: object  # training_order: the prompts of each batch
    encode: object  # prompt_encoder: a prompt -> its ids
    student: HFTrainStrategy
    sampler: HFInferStrategy
    reference_head: ModelHead  # the head of a frozen policy beside it (reference, teacher)
    size: int  # prompts per generation chunk

    @property
    def pad(self) -> int:
        return self.tokenizer.pad_token_id

    def chunks(self, batch_index: int) -> list[Chunk]:
        """Batch `batch_index`'s prompts cut into chunks, with the run's seeds."""
        cfg = self.cfg
        records = self.order.batch(batch_index, cfg.rollout_batch_size)
        ids = [self.encode(r.prompt, r.tag) for r in records]
        sampling = sampling_params(cfg.actor_infer.generating_args,
                                   cfg.num_return_sequences_in_group, seed=0)
        return batch_chunks(batch_index, records, ids, sampling, self.size, cfg.seed)

    def sample(self, chunk: Chunk) -> list[list[Generation]]:
        """actor_infer's samples of each prompt of `chunk`, in prompt order."""
        generations = self.sampler.generate(chunk.prompt_ids, chunk.sampling)
        return [[g for g in generations if g.prompt_index == i] for i in range(chunk.num_groups)]

    def train(self, batch: TokenBatch, loss: Objective) -> dict[str, float]:
        """actor_train's step: ℓ_old from the update's own forwards (one optimizer step)."""
        assert self.student.fuses_old_logprobs(len(batch), self.cfg.ppo_epochs)
        fused = FusedOldLogProbs(loss, MismatchCorrection())
        metrics = self.student.train_step(batch, fused, self.cfg.ppo_epochs)
        return metrics | fused.metrics()

    def sync(self, version: int) -> None:
        self.sampler.update_weights(self.student.state_dict_for_sync(), version)


def plain_parts(cfg, model_path: str) -> PlainParts:
    """A synchronous run's actor_train and actor_infer (one worker each) on `model_path`."""
    assert infer_is_correction(cfg) == "none" and cfg.async_generation_ratio == 0
    tokenizer = load_tokenizer(model_path)
    records = load_prompt_sets(cfg, tokenizer).train
    student_head, reference_head = actor_and_reference_heads(
        cfg.actor_infer.generating_args, cfg.actor_infer.strategy_args.strategy_name)
    student = HFTrainStrategy(model_path, cfg.actor_train, cfg.seed,
                              schedule_horizon(cfg, cfg.actor_train, cfg.max_steps),
                              head=student_head)
    return PlainParts(cfg, tokenizer, training_order(records, cfg),
                      prompt_encoder(tokenizer, cfg.actor_train.data_args), student,
                      HFInferStrategy(model_path, cfg.actor_infer, cfg.seed), reference_head,
                      chunk_size(cfg.rollout_batch_size, 1, cfg.actor_infer.infer_batch_size))


def plain_opd_loop(cfg, model_path: str, teacher_path: str, steps: int) -> list[dict]:
    """Each step's training metrics. One teacher, every row, the run's threads."""
    assert cfg.opd_mode == "pure"
    assert not cfg.whiten_advantages and cfg.advantage_clip is None and cfg.init_kl_coef == 0
    (name, tcfg), = cfg.teacher.items()
    with every_core():
        parts = plain_parts(cfg, model_path)
        teacher = HFTrainStrategy(teacher_path, tcfg, cfg.seed, total_steps=steps,
                                  trainable=False, head=parts.reference_head)
        loss = build_actor_loss(cfg)
        out = []
        for step in range(steps):
            prompts, responses, sampled, scored = [], [], [], []
            for chunk in parts.chunks(step):
                samples = parts.sample(chunk)  # 1. sample
                chunk_rows = [(chunk.prompt_ids[i], g) for i, group in enumerate(samples)
                              for g in group]
                chunk_prompts = [p for p, _ in chunk_rows]
                chunk_responses = [g.token_ids for _, g in chunk_rows]
                teacher_lp = teacher.forward_logprobs(  # 2. the teacher scores the chunk
                    pack_sequences(chunk_prompts, chunk_responses, parts.pad))  # [b, L]
                for row, (prompt, g) in enumerate(chunk_rows):
                    start = len(prompt)
                    scored.append(teacher_lp[row, start:start + len(g.token_ids)])
                prompts += chunk_prompts
                responses += chunk_responses
                sampled += [g.log_probs for _, g in chunk_rows]
            batch = pack_sequences(prompts, responses, parts.pad, sampled)
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
            metrics |= parts.train(batch, loss)  # 4. train
            parts.sync(step + 1)  # 5. sync
            out.append(metrics)
        return out
