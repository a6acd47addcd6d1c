"""`pipeline_type: distill`: offline distillation (ROLL's distill pipeline), a student
trained on a teacher's next-token distributions over fixed records, on the shared update
loop.

What a run does, in order:

1. Records from `actor_train.data_args` (and `validation.data_args`), read and encoded as
   SFT reads them (pipelines/sft/run.py: prompt/answer columns or chat messages, the
   template, overlong records dropped or refused). The loss positions of each record are
   its response tokens, or every token after the first with `distill_on_prompt`.
2. The teacher (`teacher.<name>.model_args`), frozen in this process beside the student:
   its top-k log-probs at every loss position (`logits_topk`, at temperature
   kd_temperature × teacher_temperature), computed for each batch, or cached to disk in
   chunks (`teacher_logits_cache`: pipelines/distill/teacher_topk.py).
3. `max_steps` steps (or `num_train_epochs` whole passes), each one optimizer step of
   (1 − w)·SFT + w·D(teacher ‖ student) (`distill_loss_weight`, `kd_objective`,
   `kd_support`: offline_objective.py) through actor_train's `train_step` with the top-k
   head (workers/strategies/topk_head.py), on per_device_train_batch_size ×
   gradient_accumulation_steps records in a seeded shuffled order, epoch after epoch.
4. Every eval_steps and after the last step: on the validation records, `val/loss` (the
   SFT NLL), `val/distill/divergence` (to the teacher's top-k) and `val/accuracy` (greedy
   decoding equal to the record's response, as SFT's).
5. Every save_steps and at the end: `checkpoint-<step>/`, an HF model folder (a pretrain).

Metrics: distill/loss, distill/sft_loss, distill/divergence (token means of the step),
distill/epoch, distill/teacher_chunks_computed / _read (the cache at work), actor/*.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import torch

from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.data.prompt_data import PromptOrder
from flywheel.pipelines.distill.offline_objective import DistillObjective
from flywheel.pipelines.distill.teacher_topk import TeacherTopK, attach_topk, load_teacher
from flywheel.pipelines.dpo.run import run_in_process
from flywheel.pipelines.sft.greedy_eval import greedy_complete_ids
from flywheel.pipelines.sft.run import (
    EncodedRecords,
    encode_sft_records,
    load_sft_records,
    rows_per_step,
    save_checkpoint,
    sft_steps,
)
from flywheel.pipelines.sft.trainers import InProcess
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.platform.tracking import Tracker
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.hf_model import pick_device
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.topk_head import TopKHead
from flywheel.workers.strategies.train_loop import Counts

log = logging.getLogger(__name__)




@dataclasses.dataclass
class DistillRecords:
    """Encoded records and the loss positions of each (step 1 of the module docstring)."""

    encoded: EncodedRecords
    positions: list[list[int]]  # per record, the columns whose token the loss reads

    @property
    def rows(self) -> list[list[int]]:
        return [p + r for p, r in zip(self.encoded.prompts, self.encoded.responses)]

    def batch(self, records: list[int], pad_id: int, teacher: TeacherTopK) -> TokenBatch:
        """The records' rows with the loss mask on their positions and the teacher's top-k
        attached (`attach_topk`)."""
        batch = self.encoded.batch(records, pad_id)
        mask = torch.zeros_like(batch.response_mask)
        for r, i in enumerate(records):
            mask[r, self.positions[i]] = 1.0
        batch.response_mask = mask
        attach_topk(batch, teacher.of(records), [self.positions[i] for i in records],
                    teacher.k)
        return batch


def loss_positions(encoded: EncodedRecords, on_prompt: bool) -> list[list[int]]:
    return [list(range(1 if on_prompt else len(p), len(p) + len(r)))
            for p, r in zip(encoded.prompts, encoded.responses)]


def load_records(cfg: PipelineConfig, role: str, tokenizer) -> DistillRecords:
    """SFT's records (validation ones encoded as actor_train's are)."""
    args = cfg.actor_train.data_args if role == "actor_train" else cfg.validation.data_args
    records = load_sft_records(args, role)
    if role == "validation" and cfg.val_batch_size:
        records = records[: cfg.val_batch_size]
    encoded = encode_sft_records(records, cfg.actor_train.data_args, role, tokenizer,
                                 cfg.prompt_length, cfg.response_length, cfg.sequence_length)
    return DistillRecords(encoded, loss_positions(encoded, cfg.distill_on_prompt))


def start_teacher(cfg: PipelineConfig, records: DistillRecords, pad_id: int,
                  cache_subdir: str) -> TeacherTopK:
    (teacher,) = cfg.teacher.values()
    cache = (Path(cfg.teacher_logits_cache) / cache_subdir
             if cfg.teacher_logits_cache else None)
    path = resolve_pretrain(teacher.model_args.model_name_or_path)
    return TeacherTopK(load_teacher(path, teacher.model_args, pick_device()), path,
                       teacher.model_args, records.rows, records.positions,
                       cfg.logits_topk, cfg.kd_temperature * cfg.teacher_temperature, pad_id,
                       teacher.infer_batch_size, cache,
                       cfg.teacher_cache_chunk_rows)


@torch.no_grad()
def validate(strategy: HFTrainStrategy, tokenizer, val: DistillRecords, teacher: TeacherTopK,
             objective: DistillObjective, max_new_tokens: int) -> dict[str, float]:
    """val/loss, val/distill/divergence (token means) and val/accuracy (greedy)."""
    nll = div = tokens = 0.0
    rows = list(range(len(val.positions)))
    for start in range(0, len(rows), strategy.cfg.infer_batch_size):
        batch = val.batch(rows[start:start + strategy.cfg.infer_batch_size],
                          tokenizer.pad_token_id, teacher).trimmed()
        outputs, _ = strategy.head.hf_outputs(strategy.model, batch, False)  # [b, L, 1+k]
        n = float(batch.response_mask.sum())
        pure = dataclasses.replace(objective, distill_loss_weight=1.0)
        _, metrics = pure(outputs.cpu(), None, batch, Counts(n, float(len(batch))))
        nll += -float((outputs[..., 0].cpu() * batch.response_mask).sum())
        div += metrics["distill/divergence"] * n
        tokens += n
    replies = greedy_complete_ids(strategy.model, tokenizer, val.encoded.prompts,
                                  max_new_tokens, batch_size=strategy.cfg.infer_batch_size)
    correct = sum(r.strip() == rec.response.strip()
                  for r, rec in zip(replies, val.encoded.records))
    return {"val/loss": nll / tokens, "val/distill/divergence": div / tokens,
            "val/accuracy": correct / len(val.positions)}


def train_loop(cfg: PipelineConfig, model_path: str, tokenizer, train: DistillRecords,
               val: DistillRecords | None, tracker: Tracker, output_dir: Path) -> None:
    steps = sft_steps(cfg, len(train.positions))
    rows = rows_per_step(cfg)
    pad = tokenizer.pad_token_id
    strategy = HFTrainStrategy(model_path, cfg.actor_train, cfg.seed, total_steps=steps,
                               head=TopKHead("policy", kd_temperature=cfg.kd_temperature))
    teacher = start_teacher(cfg, train, pad, "train")
    val_teacher = None  # the same teacher model, the validation records' own cache
    if val is not None:
        val_cache = teacher.cache_dir.parent / "validation" if teacher.cache_dir else None
        val_teacher = dataclasses.replace(teacher, rows=val.rows, positions=val.positions,
                                          cache_dir=val_cache)
    objective = DistillObjective.of(cfg)
    order = PromptOrder(list(range(len(train.positions))), cfg.seed)
    for step in range(1, steps + 1):
        start = time.perf_counter()
        computed, read = teacher.computed_chunks, teacher.read_chunks
        batch = train.batch(order.batch(step - 1, rows), pad, teacher)
        teacher_s = time.perf_counter() - start
        metrics = strategy.train_step(batch, objective)
        metrics["distill/epoch"] = step * rows / len(train.positions)
        if teacher.folder is not None:
            metrics["distill/teacher_chunks_computed"] = float(teacher.computed_chunks - computed)
            metrics["distill/teacher_chunks_read"] = float(teacher.read_chunks - read)
        metrics["time/teacher"] = teacher_s
        metrics["time/step"] = time.perf_counter() - start
        last = step == steps
        if val_teacher is not None and (step % cfg.eval_steps == 0 or last):
            metrics.update(validate(strategy, tokenizer, val, val_teacher, objective,
                                    cfg.response_length))
        tracker.log(step, metrics)
        if last or (cfg.save_steps and step % cfg.save_steps == 0):
            save_checkpoint(output_dir, step, InProcess(strategy), tokenizer,
                            cfg.save_total_limit)


def run_offline_distill(cfg: PipelineConfig, output_dir: Path, is_default: bool,
                        model_path: str, tokenizer, config_path: str | None = None) -> Path:
    """The run into `output_dir` (launch.run made it, config.yaml in it), from `model_path`
    (pretrain resolved); returns the run directory."""
    train = load_records(cfg, "actor_train", tokenizer)
    val = load_records(cfg, "validation", tokenizer) if cfg.validation is not None else None
    steps = sft_steps(cfg, len(train.positions))
    cfg = dataclasses.replace(cfg, max_steps=steps)  # the status line counts the epochs' steps
    return run_in_process(cfg, output_dir, is_default, config_path, lambda tracker: train_loop(
        cfg, model_path, tokenizer, train, val, tracker, output_dir))
