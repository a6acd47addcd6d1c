"""`pipeline_type: sft`: supervised fine-tuning from a YAML, as `platform run` runs RL.

What a run does, in order:

1. Records from `actor_train.data_args` (and `validation.data_args`): prompt/answer pairs
   (prompt_key/answer_key, or ROLL's prompt/messages/response columns; a `query` column's
   text, where a record has it, follows the prompt after a newline, as ROLL's SFT builds the
   user turn), or chat messages whose last message is the assistant's reply (then no
   answer column is needed). Prompts
   are encoded exactly as the RL pipelines encode them (`prompt_data.PromptEncoder`: the
   template, system_prompt and chat_template_kwargs), responses as `reply <eos>`, so the
   tuned model meets the same layout when RL starts from it. Records longer than
   prompt_length / response_length (eos included), or than sequence_length together, are
   dropped and counted, or refused with `data_args.overlong_prompts: error`.
2. `max_steps` steps (or, with `training_args.num_train_epochs`, that many whole passes:
   epochs x records // records per step), each one optimizer step of `CrossEntropy`
   (sft/train.py: mean NLL over the response tokens) on per_device_train_batch_size x
   gradient_accumulation_steps x ranks records,
   through actor_train's strategy's `train_step` (the shared update loop: schedule,
   warmup, clipping, micro-batching). Records come in a seeded shuffled order, epoch after
   epoch (`prompt_data.PromptOrder`).
3. Every eval_steps and after the last step: `val/loss` (token-mean NLL of the validation
   responses) and `val/accuracy` (greedy decoding up to response_length tokens, cut at
   eos, equal to the response once whitespace is stripped).
4. Every save_steps and at the end: `checkpoint-<step>/`, an HF model folder with its
   tokenizer (atomic, platform/checkpoint.py), usable as an RL run's `pretrain`. With
   LoRA (`actor_train.model_args.lora_target`, as in RL: only the adapter trains) it holds
   `adapter/` and the tokenizer: `platform export` makes the merged model folder, or an RL
   run on the same pretrain continues the adapter (`model_args.adapter_name_or_path`).

Metrics go to the run's tracker (metrics.jsonl, the configured backends, the console
progress line), status.json and plots.png as for RL runs.

Where it trains (sft/trainers.py): hf_train in the driver (no Ray, no roles), on one
device (CUDA when present); deepspeed_train as Ray ranks of one process group on
actor_train's device_mapping (ZeRO), as RL's actor_train. The config checks
(config/checks/sft.py) refuse other backends and every RL-only key.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from flywheel.config.derived import data_parallel_size
from flywheel.config.persisted import written_config
from flywheel.config.schema import DataArgs, PipelineConfig
from flywheel.pipelines.data.data_files import warn_oversize
from flywheel.pipelines.data.prompt_data import (
    DataError,
    Prompt,
    PromptOrder,
    checked_messages,
    data_rows,
    prompt_encoder,
    record_columns,
)
from flywheel.pipelines.data.records import json_images
from flywheel.pipelines.run.metric_views import PANELS, PROGRESS_KEYS
from flywheel.pipelines.sft.greedy_eval import greedy_complete_ids
from flywheel.pipelines.sft.step_end import end_step
from flywheel.pipelines.sft.train import CrossEntropy
from flywheel.pipelines.sft.trainers import InProcess, OnRanks, start_trainer
from flywheel.platform.checkpoint import prune_checkpoints, writing_checkpoint
from flywheel.platform.models.text_tokens import content_ids, fits_bytes, text_bytes
from flywheel.platform.plots import refresh_run_plots
from flywheel.platform.run_status import write_status
from flywheel.platform.tracking import Tracker, default_mlflow_uri
from flywheel.workers.batch import TokenBatch, pack_sequences
from flywheel.workers.strategies.lora import save_adapter

log = logging.getLogger(__name__)
SFT_ADAPTER = "adapter"  # a LoRA run's checkpoint-<step>/adapter/


@dataclass
class SFTRecord:
    id: str
    prompt: Prompt  # text, or the chat messages before the reply
    response: str  # what the model learns to answer


@dataclass
class EncodedRecords:
    records: list[SFTRecord]  # those that fit prompt_length / response_length
    prompts: list[list[int]]
    responses: list[list[int]]  # reply tokens + eos

    def batch(self, rows: list[int], pad_id: int) -> TokenBatch:
        return pack_sequences([self.prompts[i] for i in rows],
                              [self.responses[i] for i in rows], pad_id)


def load_sft_records(args: DataArgs, role: str) -> list[SFTRecord]:
    """Every record of `args.file_name`; errors name the file and row."""
    oversize: list[str] = []
    rows = data_rows(args, role, oversize)
    columns = record_columns(args, role)
    records = []
    for where, row in rows:
        if json_images(row.get(columns.image), where):  # would train on the text alone
            raise DataError(f"{where}: column '{columns.image}' holds images; SFT trains "
                            f"on text only (image prompts run in RLVR)")
        records.append(parse_sft_record(row, where, columns.prompt, columns.answer,
                                        columns.prompt_is_messages, args.query))
    warn_oversize(log, oversize, args.max_record_bytes, role)
    records = records[: args.max_samples] if args.max_samples else records
    if not records:
        raise DataError(f"{role}.data_args.file_name: no records in {args.file_name}")
    return records


def parse_sft_record(row: dict, where: str, prompt_column: str, answer_column: str,
                     messages: bool, query_column: str | None = None) -> SFTRecord:
    if prompt_column not in row:
        raise DataError(f"{where}: no column '{prompt_column}' (columns: {', '.join(row)}); "
                        f"set data_args' prompt/messages columns")
    prompt = row[prompt_column]
    if messages and isinstance(prompt, str):
        try:
            prompt = json.loads(prompt)
        except json.JSONDecodeError:
            raise DataError(f"{where}: column '{prompt_column}' is neither a list of "
                            f"messages nor its JSON text") from None
    if not isinstance(prompt, str):
        prompt = checked_messages(prompt, where)
    query = row.get(query_column) if query_column else None
    if query and not isinstance(prompt, str):
        raise DataError(f"{where}: column '{query_column}' (data_args.query) follows a text "
                        f"prompt; column '{prompt_column}' holds chat messages")
    if query:  # ROLL's SFT user turn: prompt, newline, query (sft_pipeline.py)
        prompt = f"{prompt}\n{query}"
    rid = str(row.get("id", where.rsplit("/", 1)[-1]))
    if answer_column in row:
        return SFTRecord(rid, prompt, str(row[answer_column]))
    if isinstance(prompt, list) and prompt[-1]["role"] == "assistant" and len(prompt) > 1:
        return SFTRecord(rid, prompt[:-1], str(prompt[-1]["content"]))
    raise DataError(f"{where}: no column '{answer_column}', and the prompt is not chat "
                    f"messages ending with the assistant's reply")


def encode_sft_records(records: list[SFTRecord], args: DataArgs, role: str, tokenizer,
                       prompt_length: int, response_length: int,
                       sequence_length: int | None = None) -> EncodedRecords:
    """The records that fit prompt_length, response_length and (prompt and response
    together) sequence_length, encoded."""
    total = sequence_length if sequence_length is not None else prompt_length + response_length
    encode = prompt_encoder(tokenizer, args)
    kept = EncodedRecords([], [], [])
    prompt_bytes, response_bytes = (fits_bytes(tokenizer, prompt_length),
                                    fits_bytes(tokenizer, response_length))
    for record in records:
        if (text_bytes(record.prompt) > prompt_bytes
                or text_bytes(record.response) > response_bytes):  # over: not tokenized
            if args.overlong_prompts == "error":
                raise DataError(f"{role}: record {record.id} has more text than "
                                f"prompt_length={prompt_length} / response_length="
                                f"{response_length} tokens can hold "
                                f"(data_args.overlong_prompts: error)")
            continue
        prompt = encode(record.prompt)
        response = content_ids(tokenizer, record.response) + [tokenizer.eos_token_id]
        if (len(prompt) <= prompt_length and len(response) <= response_length
                and len(prompt) + len(response) <= total):
            kept.records.append(record)
            kept.prompts.append(prompt)
            kept.responses.append(response)
        elif args.overlong_prompts == "error":
            raise DataError(f"{role}: record {record.id} has {len(prompt)} prompt and "
                            f"{len(response)} response tokens (eos included), more than "
                            f"prompt_length={prompt_length} / response_length="
                            f"{response_length} / sequence_length={total} "
                            f"(data_args.overlong_prompts: error)")
    dropped = len(records) - len(kept.records)
    if dropped:
        log.warning("%s: dropped %d of %d records longer than prompt_length=%d / "
                    "response_length=%d / sequence_length=%d tokens", role, dropped,
                    len(records), prompt_length, response_length, total)
    if not kept.records:
        raise DataError(f"{role}: every record is longer than prompt_length / "
                        f"response_length")
    return kept


@torch.no_grad()
def validate(trainer: InProcess | OnRanks, tokenizer, val: EncodedRecords,
             max_new_tokens: int, batch_size: int) -> dict[str, float]:
    """val/loss (token-mean NLL of the responses) and val/accuracy (greedy exact match)."""
    batch = val.batch(list(range(len(val.records))), tokenizer.pad_token_id)
    logprobs = trainer.logprobs(batch)  # [B, L], aligned with response_mask
    mask = batch.response_mask
    loss = float(-(logprobs * mask).sum() / mask.sum())
    replies = greedy_complete_ids(trainer.model(), tokenizer, val.prompts, max_new_tokens,
                                  batch_size=batch_size)
    correct = sum(r.strip() == rec.response.strip() for r, rec in zip(replies, val.records))
    return {"val/loss": loss, "val/accuracy": correct / len(val.records)}


def save_checkpoint(output_dir: Path, step: int, trainer: InProcess | OnRanks, tokenizer,
                    keep: int | None) -> Path:
    """checkpoint-<step>/: the model and tokenizer as one HF folder (a `pretrain`); with
    LoRA the adapter (`adapter/`, a PEFT folder: an RL run's `adapter_name_or_path`, or
    `platform export` merges it into the run's pretrain) and the tokenizer."""
    with writing_checkpoint(output_dir, step, plots=PANELS) as tmp:
        if trainer.adapter is not None:
            save_adapter(trainer.adapter, str(tmp / SFT_ADAPTER))
        else:
            trainer.model().save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    prune_checkpoints(output_dir, keep)
    return output_dir / f"checkpoint-{step}"


def run_sft(cfg: PipelineConfig, output_dir: Path, is_default: bool, model_path: str,
            tokenizer, config_path: str | None = None) -> Path:
    """The SFT run into `output_dir`, which launch.run made (with config.yaml in it), from
    `model_path` (pretrain resolved); returns the run directory."""
    train_args = cfg.actor_train.data_args
    train = encode_sft_records(load_sft_records(train_args, "actor_train"), train_args,
                               "actor_train", tokenizer, cfg.prompt_length, cfg.response_length,
                               cfg.sequence_length)
    val = None
    if cfg.validation is not None:  # encoded as actor_train's records are
        val_args = cfg.validation.data_args
        records = load_sft_records(val_args, "validation")
        records = records[: cfg.val_batch_size] if cfg.val_batch_size else records
        val = encode_sft_records(records, train_args, "validation", tokenizer,
                                 cfg.prompt_length, cfg.response_length, cfg.sequence_length)
    steps = sft_steps(cfg, len(train.records))
    write_status(output_dir, "running", max_steps=steps, config=config_path)
    status, tracker = "failed", None
    threads = cfg.actor_train.num_threads
    previous_threads = torch.get_num_threads()
    try:
        if threads:
            torch.set_num_threads(threads)
        tracker = Tracker.open(output_dir, cfg, output_dir.name,
                               params=written_config(cfg, config_path),
                               mlflow_uri=default_mlflow_uri(output_dir, is_default),
                               progress_keys=PROGRESS_KEYS, total_steps=steps)
        train_loop(cfg, model_path, tokenizer, train, val, tracker, output_dir, steps)
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
          f"{output_dir / f'checkpoint-{steps}'}", flush=True)
    return output_dir


