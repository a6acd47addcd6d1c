"""`pipeline_type: dpo`: offline preference learning from pairs, on the shared update loop.

What a run does, in order:

1. Pairs from `actor_train.data_args` (and `validation.data_args`): a prompt, a chosen and
   a rejected response (pair_data.py), each pair two rows `prompt | reply <eos>` side by
   side (the pair layout); bad pairs refused or dropped and counted, the counts in the
   first step's metrics (`dpo/pairs_*`).
2. `max_steps` steps (with `training_args.num_train_epochs`, at most that many whole
   passes over the pairs, as ROLL's DPO stops at whichever comes first), each one
   optimizer step of the pairwise loss (`dpo_loss_type`:
   workers/pair_objective.py, algorithms/preference/pair_losses.py) on
   per_device_train_batch_size x gradient_accumulation_steps *pairs* (twice as many rows:
   ROLL's DPO doubles the batch the same way), through actor_train's `train_step` (the
   shared update loop: schedule, warmup, clipping, micro-batches that never split a pair).
   Pairs come in a seeded shuffled order, epoch after epoch (`prompt_data.PromptOrder`).
   With sequence packing and shared_prefix_packing a pair's prompt is laid once for both
   responses.
3. Before each step, the reference's log-probs of the step's rows (no gradient): a frozen
   copy of the model (`reference.model_args.model_name_or_path`, else the run's
   pretrain), or, with LoRA, actor_train's own model with the adapter disabled (as RL's
   reference, config/derived.py `reference_from_actor`): no second model is held. SimPO
   uses none.
4. Before the first step (logged as step 0, the baseline, as RLVR and ROLL's pipelines
   validate at step 0), every eval_steps and after the last step: the validation pairs'
   `val/dpo/*` (the loss and reward metrics under the current policy) and `val/accuracy`
   (greedy decoding up to response_length tokens equal to the chosen response,
   whitespace stripped).
5. Every save_steps and at the end: `checkpoint-<step>/` as SFT writes it (an HF folder,
   or `adapter/` with LoRA), an RL run's `pretrain`.

Where it trains, as SFT (pipelines/sft/trainers.py): on hf_train, actor_train (and the
reference) run in the driver on one device, no Ray; on a backend whose ranks form one
process group (deepspeed_train), actor_train is a Ray cluster of ranks on its
device_mapping, each step's pairs sharded over them in order (each rank's share is whole
pairs: 2 x per_device_train_batch_size x gradient_accumulation_steps rows), and the
reference a forward-only cluster of the same backend on the same devices. The kind's
catalog roles say what may start: actor_train and, where the loss reads one, the
reference; nothing generates.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch

from flywheel.algorithms.preference.pair_losses import PairLossArgs
from flywheel.config.checks.preference import loss_type
from flywheel.config.derived import data_parallel_size
from flywheel.config.kinds import kind_of
from flywheel.config.persisted import written_config
from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.data.prompt_data import DataError, PromptOrder
from flywheel.pipelines.dpo.pair_data import EncodedPairs, encode_pairs, load_pairs
from flywheel.pipelines.run.metric_views import PANELS, PROGRESS_KEYS
from flywheel.pipelines.sft.greedy_eval import greedy_complete_ids
from flywheel.pipelines.sft.run import save_checkpoint
from flywheel.pipelines.sft.step_end import end_step
from flywheel.pipelines.sft.trainers import InProcess, OnRanks, start_trainer
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.platform.plots import refresh_run_plots
from flywheel.platform.run_status import write_status
from flywheel.platform.tracking import Tracker, default_mlflow_uri
from flywheel.workers.batch import TokenBatch
from flywheel.workers.pair_objective import PairObjective
from flywheel.workers.strategies.hf_train import HFTrainStrategy

log = logging.getLogger(__name__)


def sequence_limit(cfg: PipelineConfig) -> int:
    """A row's most tokens: sequence_length, unset: prompt_length + response_length."""
    return cfg.sequence_length or cfg.prompt_length + cfg.response_length


def objective(cfg: PipelineConfig) -> PairObjective:
    return PairObjective(loss_type(cfg), PairLossArgs(cfg.beta, cfg.label_smoothing,
                                                      cfg.simpo_gamma))


