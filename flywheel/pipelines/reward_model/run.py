"""`pipeline_type: reward_model`: a scalar-head reward model trained on preference pairs.

The pairs are DPO's (pipelines/dpo/pair_data.py: a prompt, `chosen_key`, `rejected_key`;
the same bad-pair rules, with `sequence_length` bounding each rendered response). What a
run does:

1. Each (prompt, response) is rendered as the reward role renders it when it scores
   (workers/rewards/reward_model.py `render_ids`: the model's own chat template, the
   conversation [user: prompt, assistant: response], the response's special-token text
   kept text; no template: bos + prompt + response), so the trained model meets at
   scoring time exactly the tokens it was trained on. A row is those ids and one read
   position after them (`BradleyTerryObjective`): the score is the head at the last
   token, where `*ForSequenceClassification` reads it.
2. `max_steps` steps of the Bradley-Terry loss (algorithms/preference/bradley_terry.py;
   with `margin_key`, each pair's margin from its record, as the `pair_margin` extra) on
   per_device_train_batch_size x gradient_accumulation_steps pairs, through the shared
   update loop on the value head (a `*ForTokenClassification` model with one label: the
   critic's head, no dropout) without its score bias (a sequence-classification head has
   none; `reward_model_strategy`).
3. Every eval_steps and at the end: `val/rm/accuracy` (held-out pairs ordered right),
   `val/rm/loss`, `val/rm/score_margin`.
4. Every save_steps and at the end: `checkpoint-<step>/`, an HF `*ForSequenceClassification`
   folder (num_labels 1, its pad token set) with its tokenizer: `reward_type: reward_model`
   with `model_args.model_name_or_path` on it loads it as is.

In process, on hf_train, one device, without LoRA (config/checks/preference.py).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from flywheel.algorithms.preference.pair_logprobs import PAIR_EXTRA, pair_layout
from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.data.prompt_data import DataError, PromptOrder
from flywheel.pipelines.dpo.pair_data import PairCounts, PairRecord, load_pairs
from flywheel.pipelines.dpo.run import pair_worker_config, run_in_process, sequence_limit
from flywheel.pipelines.run.metric_views import PANELS
from flywheel.pipelines.sft.step_end import end_step
from flywheel.platform.checkpoint import prune_checkpoints, writing_checkpoint
from flywheel.platform.tracking import Tracker
from flywheel.workers.batch import TokenBatch, pack_sequences
from flywheel.workers.pair_objective import MARGIN_EXTRA, BradleyTerryObjective
from flywheel.workers.rewards.reward_model import render_ids
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.model_head import VALUE
from flywheel.workers.strategies.train_loop import local_counts

log = logging.getLogger(__name__)


@dataclass
class RenderedPairs:
    records: list[PairRecord]
    chosen: list[list[int]]  # the rendered (prompt, response) ids
    rejected: list[list[int]]
    counts: PairCounts

    def __len__(self) -> int:
        return len(self.records)

    def batch(self, pairs: list[int], pad_id: int) -> TokenBatch:
        """The pair layout (chosen at 2i, rejected at 2i + 1); each row its ids and one
        read position (a pad id), the row's only response token."""
        rows = [ids for i in pairs for ids in (self.chosen[i], self.rejected[i])]
        batch = pack_sequences(rows, [[pad_id]] * len(rows), pad_id)
        batch.attach(PAIR_EXTRA, pair_layout(pairs), per="sample")
        margins = [self.records[i].margin for i in pairs for _ in range(2)]
        batch.attach(MARGIN_EXTRA, torch.tensor(margins), per="sample")
        return batch


def render_pairs(records: list[PairRecord], role: str, tokenizer, sequence_length: int,
                 overlong: str, equal: str) -> RenderedPairs:
    """Rendered as the reward role renders; over sequence_length: dropped, cut from the
    right (as the scorer's max_length cuts), or refused; equal sides dropped or refused."""
    counts = PairCounts(records=len(records))
    kept = RenderedPairs([], [], [], counts)
    for record in records:
        sides = [render_ids(tokenizer, record.prompt, r)
                 for r in (record.chosen, record.rejected)]
        longest = max(len(s) for s in sides)
        if longest > sequence_length:
            if overlong == "error":
                raise DataError(f"{record.where}: a rendered response of {longest} tokens, "
                                f"more than sequence_length={sequence_length} "
                                f"(overlong_pairs: error)")
            if overlong == "drop":
                counts.note("dropped_overlong", record.where)
                continue
            sides = [s[:sequence_length] for s in sides]
            counts.note("truncated", record.where)
        if sides[0] == sides[1]:
            if equal == "error":
                raise DataError(f"{record.where}: chosen and rejected render the same tokens"
                                f"; there is nothing to prefer (equal_pairs: drop skips it)")
            counts.note("dropped_equal", record.where)
            continue
        kept.records.append(record)
        kept.chosen.append(sides[0])
        kept.rejected.append(sides[1])
    for reason, where in counts.first.items():
        log.warning("%s: %s %d of %d pairs (first at %s)", role, reason.replace("_", " "),
                    getattr(counts, reason), len(records), where)
    if not kept.records:
        raise DataError(f"{role}: no pair is left to train on of {len(records)}")
    return kept


