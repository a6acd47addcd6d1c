"""Rollout for RLVR: prompts → sampled response groups → verifier scores.

A `Group` is one prompt and its `n` responses, stamped with the policy version that
generated them and a global sequence number `seq` (the prompt's position in the run's
prompt stream). It is the unit that flows from generation to reward to training, and the
unit that is trained, or dropped as stale or filtered.

Generation is cut into `Chunk`s of a few prompts; each chunk goes to one actor_infer
worker and has its own sampling seed derived from (run seed, batch, chunk), so the
responses depend only on the seed and the weights, never on timing. Scoring is submitted
per finished chunk (`submit_scoring`), so rewards overlap generation; a record goes to
the reward whose `tag_included` holds its tag (an empty list takes every tag).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import ray

from flywheel.pipelines.prompt_data import PromptRecord
from flywheel.platform.cluster import Cluster
from flywheel.platform.config.schema import GeneratingArgs, RewardConfig
from flywheel.workers.infer_worker import GenerateResult
from flywheel.workers.strategies.base import Generation, SamplingParams

SEED_STRIDE = 1_000_003  # keeps the sampling seeds of different runs apart


@dataclass
class Group:
    seq: int  # position of the prompt in the run's prompt stream
    record: PromptRecord
    prompt_ids: list[int]
    responses: list[Generation]
    version: int  # policy version that generated every response of this group
    scores: list[float] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    # What the replay buffer, ledger and step metrics read of any group (RLVR or agentic).
    @property
    def id(self) -> str:
        return self.record.id

    @property
    def num_samples(self) -> int:
        return len(self.responses)

    @property
    def num_tokens(self) -> int:
        """Generated tokens."""
        return sum(len(r.token_ids) for r in self.responses)


def group_to_dict(g: Group) -> dict:
    return asdict(g)


def group_from_dict(d: dict) -> Group:
    """Inverse of group_to_dict (checkpoints keep the buffer's finished groups as JSON)."""
    return Group(**{**d, "record": PromptRecord(**d["record"]),
                    "responses": [Generation(**r) for r in d["responses"]]})


@dataclass
class Chunk:
    batch_index: int  # the (0-based) training step these prompts were drawn for
    first_seq: int
    records: list[PromptRecord]
    prompt_ids: list[list[int]]
    sampling: SamplingParams

    @property
    def end_seq(self) -> int:
        return self.first_seq + len(self.records)

    @property
    def num_groups(self) -> int:
        return len(self.records)

    def describe(self) -> str:
        return f"prompts {self.first_seq}..{self.end_seq - 1} of batch {self.batch_index}"


def sampling_params(args: GeneratingArgs, n: int, seed: int) -> SamplingParams:
    return SamplingParams(
        max_new_tokens=args.max_new_tokens, n=n, temperature=args.temperature,
        top_p=args.top_p, top_k=args.top_k, do_sample=args.do_sample, seed=seed,
    )


def chunk_size(batch_prompts: int, infer_workers: int, infer_batch_size: int) -> int:
    """Prompts per generation request: at least two requests per worker per batch, so
    scoring of the first overlaps generation of the next, capped by infer_batch_size."""
    return max(1, min(infer_batch_size, batch_prompts // (2 * infer_workers)))


def batch_chunks(batch_index: int, records: list[PromptRecord], prompt_ids: list[list[int]],
                 sampling: SamplingParams, size: int, run_seed: int) -> list[Chunk]:
    """Cut one batch of prompts into chunks, each with its own deterministic seed."""
    first = batch_index * len(records)
    chunks = []
    for c, start in enumerate(range(0, len(records), size)):
        seed = run_seed * SEED_STRIDE + batch_index * 1009 + c
        chunks.append(Chunk(batch_index, first + start, records[start:start + size],
                            prompt_ids[start:start + size], replace(sampling, seed=seed)))
    return chunks


def groups_from_result(chunk: Chunk, result: GenerateResult) -> list[Group]:
    by_prompt: list[list[Generation]] = [[] for _ in chunk.records]
    for g in result.generations:
        by_prompt[g.prompt_index].append(g)
    return [Group(chunk.first_seq + i, rec, ids, by_prompt[i], result.version)
            for i, (rec, ids) in enumerate(zip(chunk.records, chunk.prompt_ids))]


def generate_chunks(actor_infer: Cluster, chunks: list[Chunk]) -> list[Group]:
    """Run chunks round-robin over actor_infer workers and wait for all of them."""
    refs = [(i % actor_infer.world_size,
             actor_infer.submit_one(i % actor_infer.world_size, "generate", c.prompt_ids,
                                    c.sampling)) for i, c in enumerate(chunks)]
    groups: list[Group] = []
    for chunk, (rank, ref) in zip(chunks, refs):
        groups.extend(groups_from_result(chunk, actor_infer.get(ref, rank)))
    return groups


def route_rewards(groups: list[Group], rewards: dict[str, RewardConfig]) -> dict[str, list[int]]:
    """Reward name → indices of the groups it scores; every group gets exactly one."""
    routes: dict[str, list[int]] = {name: [] for name in rewards}
    for gi, group in enumerate(groups):
        for name, rcfg in rewards.items():
            if not rcfg.tag_included or group.record.tag in rcfg.tag_included:
                routes[name].append(gi)
                break
        else:
            raise ValueError(f"record {group.record.id}: no reward takes tag "
                             f"'{group.record.tag}' (check rewards.*.tag_included)")
    return routes


@dataclass
class ScoringJob:
    """Reward calls in flight for some groups; `finish` writes the scores back."""

    groups: list[Group]
    parts: list[tuple[Cluster, int, ray.ObjectRef, list[int]]]  # cluster, rank, ref, groups

    @property
    def refs(self) -> list[ray.ObjectRef]:
        return [ref for _, _, ref, _ in self.parts]

    def finish(self) -> list[Group]:
        for cluster, rank, ref, indices in self.parts:
            results = iter(cluster.get(ref, rank))
            for gi in indices:
                self.groups[gi].scores = [next(results).score for _ in self.groups[gi].texts]
        return self.groups


@dataclass
class Completion:
    """What a finished work item became (see prefetch.RolloutSource)."""

    scoring: ScoringJob  # its groups, scoring in flight (no parts: already scored)
    busy: list[tuple[int, float, float]]  # actor_infer (rank, start, end) it used
    dropped: dict[str, list] = field(default_factory=dict)  # reason -> groups not kept


def submit_scoring(groups: list[Group], reward_clusters: dict[str, Cluster],
                   reward_cfgs: dict[str, RewardConfig], tokenizer) -> ScoringJob:
    """Decode responses and send them to the reward workers without waiting."""
    for group in groups:
        group.texts = [tokenizer.decode(g.token_ids, skip_special_tokens=True)
                       for g in group.responses]
    parts = []
    for name, indices in route_rewards(groups, reward_cfgs).items():
        cluster = reward_clusters[name]
        for rank in range(cluster.world_size):
            mine = indices[rank::cluster.world_size]
            if mine:
                items = [(groups[gi].record.prompt, text, groups[gi].record.answer)
                         for gi in mine for text in groups[gi].texts]
                parts.append((cluster, rank, cluster.submit_one(rank, "score", items), mine))
    return ScoringJob(groups, parts)


@dataclass
class ChunkSource:
    """RLVR's RolloutSource (prefetch.py): chunks of prompts, generated by actor_infer
    itself (so weight updates are ordered by the single caller), scored by reward workers."""

    pool: Cluster  # actor_infer
    make_chunks: Callable[[int], list[Chunk]]  # batch index -> its chunks
    score: Callable[[list[Group]], ScoringJob]  # groups -> scoring job in flight
    waits_for_weights: bool = False

    def items(self, batch_index: int) -> list[Chunk]:
        return self.make_chunks(batch_index)

    def submit(self, item: Chunk, rank: int) -> ray.ObjectRef:
        return self.pool.submit_one(rank, "generate", item.prompt_ids, item.sampling)

    def complete(self, item: Chunk, rank: int, result: GenerateResult) -> Completion:
        groups = groups_from_result(item, result)
        return Completion(self.score(groups), [(rank, result.started, result.finished)])