def load(cfg: PipelineConfig, role: str, tokenizer) -> EncodedPairs:
    args = cfg.actor_train.data_args if role == "actor_train" else cfg.validation.data_args
    records = load_pairs(args, role, cfg.chosen_key, cfg.rejected_key)
    if role == "validation" and cfg.val_batch_size:
        records = records[: cfg.val_batch_size]
    # validation pairs are encoded as actor_train's are (its template)
    return encode_pairs(records, cfg.actor_train.data_args, role, tokenizer,
                        sequence_limit(cfg), cfg.overlong_pairs, cfg.equal_pairs)


class Reference:
    """The reference policy's log-probs of a batch (module docstring, step 3): in process a
    frozen copy or the LoRA base; on ranks the `reference` role the trainer started."""

    def __init__(self, cfg: PipelineConfig, model_path: str, policy: HFTrainStrategy | None,
                 on_ranks: OnRanks | None = None):
        self.policy, self.frozen, self.on_ranks = policy, None, None
        if not objective(cfg).needs_reference:
            self.policy = None
        elif on_ranks is not None:
            self.policy, self.on_ranks = None, on_ranks
        elif policy.adapter is None:  # a frozen copy, in actor_train's precision
            self.frozen = HFTrainStrategy(reference_model(cfg, model_path), cfg.actor_train,
                                          cfg.seed, total_steps=1, trainable=False)

    @classmethod
    def beside(cls, cfg: PipelineConfig, model_path: str, trainer: InProcess | OnRanks
               ) -> Reference:
        if isinstance(trainer, OnRanks):
            return cls(cfg, model_path, None, trainer)
        return cls(cfg, model_path, trainer.strategy)

    @torch.no_grad()
    def log_probs(self, batch: TokenBatch) -> torch.Tensor | None:
        if self.on_ranks is not None:
            return self.on_ranks.frozen_logprobs("reference", batch)
        if self.frozen is not None:
            return self.frozen.forward(batch)
        if self.policy is not None:
            return self.policy.forward_base_logprobs(batch)
        return None


def reference_model(cfg: PipelineConfig, model_path: str) -> str:
    """The reference's model: reference.model_args.model_name_or_path, else the run's."""
    name = cfg.reference.model_args.model_name_or_path if cfg.reference else None
    return resolve_pretrain(name) if name else model_path


def frozen_roles(cfg: PipelineConfig, model_path: str) -> dict[str, str]:
    """The forward-only roles a run on ranks starts beside actor_train: the reference,
    where the loss reads one (the kind's catalog roles: nothing else)."""
    if objective(cfg).needs_reference and kind_of(cfg).has_role("reference"):
        return {"reference": reference_model(cfg, model_path)}
    return {}


def pair_worker_config(cfg: PipelineConfig):
    """actor_train's block with its batch sizes in rows: two per pair."""
    wcfg = cfg.actor_train
    args = wcfg.training_args
    return dataclasses.replace(wcfg, training_args=dataclasses.replace(
        args, per_device_train_batch_size=2 * args.per_device_train_batch_size))


@torch.no_grad()
def validate(trainer: InProcess | OnRanks, reference: Reference, tokenizer, val: EncodedPairs,
             loss: PairObjective, max_new_tokens: int, batch_size: int) -> dict[str, float]:
    """val/dpo/* on the held-out pairs, and val/accuracy (greedy equals chosen)."""
    from flywheel.workers.strategies.train_loop import local_counts

    batch = val.batch(list(range(len(val))), tokenizer.pad_token_id)
    batch.ref_log_probs = reference.log_probs(batch)
    _, metrics = loss(trainer.logprobs(batch), None, batch, local_counts(batch))
    out = {f"val/{k}": v for k, v in metrics.items()}
    replies = greedy_complete_ids(trainer.model(), tokenizer, val.prompts, max_new_tokens,
                                  batch_size=batch_size)
    out["val/accuracy"] = sum(r.strip() == rec.chosen.strip()
                              for r, rec in zip(replies, val.records)) / len(val)
    return out


def pairs_per_step(cfg: PipelineConfig) -> int:
    """per_device_train_batch_size x gradient_accumulation_steps pairs on each of
    actor_train's ranks (one in process)."""
    args = cfg.actor_train.training_args
    return (args.per_device_train_batch_size * args.gradient_accumulation_steps
            * data_parallel_size(cfg.actor_train))


