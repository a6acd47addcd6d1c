"""RLVR's rollout: prompts → groups of sampled responses → verifier rewards.

What a step of the loop (loop/step_loop.py) is made of in RLVR:
  1. batch        `rollout_batch_size` prompt groups: the prompts of each batch in the
                  order of the prompt stream (rlvr/domain_mix.py), cut into chunks that
                  actor_infer generates and the reward workers score (rlvr/generation.py)
  3. advantages   the loss masks first (max_len_mask, difficulty_mask: rlvr/sample_masks.py),
                  then GRPO / reinforce over the `num_return_sequences_in_group` responses
                  of each prompt (rlvr/train_batch.py)
  6. validate     the validation prompts, generated with validation.generating_args and
                  scored by the same rewards: `val/accuracy` is their mean score

Metrics beyond the loop's: `reward/*` (what the rewards said beside their scores),
`domain/*` by data tag, `rollout/uniform_*` (groups whose responses all scored alike).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path

from flywheel.config.derived import takes_image_inputs, takes_images
from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.data.image_prompts import ImageItem, ImagePromptEncoder
from flywheel.pipelines.data.prompt_data import (
    DataError,
    PromptEncoder,
    PromptOrder,
    PromptRecord,
    check_template_tags,
    load_prompts,
    prompt_encoder,
)
from flywheel.pipelines.data.qwen_vl_pieces import load_vl_processor
from flywheel.pipelines.loop.seams import Taken
from flywheel.pipelines.rlvr.domain_mix import DomainOrder, check_routing, training_order
from flywheel.pipelines.rlvr.generation import (
    Chunk,
    ChunkSource,
    Group,
    ScoringJob,
    batch_chunks,
    chunk_size,
    generate_chunks,
    group_from_dict,
    group_to_dict,
    sampling_params,
    submit_scoring,
)
from flywheel.pipelines.rlvr.metrics import (
    domain_reward_metrics,
    domain_val_metrics,
    partial_rollout_metrics,
    reward_info_metrics,
    uniform_group_metrics,
)
from flywheel.pipelines.rlvr.reward_health import RewardHealth
from flywheel.pipelines.rlvr.sample_masks import apply_sample_masks
from flywheel.pipelines.rlvr.train_batch import add_advantages, pack_groups
from flywheel.pipelines.roles.roles import Roles, streams
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.workers.batch import TokenBatch
from flywheel.workers.image_inputs import PromptImages, RowImages
from flywheel.workers.infer_worker import STREAM_CALLS
from flywheel.workers.strategies.registry import backends_with, strategy_spec


@dataclass
class PromptSets:
    train: list[PromptRecord]
    validation: list[PromptRecord]
    # data with images: the model's processor encodes the prompts (prompt_data.py)
    image_encoder: ImagePromptEncoder | None = None
    val_image_encoder: ImagePromptEncoder | None = None


def load_prompt_sets(cfg: PipelineConfig, tokenizer) -> PromptSets:
    """Before Ray starts: the prompts, encoded as actor_train's data_args say (validation's
    too); a record no reward takes, or in no domain, is refused here. The model's
    processor is loaded only for data with images."""
    train_args = cfg.actor_train.data_args
    processor = functools.cache(lambda: image_processor(cfg))
    loaded = load_prompts(train_args, "actor_train", tokenizer, cfg.prompt_length, processor)
    train = loaded.records
    validation, val_images = [], None
    if cfg.validation and cfg.eval_steps:
        val_args = dataclasses.replace(
            cfg.validation.data_args, template=train_args.template,
            system_prompt=train_args.system_prompt,
            chat_template_kwargs=train_args.chat_template_kwargs,
            tag_to_template=train_args.tag_to_template)
        loaded_val = load_prompts(val_args, "validation", tokenizer, cfg.prompt_length,
                                  processor)
        validation, val_images = loaded_val.records, loaded_val.image_encoder
    check_template_tags(train_args.tag_to_template, train + validation)
    check_routing(cfg, train, validation)
    return PromptSets(train, validation, loaded.image_encoder, val_images)


def image_processor(cfg: PipelineConfig):
    """The policy's processor, for data with images (loaded when a record has one), after
    checking that the run's backends take images."""
    if not takes_images(cfg):
        raise DataError("the data has images, which this run's backends cannot take: image "
                        "prompts need pipeline_type rlvr, actor_train (and reference) on "
                        f"hf_train without sequence_packing, actor_infer on "
                        f"{' or '.join(backends_with(takes_image_inputs, 'infer'))} and no critic")
    return load_vl_processor(resolve_pretrain(cfg.pretrain))


def start_rlvr(cfg: PipelineConfig, roles: Roles, tokenizer, prompts: PromptSets,
               model_path: str, log_dir: Path | None) -> RLVRRollout:
    """Its workers (actor_infer, rewards) are roles, already started."""
    return RLVRRollout(cfg, roles, tokenizer, prompts.train, prompts.validation,
                       image_encoder=prompts.image_encoder,
                       val_image_encoder=prompts.val_image_encoder)