def rows_per_step(cfg: PipelineConfig) -> int:
    """Records per optimizer step: per_device_train_batch_size x gradient_accumulation_steps
    on each of actor_train's ranks (one on hf_train)."""
    args = cfg.actor_train.training_args
    return (args.per_device_train_batch_size * args.gradient_accumulation_steps
            * data_parallel_size(cfg.actor_train))


def sft_steps(cfg: PipelineConfig, records: int) -> int:
    """max_steps, or with num_train_epochs that many whole passes over `records` (ROLL's
    count: each epoch's last partial step is left out, as its DataLoader's drop_last)."""
    epochs = cfg.actor_train.training_args.num_train_epochs
    if not epochs:
        return cfg.max_steps
    steps = int(epochs * (records // rows_per_step(cfg)))
    if steps < 1:
        raise DataError(f"actor_train.training_args.num_train_epochs: {epochs} epoch(s) of "
                        f"{records} records make no step of {rows_per_step(cfg)} records "
                        f"(per_device_train_batch_size x gradient_accumulation_steps x ranks)")
    return steps


def train_loop(cfg: PipelineConfig, model_path: str, tokenizer, train: EncodedRecords,
               val: EncodedRecords | None, tracker: Tracker, output_dir: Path,
               steps: int) -> None:
    rows = rows_per_step(cfg)
    trainer = start_trainer(cfg, model_path, steps, output_dir)
    try:
        order = PromptOrder(list(range(len(train.records))), cfg.seed)
        objective = CrossEntropy()
        for step in range(1, steps + 1):
            start = time.perf_counter()
            batch = train.batch(order.batch(step - 1, rows), tokenizer.pad_token_id)
            metrics = trainer.train_step(batch, objective)
            metrics["sft/response_tokens"] = float(batch.response_mask.sum())
            metrics["sft/epoch"] = step * rows / len(train.records)
            metrics["time/step"] = time.perf_counter() - start
            end_step(cfg, step, steps, metrics, tracker, None if val is None else (
                lambda: validate(trainer, tokenizer, val, cfg.response_length,
                                 cfg.actor_train.infer_batch_size)),
                lambda step=step: save_checkpoint(output_dir, step, trainer, tokenizer,
                                                  cfg.save_total_limit))
    finally:
        trainer.close()