def dpo_steps(cfg: PipelineConfig, pairs: int) -> int:
    """max_steps, or with num_train_epochs the fewer of it and int(epochs) whole passes
    over `pairs` (ROLL's DPO loop: epochs of a drop_last loader, stopped at max_steps)."""
    epochs = cfg.actor_train.training_args.num_train_epochs
    if not epochs:
        return cfg.max_steps
    steps = min(cfg.max_steps, int(epochs) * (pairs // pairs_per_step(cfg)))
    if steps < 1:
        raise DataError(f"actor_train.training_args.num_train_epochs: {int(epochs)} epoch(s) "
                        f"of {pairs} pairs make no step of {pairs_per_step(cfg)} pairs "
                        f"(per_device_train_batch_size x gradient_accumulation_steps x ranks)")
    return steps


def train_loop(cfg: PipelineConfig, model_path: str, tokenizer, train: EncodedPairs,
               val: EncodedPairs | None, tracker: Tracker, output_dir: Path) -> None:
    """`cfg.max_steps` steps (run_dpo settles num_train_epochs into it)."""
    pairs = pairs_per_step(cfg)
    trainer = start_trainer(dataclasses.replace(cfg, actor_train=pair_worker_config(cfg)),
                            model_path, cfg.max_steps, output_dir,
                            frozen=frozen_roles(cfg, model_path))
    try:
        reference = Reference.beside(cfg, model_path, trainer)
        order = PromptOrder(list(range(len(train))), cfg.seed)
        loss = objective(cfg)
        validation = None if val is None else (
            lambda: validate(trainer, reference, tokenizer, val, loss, cfg.response_length,
                             cfg.actor_train.infer_batch_size))
        if validation is not None:  # the baseline every later evaluation is read against
            tracker.log(0, validation())
        for step in range(1, cfg.max_steps + 1):
            start = time.perf_counter()
            batch = train.batch(order.batch(step - 1, pairs), tokenizer.pad_token_id)
            batch.ref_log_probs = reference.log_probs(batch)
            metrics = trainer.train_step(batch, loss)
            if step == 1:
                metrics |= train.counts.metrics("dpo")
            metrics["dpo/epoch"] = step * pairs / len(train)
            metrics["time/step"] = time.perf_counter() - start
            end_step(cfg, step, cfg.max_steps, metrics, tracker, validation,
                     lambda step=step: save_checkpoint(output_dir, step, trainer, tokenizer,
                                                       cfg.save_total_limit))
    finally:
        trainer.close()


def run_dpo(cfg: PipelineConfig, output_dir: Path, is_default: bool, model_path: str,
            tokenizer, config_path: str | None = None) -> Path:
    """The DPO run into `output_dir` (launch.run made it, config.yaml in it), from
    `model_path` (pretrain resolved); returns the run directory."""
    train = load(cfg, "actor_train", tokenizer)
    val = load(cfg, "validation", tokenizer) if cfg.validation is not None else None
    cfg = dataclasses.replace(cfg, max_steps=dpo_steps(cfg, len(train)))
    return run_in_process(cfg, output_dir, is_default, config_path, lambda tracker: train_loop(
        cfg, model_path, tokenizer, train, val, tracker, output_dir))


def run_in_process(cfg: PipelineConfig, output_dir: Path, is_default: bool,
                   config_path: str | None, train: Callable[[Tracker], None]) -> Path:
    """`train(tracker)` with the run's status, tracker, threads and plots around it, as
    SFT's run has them (the reward-model pipeline shares it)."""
    write_status(output_dir, "running", max_steps=cfg.max_steps, config=config_path)
    status, tracker = "failed", None
    previous_threads = torch.get_num_threads()
    try:
        if cfg.actor_train.num_threads:
            torch.set_num_threads(cfg.actor_train.num_threads)
        tracker = Tracker.open(output_dir, cfg, output_dir.name,
                               params=written_config(cfg, config_path),
                               mlflow_uri=default_mlflow_uri(output_dir, is_default),
                               progress_keys=PROGRESS_KEYS)
        train(tracker)
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        torch.set_num_threads(previous_threads)
        try:
            if tracker is not None:
                tracker.close({"finished": "FINISHED", "failed": "FAILED",
                               "interrupted": "KILLED"}[status])
        finally:
            write_status(output_dir, status)
            refresh_run_plots(output_dir, PANELS)
    print(f"done: metrics in {output_dir / 'metrics.jsonl'}, model in "
          f"{output_dir / f'checkpoint-{cfg.max_steps}'}", flush=True)
    return output_dir