def load(cfg: PipelineConfig, role: str, tokenizer) -> RenderedPairs:
    args = cfg.actor_train.data_args if role == "actor_train" else cfg.validation.data_args
    records = load_pairs(args, role, cfg.chosen_key, cfg.rejected_key, cfg.margin_key)
    if role == "validation" and cfg.val_batch_size:
        records = records[: cfg.val_batch_size]
    return render_pairs(records, role, tokenizer, sequence_limit(cfg), cfg.overlong_pairs,
                        cfg.equal_pairs)


@torch.no_grad()
def validate(strategy: HFTrainStrategy, tokenizer, val: RenderedPairs) -> dict[str, float]:
    batch = val.batch(list(range(len(val))), tokenizer.pad_token_id)
    _, metrics = BradleyTerryObjective()(strategy.forward(batch), None, batch,
                                         local_counts(batch))
    return {f"val/{k}": v for k, v in metrics.items()}


def save_reward_model(output_dir: Path, step: int, strategy: HFTrainStrategy, tokenizer,
                      keep: int | None) -> Path:
    """checkpoint-<step>/ as a `*ForSequenceClassification` folder (module docstring, 4)."""
    model = strategy.model
    if model.score.bias is not None:
        raise RuntimeError("reward_model: a score head with a bias (reward_model_strategy "
                           "removes it)")
    model.config.pad_token_id = (tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                                 else tokenizer.eos_token_id)
    with writing_checkpoint(output_dir, step, plots=PANELS) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        # save_pretrained names the class it saved; the same weights load as this one
        config = json.loads((tmp / "config.json").read_text())
        config["architectures"] = [type(model).__name__.replace(
            "ForTokenClassification", "ForSequenceClassification")]
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    prune_checkpoints(output_dir, keep)
    return output_dir / f"checkpoint-{step}"


def reward_model_strategy(cfg: PipelineConfig, model_path: str) -> HFTrainStrategy:
    """actor_train on the value head, its score bias removed: Bradley-Terry's gradient on
    it is 0 only up to rounding, which AdamW's normalised step would turn into moves of
    the learning rate's size, and a sequence-classification head has no bias."""
    strategy = HFTrainStrategy(model_path, pair_worker_config(cfg), cfg.seed,
                               total_steps=cfg.max_steps, head=VALUE)
    strategy.model.score.register_parameter("bias", None)  # AdamW skips it: no grad
    return strategy


def train_loop(cfg: PipelineConfig, model_path: str, tokenizer, train: RenderedPairs,
               val: RenderedPairs | None, tracker: Tracker, output_dir: Path) -> None:
    args = cfg.actor_train.training_args
    pairs_per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
    strategy = reward_model_strategy(cfg, model_path)
    order = PromptOrder(list(range(len(train))), cfg.seed)
    objective = BradleyTerryObjective()
    for step in range(1, cfg.max_steps + 1):
        start = time.perf_counter()
        batch = train.batch(order.batch(step - 1, pairs_per_step), tokenizer.pad_token_id)
        metrics = strategy.train_step(batch, objective)
        if step == 1:
            metrics |= train.counts.metrics("rm")
        metrics["rm/epoch"] = step * pairs_per_step / len(train)
        metrics["time/step"] = time.perf_counter() - start
        end_step(cfg, step, cfg.max_steps, metrics, tracker,
                 None if val is None else (lambda: validate(strategy, tokenizer, val)),
                 lambda step=step: save_reward_model(output_dir, step, strategy, tokenizer,
                                                     cfg.save_total_limit))


def run_reward_model(cfg: PipelineConfig, output_dir: Path, is_default: bool,
                     model_path: str, tokenizer, config_path: str | None = None) -> Path:
    """The reward-model run into `output_dir` (launch.run made it), from `model_path`."""
    train = load(cfg, "actor_train", tokenizer)
    val = load(cfg, "validation", tokenizer) if cfg.validation is not None else None
    return run_in_process(cfg, output_dir, is_default, config_path, lambda tracker: train_loop(
        cfg, model_path, tokenizer, train, val, tracker, output_dir))
