"""RLVR: prompts scored by verifiers, trained with a policy-gradient loss.

One step, in order:
  1. rollout      next `rollout_batch_size` prompts → `num_return_sequences_in_group`
                  responses each from actor_infer, scored by the reward workers
  2. log-probs    old log-probs from actor_train (pre-update policy), reference log-probs
  3. advantages   grpo / reinforce (+ KL penalty, whitening, clipping)
  4. train        actor_train.train_step with the configured pg_variant loss
  5. sync         new weights → actor_infer (every `model_update_frequency` steps)
  6. log / validate / checkpoint

This is the synchronous loop (`async_generation_ratio: 0`); the same step runs on batches
from the prefetch generator when generation runs ahead. A sample's policy version is the
number of weight syncs actor_infer had received when it generated it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from flywheel.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    PolicyLossParams,
    train_infer_mismatch_weights,
)
from flywheel.platform.checkpoint import writing_checkpoint
from flywheel.platform.config.schema import PipelineConfig
from flywheel.platform.timing import StepTimer
from flywheel.platform.tracking import Tracker
from flywheel.pipelines.prompt_data import PromptRecord, PromptSampler, encode_prompt
from flywheel.pipelines.roles import Roles
from flywheel.pipelines.rollout import Group, generate_groups, sampling_params, score_groups
from flywheel.pipelines.train_batch import add_advantages, pack_groups
from flywheel.workers.actor_loss import ActorLoss

SEED_STRIDE = 1_000_003  # keeps per-step sampling seeds of different runs apart
# infer_is_correction -> (level, mode) of train_infer_mismatch_weights
MISMATCH_MODES = {"token-truncate": ("token", "truncate"), "seq-truncate": ("sequence", "truncate"),
                  "token-mask": ("token", "mask"), "seq-mask": ("sequence", "mask")}


def build_actor_loss(cfg: PipelineConfig) -> ActorLoss:
    at = cfg.actor_train
    params = PolicyLossParams(
        pg_clip=cfg.pg_clip, use_pg_clip_range=cfg.use_pg_clip_range,
        pg_clip_low=cfg.pg_clip_low, pg_clip_high=cfg.pg_clip_high,
        dual_clip_loss=cfg.dual_clip_loss, dual_clip_c=cfg.dual_clip_c,
        tis_lower_bound=at.tis_lower_bound, tis_upper_bound=at.tis_upper_bound,
        topr_positive_weight=at.topr_positive_weight,
        topr_negative_weight=at.topr_negative_weight,
        cispo_epsilon_low=at.cispo_epsilon_low, cispo_epsilon_high=at.cispo_epsilon_high,
        cispo_use_unified_mask=at.cispo_use_unified_mask, kimi15_tau=at.kimi15_tau,
    )
    return ActorLoss(
        pg_variant=at.pg_variant, params=params, loss_agg_mode=at.loss_agg_mode,
        kl_loss_coef=cfg.kl_loss_coef if cfg.use_kl_loss else 0.0,
        kl_loss_type=cfg.kl_loss_type, entropy_loss_coef=cfg.entropy_loss_coef,
    )


@dataclass
class RLVRPipeline:
    cfg: PipelineConfig
    roles: Roles
    tokenizer: object
    train_records: list[PromptRecord]
    val_records: list[PromptRecord]
    tracker: Tracker
    output_dir: Path
    step: int = 0
    version: int = 0  # weight syncs actor_infer has received
    sampler: PromptSampler = field(init=False)
    kl_ctl: FixedKLController | AdaptiveKLController = field(init=False)
    loss_fn: ActorLoss = field(init=False)

    def __post_init__(self) -> None:
        self.sampler = PromptSampler(self.train_records, seed=self.cfg.seed)
        self.loss_fn = build_actor_loss(self.cfg)
        if self.cfg.target_kl is not None:
            self.kl_ctl = AdaptiveKLController(self.cfg.init_kl_coef, self.cfg.target_kl,
                                               self.cfg.kl_horizon)
        else:
            self.kl_ctl = FixedKLController(self.cfg.init_kl_coef)

    # ---- the loop -------------------------------------------------------------------
    def run(self) -> None:
        cfg = self.cfg
        while self.step < cfg.max_steps:
            timer = StepTimer()
            with timer.phase("step"):
                self.step += 1
                groups = self.rollout(timer)
                metrics = self.train_on(groups, timer)
                if cfg.eval_steps and (self.step % cfg.eval_steps == 0
                                       or self.step == cfg.max_steps):
                    with timer.phase("validate"):
                        metrics.update(self.validate())
            metrics.update(timer.metrics())
            metrics.update(throughput(groups, timer.seconds["step"]))
            self.tracker.log(self.step, metrics)
            if cfg.save_steps and self.step % cfg.save_steps == 0:
                self.save_checkpoint()
        if self.step and not (cfg.save_steps and self.step % cfg.save_steps == 0):
            self.save_checkpoint()  # the end of a run is always resumable

    def rollout(self, timer: StepTimer) -> list[Group]:
        cfg = self.cfg
        records = self.sampler.next_batch(cfg.rollout_batch_size)
        sampling = sampling_params(cfg.actor_infer.generating_args,
                                   cfg.num_return_sequences_in_group,
                                   seed=cfg.seed * SEED_STRIDE + self.step)
        with timer.phase("generate"):
            groups = generate_groups(self.roles.actor_infer, records, self.encode(records),
                                     sampling)
        with timer.phase("reward"):
            score_groups(groups, self.roles.rewards, cfg.rewards, self.tokenizer)
        return groups

    def train_on(self, groups: list[Group], timer: StepTimer) -> dict[str, float]:
        cfg, roles = self.cfg, self.roles
        batch = pack_groups(groups, self.tokenizer.pad_token_id)
        metrics = rollout_metrics(batch)
        with timer.phase("logprobs"):
            refs = {"old_log_probs": roles.actor_train.submit_scatter(
                "forward_logprobs", batch.shard(roles.actor_train.world_size))}
            if roles.reference is not None:
                refs["ref_log_probs"] = roles.reference.submit_scatter(
                    "forward_logprobs", batch.shard(roles.reference.world_size))
            for name, parts in refs.items():
                cluster = roles.reference if name == "ref_log_probs" else roles.actor_train
                batch.token[name] = torch.cat(cluster.gather(parts))
        metrics.update(self.mismatch(batch))
        metrics.update(add_advantages(batch, cfg, cfg.num_return_sequences_in_group,
                                      self.kl_ctl.value))
        with timer.phase("train"):
            shards = batch.shard(roles.actor_train.world_size)
            results = roles.actor_train.scatter("train_step", shards, loss_fn=self.loss_fn,
                                                ppo_epochs=cfg.ppo_epochs)
        metrics.update(mean_metrics(results))
        metrics["loss/policy"] = metrics.get("pg/loss", float("nan"))
        if "kl/mean" in metrics:
            self.kl_ctl.update(metrics["kl/mean"], n_steps=len(batch))
        if self.step % cfg.model_update_frequency == 0:
            with timer.phase("weight_sync"):
                self.sync_weights()
        return metrics

    def mismatch(self, batch) -> dict[str, float]:
        """Train/infer log-prob gap; with infer_is_correction on, the IS weights too."""
        mode = self.cfg.infer_is_correction
        level, kind = MISMATCH_MODES.get(mode, ("token", "truncate"))
        weights, metrics = train_infer_mismatch_weights(
            batch.token["old_log_probs"], batch.token["infer_log_probs"], batch.response_mask,
            level=level, mode=kind, lower=self.cfg.infer_is_lower_bound,
            upper=self.cfg.infer_is_upper_bound)
        if mode != "none":
            batch.token["is_weights"] = weights
        return metrics

    def sync_weights(self) -> None:
        self.version += 1
        self.push_weights()

    def push_weights(self) -> None:
        weights = self.roles.actor_train.call_all("weights_ref")[0]
        self.roles.actor_infer.call_all("update_weights", weights, self.version)

    def validate(self) -> dict[str, float]:
        cfg = self.cfg
        records = self.val_records[: cfg.val_batch_size or None]
        gen_args = (cfg.validation.generating_args if cfg.validation
                    else cfg.actor_infer.generating_args)
        sampling = sampling_params(gen_args, 1, seed=cfg.seed)
        groups = generate_groups(self.roles.actor_infer, records, self.encode(records),
                                 sampling)
        score_groups(groups, self.roles.rewards, cfg.rewards, self.tokenizer)
        scores = [s for g in groups for s in g.scores]
        lengths = [len(r.token_ids) for g in groups for r in g.responses]
        return {"val/accuracy": sum(scores) / len(scores),
                "val/response_length": sum(lengths) / len(lengths)}

    def encode(self, records: list[PromptRecord]) -> list[list[int]]:
        template = self.cfg.actor_train.data_args.template
        return [encode_prompt(self.tokenizer, r.prompt, template) for r in records]

    # ---- checkpoints -------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        with writing_checkpoint(self.output_dir, self.step) as tmp:
            self.roles.actor_train.call_all("save", str(tmp / "actor_train"))
            state = {"step": self.step, "version": self.version,
                     "sampler": self.sampler.state(), "kl_coef": self.kl_ctl.value,
                     "saved_at": time.time()}
            (tmp / "pipeline_state.json").write_text(json.dumps(state, indent=2))

    def load_checkpoint(self, path: Path) -> None:
        state = json.loads((path / "pipeline_state.json").read_text())
        self.roles.actor_train.call_all("load", str(path / "actor_train"))
        self.step, self.version = state["step"], state["version"]
        self.sampler.restore(state["sampler"])
        self.kl_ctl.value = state["kl_coef"]
        self.push_weights()  # actor_infer starts from the checkpoint's weights


def rollout_metrics(batch) -> dict[str, float]:
    scores = batch.sample["scores"].float()
    lengths = batch.response_mask.sum(-1)
    return {"reward/mean": float(scores.mean()), "reward/std": float(scores.std()),
            "reward/max": float(scores.max()), "reward/min": float(scores.min()),
            "response/length_mean": float(lengths.mean()),
            "response/length_max": float(lengths.max())}


def mean_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    keys = per_rank[0].keys()
    return {k: sum(r[k] for r in per_rank) / len(per_rank) for k in keys}


def throughput(groups: list[Group], seconds: float) -> dict[str, float]:
    samples = sum(len(g.responses) for g in groups)
    tokens = sum(len(r.token_ids) for g in groups for r in g.responses)
    return {"throughput/samples_per_s": samples / seconds,
            "throughput/tokens_per_s": tokens / seconds}