def segment_tokens(cfg: PipelineConfig) -> int:
    """New tokens per generation request under partial rollout; 0: whole responses (also
    on a streaming backend, which continues running requests on new weights instead)."""
    if not cfg.partial_rollout or streams(cfg):
        return 0
    if cfg.partial_rollout_segment_tokens is not None:
        return cfg.partial_rollout_segment_tokens
    return max(1, cfg.actor_infer.generating_args.max_new_tokens // 4)


@dataclass
class RLVRRollout:
    cfg: PipelineConfig
    roles: Roles
    tokenizer: object
    train_records: list[PromptRecord]
    val_records: list[PromptRecord]
    drop_reasons: tuple[str, ...] = ()  # its groups are dropped only as stale or filtered
    # image data (issue 29): the processor encodes each batch's prompts, and their image
    # inputs travel with the requests and, per row, with the train batch
    image_encoder: ImagePromptEncoder | None = None
    val_image_encoder: ImagePromptEncoder | None = None
    order: PromptOrder | DomainOrder = field(init=False)  # prompts of each batch
    encoder: PromptEncoder = field(init=False)  # prompt -> ids, by actor_train's data_args
    health: RewardHealth = field(init=False)  # rewards that score nothing (reward_health.py)

    def __post_init__(self) -> None:
        self.order = training_order(self.train_records, self.cfg)
        self.encoder = prompt_encoder(self.tokenizer, self.cfg.actor_train.data_args)
        self.health = RewardHealth(self.cfg.rewards, self.cfg.reward_aggregation)

    @property
    def batch_groups(self) -> int:
        return self.cfg.rollout_batch_size

    def source(self) -> ChunkSource:
        cfg = self.cfg
        source = ChunkSource(self.roles.actor_infer, self.chunks_for_batch,
                             score=self.score, segment_tokens=segment_tokens(cfg))
        if streams(cfg):  # one call per group, as many as the engine decodes at once
            capacity = self.roles.actor_infer.stream_capacity()
            source.stream = True
            source.per_worker = max(1, min(STREAM_CALLS,
                                           capacity // cfg.num_return_sequences_in_group))
        return source

    def score(self, groups: list[Group]) -> ScoringJob:
        return submit_scoring(groups, self.roles.rewards, self.cfg.rewards, self.tokenizer,
                              self.cfg.reward_aggregation)

    def chunks_for_batch(self, batch_index: int) -> list[Chunk]:
        """The prompts of batch `batch_index`, cut into generation chunks (generator thread)."""
        cfg = self.cfg
        records = self.order.batch(batch_index, cfg.rollout_batch_size)
        sampling = sampling_params(cfg.actor_infer.generating_args,
                                   cfg.num_return_sequences_in_group, seed=0,
                                   expand=cfg.is_num_return_sequences_expand)
        size = chunk_size(cfg.rollout_batch_size, self.roles.actor_infer.world_size,
                          cfg.actor_infer.infer_batch_size, strategy_spec(
                              cfg.actor_infer.strategy_args.strategy_name).continuous_batching,
                          streams(cfg))
        ids, images = self.encode(records, self.image_encoder)
        return batch_chunks(batch_index, records, ids, sampling, size, cfg.seed, images)

    def pack(self, groups: list[Group]) -> TokenBatch:
        batch = pack_groups(groups, self.tokenizer.pad_token_id)
        if self.image_encoder is not None:  # each row with its prompt's image tensors
            inputs = [g.images if g.images is not None or not g.record.images
                      else self.encode([g.record], self.image_encoder)[1][0] for g in groups]
            batch.images = RowImages([i.features if i is not None else None
                                      for i, g in zip(inputs, groups) for _ in g.responses])
        return batch

    def add_advantages(self, batch: TokenBatch, kl_coef: float) -> dict[str, float]:
        group_size = self.cfg.num_return_sequences_in_group
        masked = apply_sample_masks(batch, self.cfg, group_size)  # before: whitening skips them
        return masked | add_advantages(batch, self.cfg, group_size, kl_coef)

    def step_metrics(self, taken: Taken[Group], step: int) -> dict[str, float]:
        self.health.check(taken, step)  # says, or stops, a reward that scores nothing
        metrics = (reward_info_metrics(taken) | domain_reward_metrics(taken.groups)
                   | uniform_group_metrics(taken.groups))
        if self.cfg.partial_rollout:  # RLVR only: agentic episodes run whole (agentic_checks)
            metrics |= partial_rollout_metrics(taken.groups, step)
        return metrics

    def validate(self) -> dict[str, float]:
        cfg = self.cfg
        records = self.val_records[: cfg.val_batch_size or None]
        gen_args = (cfg.validation.generating_args if cfg.validation
                    else cfg.actor_infer.generating_args)
        sampling = sampling_params(gen_args, 1, seed=cfg.seed)
        size = max(1, cfg.actor_infer.infer_batch_size)
        ids, images = self.encode(records, self.val_image_encoder)
        chunks = batch_chunks(0, records, ids, sampling, size, cfg.seed, images)
        # paused (the caller): every update sent has loaded, so no version to wait for
        groups = generate_chunks(self.roles.actor_infer, chunks, stream=streams(cfg))
        self.score(groups).finish()
        scores = [s for g in groups for s in g.scores]
        lengths = [len(r.token_ids) for g in groups for r in g.responses]
        return {"val/accuracy": sum(scores) / len(scores),
                "val/response_length": sum(lengths) / len(lengths),
                **domain_val_metrics(groups)}

    def encode(self, records: list[PromptRecord], images: ImagePromptEncoder | None = None
               ) -> tuple[list[list[int]], list[PromptImages | None] | None]:
        """Prompt ids, and with an image encoder each prompt's image inputs (processor
        output: image tokens expanded in the ids)."""
        if images is None:
            return [self.encoder(r.prompt, r.tag) for r in records], None
        encoded = [images(ImageItem(r.id, r.prompt, r.images)) for r in records]
        return [e.prompt_ids for e in encoded], [e.inputs() for e in encoded]

    def group_state(self, group: Group) -> dict:
        return group_to_dict(group)

    def group_from_state(self, state: dict) -> Group:
        return group_from_dict(state)
