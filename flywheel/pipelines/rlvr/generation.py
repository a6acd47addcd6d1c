"""Rollout for RLVR: prompts → sampled response groups → verifier scores.

A `Group` is one prompt and its `n` responses, stamped with the policy version that
started them and a global sequence number `seq` (the prompt's position in the run's
prompt stream). It is the unit that flows from generation to reward to training, and the
unit that is trained, or dropped as stale or filtered.

Generation is cut into `Chunk`s of a few prompts; each chunk goes to one actor_infer
worker and has its own sampling seed derived from (run seed, batch, chunk), so the
responses depend only on the seed and the weights, never on timing. Scoring is submitted
per finished chunk (`submit_scoring`), so rewards overlap generation; a record goes to
the rewards whose `tag_included` holds its tag, combined by `reward_aggregation`
(rlvr/reward_routing.py).

Partial rollout (`partial_rollout: true`), after Kimi k1.5's partial rollouts (arXiv
2501.12599, sec. 2.6.2): a chunk's request generates at most `segment_tokens` new tokens;
each response that neither stopped nor reached max_new_tokens goes back out as a prompt of
its own (prompt + its tokens so far) in a `PartialChunk`, the chunk's next work item. The
prefetch thread sends it after any weight update published meanwhile, so a long response
is paused, the weights swapped, and it continues on the newest policy; each token records
the version that sampled it (`Generation.token_versions`) next to its log-prob, and the
group keeps the version of its first segment, which the staleness bound reads. Only
`generate` is used, so every backend supports it; the price is one prefill per segment.
A streaming backend (vllm) needs no segments: its requests run whole, a weight update
loads between two engine steps while they run, and they continue on the new weights with
their KV cache kept (workers/strategies/vllm_engine_loop.py), each token stamped with
its version by the engine.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import ray

from flywheel.config.schema import GeneratingArgs, RewardConfig
from flywheel.pipelines.data.prompt_data import PromptRecord, prompt_messages, reward_prompt
from flywheel.pipelines.loop.seams import Completion
from flywheel.pipelines.rlvr.reward_health import UNSCORED, why_unscored
from flywheel.pipelines.rlvr.reward_routing import merged_metadata, route_rewards
from flywheel.pipelines.roles.handles import InferRole, RewardRole
from flywheel.platform.cluster import Cluster
from flywheel.workers.image_inputs import PromptImages
from flywheel.workers.infer_worker import GenerateResult
from flywheel.workers.rewards.registry import Sample
from flywheel.workers.rewards.response_length import response_length_reward
from flywheel.workers.rewards.result import RewardResult
from flywheel.workers.strategies.base import Generation, SamplingParams

log = logging.getLogger(__name__)

SEED_STRIDE = 1_000_003  # keeps the sampling seeds of different runs apart


@dataclass
class Group:
    seq: int  # position of the prompt in the run's prompt stream
    record: PromptRecord
    prompt_ids: list[int]
    responses: list[Generation]
    version: int  # policy version that started every response (their first token's)
    scores: list[float] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    # Per response, what its reward said beside the score (RewardResult.metadata:
    # timed_out, crashed, parsed, ...), counted in the reward/* metrics.
    reward_info: list[dict] = field(default_factory=list)
    # An image prompt's inputs (workers/image_inputs.py), which the train batch carries;
    # not checkpointed (tensors and images): a restored group's are encoded again from its
    # record (RLVRRollout.pack)
    images: PromptImages | None = None
    # On-policy distillation: per teacher that scored this group, each response's teacher
    # log-probs of its tokens (pipelines/distill/teacher_scoring.py)
    teacher_log_probs: dict[str, list[list[float]]] = field(default_factory=dict)

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
    return asdict(replace(g, images=None))


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
    # per prompt its image inputs (image prompts), or None for a text batch
    images: list[PromptImages | None] | None = None

    @property
    def end_seq(self) -> int:
        return self.first_seq + len(self.records)

    @property
    def num_groups(self) -> int:
        return len(self.records)

    def describe(self) -> str:
        return f"prompts {self.first_seq}..{self.end_seq - 1} of batch {self.batch_index}"


def sampling_params(args: GeneratingArgs, n: int, seed: int,
                    expand: bool = False) -> SamplingParams:
    """Every sampling key of `args` (num_beams and num_return_sequences are checked by the
    config: n comes from the caller); `expand` is is_num_return_sequences_expand."""
    return SamplingParams(
        max_new_tokens=args.max_new_tokens, n=n, temperature=args.temperature,
        top_p=args.top_p, top_k=args.top_k, do_sample=args.do_sample, seed=seed,
        repetition_penalty=args.repetition_penalty, stop_strings=list(args.stop_strings or []),
        expand=expand,
    )


def chunk_size(batch_prompts: int, infer_workers: int, infer_batch_size: int,
               continuous_batching: bool = False, streams: bool = False) -> int:
    """Prompts per generation request, capped by infer_batch_size.

    A streaming engine (vllm) gets one prompt group per request: its requests share one
    engine batch whatever their number, and each group is scored as soon as it is done.

    A static-batching engine (hf_infer) gets at least two requests per worker per batch, so
    scoring the first overlaps generating the next. An engine that batches continuously
    (vllm, sglang) gets the batch's prompts in one request per worker: cut in two, its two
    halves run one after the other on the worker, each decoding half as many sequences
    per engine step for about the same cost per step (on SmolLM2 with 2 prompts x 8
    samples, generation ran at ~0.7 of raw vLLM that way: bench/bench_smollm2_async.py).
    """
    if streams:
        return 1
    per_worker = -(-batch_prompts // infer_workers)
    if not continuous_batching:
        per_worker = batch_prompts // (2 * infer_workers)
    return max(1, min(infer_batch_size, per_worker))


def batch_chunks(batch_index: int, records: list[PromptRecord], prompt_ids: list[list[int]],
                 sampling: SamplingParams, size: int, run_seed: int,
                 images: list[PromptImages | None] | None = None) -> list[Chunk]:
    """Cut one batch of prompts into chunks, each with its own deterministic seed."""
    first = batch_index * len(records)
    chunks = []
    for c, start in enumerate(range(0, len(records), size)):
        seed = run_seed * SEED_STRIDE + batch_index * 1009 + c
        chunks.append(Chunk(batch_index, first + start, records[start:start + size],
                            prompt_ids[start:start + size], replace(sampling, seed=seed),
                            images[start:start + size] if images is not None else None))
    return chunks


def groups_from_result(chunk: Chunk, generations: list[Generation],
                       version: int) -> list[Group]:
    by_prompt: list[list[Generation]] = [[] for _ in chunk.records]
    for g in generations:
        by_prompt[g.prompt_index].append(g)
    return [Group(chunk.first_seq + i, rec, ids, by_prompt[i], version,
                  images=chunk.images[i] if chunk.images is not None else None)
            for i, (rec, ids) in enumerate(zip(chunk.records, chunk.prompt_ids))]


def generate_chunks(actor_infer: InferRole, chunks: list[Chunk],
                    stream: bool = False) -> list[Group]:
    """Run chunks round-robin over actor_infer workers and wait for all of them.

    `stream` (a backend that streams, with no weight update in flight: the caller holds
    the generator paused): every chunk goes to its engine at once and they share its
    batch. Otherwise a worker runs its chunks one after another."""
    def submit(rank: int, chunk: Chunk) -> ray.ObjectRef:
        extra = {"images": chunk.images} if chunk.images is not None else {}  # text: as before
        if stream:
            return actor_infer.generate_stream(rank, chunk.prompt_ids, chunk.sampling,
                                               min_version=0, **extra)
        return actor_infer.generate(rank, chunk.prompt_ids, chunk.sampling, **extra)

    refs = [(i % actor_infer.world_size, submit(i % actor_infer.world_size, c))
            for i, c in enumerate(chunks)]
    groups: list[Group] = []
    for chunk, (rank, ref) in zip(chunks, refs):
        result = actor_infer.get(ref, rank)
        groups.extend(groups_from_result(chunk, result.generations, result.version))
    return groups


# ---- partial rollout: a chunk generated in segments -------------------------------------
@dataclass
class PartialChunk:
    """A chunk part-way through its segments: the work item that continues it."""

    chunk: Chunk
    responses: list[Generation]  # every response of the chunk so far, grouped by prompt
    version: int  # weights of the first segment: the groups' start version
    segments: int  # requests run so far

    @property
    def batch_index(self) -> int:
        return self.chunk.batch_index

    @property
    def first_seq(self) -> int:
        return self.chunk.first_seq

    @property
    def num_groups(self) -> int:
        return self.chunk.num_groups

    def describe(self) -> str:
        return f"{self.chunk.describe()}, segment {self.segments}"

    def unfinished(self) -> list[int]:
        """Responses that stopped only because their segment ended."""
        most = self.chunk.sampling.max_new_tokens
        return [i for i, r in enumerate(self.responses)
                if r.finish_reason == "length" and len(r.token_ids) < most]


def segment_seed(seed: int, segment: int) -> int:
    """A 31-bit sampling seed for segment `segment` (>= 1) of a chunk seeded `seed`."""
    digest = hashlib.blake2b(f"{seed}:segment{segment}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") >> 1


def segment_request(item: Chunk | PartialChunk,
                    segment_tokens: int) -> tuple[list[list[int]], SamplingParams]:
    """Prompts and sampling of the next segment: the chunk's own prompts first, then each
    unfinished response as a prompt (prompt + its tokens so far, n=1), never past the
    chunk's max_new_tokens."""
    if isinstance(item, Chunk):
        most = item.sampling.max_new_tokens
        return item.prompt_ids, replace(item.sampling, max_new_tokens=min(segment_tokens, most))
    chunk, todo = item.chunk, [item.responses[i] for i in item.unfinished()]
    room = chunk.sampling.max_new_tokens - max(len(r.token_ids) for r in todo)
    prompts = [chunk.prompt_ids[r.prompt_index] + r.token_ids for r in todo]
    return prompts, replace(chunk.sampling, n=1, max_new_tokens=min(segment_tokens, room),
                            seed=segment_seed(chunk.sampling.seed, item.segments),
                            continued=[len(r.token_ids) for r in todo])


def segment_images(item: Chunk | PartialChunk) -> list[PromptImages | None] | None:
    """The image inputs of `segment_request`'s prompts: each continued response carries
    its prompt's images (an image prompt's ids start with its expanded prompt)."""
    chunk = item if isinstance(item, Chunk) else item.chunk
    if chunk.images is None or isinstance(item, Chunk):
        return chunk.images
    return [chunk.images[item.responses[i].prompt_index] for i in item.unfinished()]


def continue_chunk(item: Chunk | PartialChunk, result: GenerateResult) -> PartialChunk:
    """Append a segment's tokens to the responses they continue, each with its version."""
    if isinstance(item, Chunk):
        return PartialChunk(item, result.generations, result.version, segments=1)
    responses, todo = list(item.responses), item.unfinished()
    for more in result.generations:  # prompt_index: position in the request, so in todo
        r = responses[todo[more.prompt_index]]
        versions = r.token_versions or [item.version] * len(r.token_ids)
        responses[todo[more.prompt_index]] = Generation(
            r.prompt_index, r.token_ids + more.token_ids, r.log_probs + more.log_probs,
            more.finish_reason, versions + [result.version] * len(more.token_ids))
    return PartialChunk(item.chunk, responses, item.version, item.segments + 1)


@dataclass
class ScoringJob:
    """Reward calls in flight for some groups; `finish` writes the scores back: per sample
    the sum of weight * (score + its reward's response length penalty) over the parts that
    scored it (one part, weight 1, unless reward_aggregation is weighted_sum), with their
    metadata merged. The length penalty is added here, where token counts are known
    (workers/rewards/response_length.py)."""

    groups: list[Group]
    parts: list[tuple[Cluster, int, ray.ObjectRef, list[int]]]  # cluster, rank, ref, groups
    weights: list[float] = field(default_factory=list)  # per part; empty: every part 1
    # per part, its reward's response_length_penalty_coef; empty: every part 0
    length_coefs: list[float] = field(default_factory=list)
    # per part, its reward's name, kept in `unscored_by` of each sample it did not score
    # (rlvr/reward_health.py); empty: not kept
    names: list[str] = field(default_factory=list)

    @property
    def refs(self) -> list[ray.ObjectRef]:
        return [ref for _, _, ref, _ in self.parts]

    def finish(self) -> list[Group]:
        scores: dict[int, list[float]] = {}
        infos: dict[int, list[list[dict]]] = {}
        unscored: dict[int, list[dict[str, str]]] = {}
        for p, (cluster, rank, ref, indices) in enumerate(self.parts):
            weight = self.weights[p] if self.weights else 1.0
            coef = self.length_coefs[p] if self.length_coefs else 0.0
            results = iter(reported_failures(cluster.get(ref, rank)))
            for gi in indices:
                scored = [next(results) for _ in self.groups[gi].texts]
                total = scores.setdefault(gi, [0.0] * len(scored))
                info = infos.setdefault(gi, [[] for _ in scored])
                failed = unscored.setdefault(gi, [{} for _ in scored])
                for i, r in enumerate(scored):
                    length = (coef * response_length_reward(
                        len(self.groups[gi].responses[i].token_ids)) if coef else 0.0)
                    total[i] += weight * (r.score + length)
                    info[i].append(r.metadata)
                    if self.names and (why := why_unscored(r.metadata)) is not None:
                        failed[i][self.names[p]] = why
        for gi, total in scores.items():
            self.groups[gi].scores = total
            self.groups[gi].reward_info = [
                {**merged_metadata(parts), **({UNSCORED: by} if by else {})}
                for parts, by in zip(infos[gi], unscored[gi])]
        return self.groups


def reported_failures(results: list[RewardResult]) -> list[RewardResult]:
    """`results`, after the console got the failure report a reward function's first
    failure carries (`fn_traceback`: workers/rewards/python_reward.py; each reward worker
    passes on only its first), which is then dropped from the sample's metadata."""
    for result in results:
        report = result.metadata.pop("fn_traceback", None)
        if report is not None:
            log.warning("%s", report)
    return results


def submit_scoring(groups: list[Group], reward_clusters: dict[str, RewardRole],
                   reward_cfgs: dict[str, RewardConfig], tokenizer,
                   aggregation: str = "first_match") -> ScoringJob:
    """Decode responses and send them to the reward workers without waiting; each reward
    gets the prompt as `reward_prompt` decodes it (a string, whatever the record holds),
    and the record's whole row (a reward function's `record`)."""
    for group in groups:
        group.texts = [tokenizer.decode(g.token_ids, skip_special_tokens=True)
                       for g in group.responses]
    return submit_texts(groups, [reward_prompt(tokenizer, g.prompt_ids) for g in groups],
                        [prompt_messages(g.record.prompt) for g in groups], reward_clusters,
                        reward_cfgs, aggregation)


def submit_texts(groups: list[Group], prompts: list[str], messages: list[list[dict]],
                 reward_clusters: dict[str, RewardRole], reward_cfgs: dict[str, RewardConfig],
                 aggregation: str = "first_match") -> ScoringJob:
    """Send each group's `texts` (already set) to the rewards its record's tag routes it
    to, with the group's prompt string and chat messages; the one path every `rewards:`
    score takes (RLVR's responses, an agent's final answers: pipelines/agent/answers.py)."""
    parts, weights, length_coefs, names = [], [], [], []
    routes = route_rewards([g.record.tag for g in groups], reward_cfgs, aggregation)
    for name, indices in routes.items():
        cluster = reward_clusters[name]
        for rank in range(cluster.world_size):
            mine = indices[rank::cluster.world_size]
            if mine:
                items = [Sample(prompts[gi], text, groups[gi].record.answer,
                                groups[gi].record.row, messages[gi])
                         for gi in mine for text in groups[gi].texts]
                parts.append((cluster, rank, cluster.score(rank, items), mine))
                weights.append(reward_cfgs[name].weight)
                length_coefs.append(reward_cfgs[name].response_length_penalty_coef)
                names.append(name)
    return ScoringJob(groups, parts, weights, length_coefs, names)


@dataclass
class ChunkSource:
    """RLVR's RolloutSource (loop/seams.py): chunks of prompts, generated by actor_infer
    itself (so weight updates are ordered by the single caller), scored by reward workers."""

    pool: InferRole  # actor_infer
    make_chunks: Callable[[int], list[Chunk]]  # batch index -> its chunks
    score: Callable[[list[Group]], ScoringJob]  # groups -> scoring job in flight
    waits_for_weights: bool = False
    segment_tokens: int = 0  # partial rollout: new tokens per request (0: off)
    # Requests in flight per worker: a blocking backend holds one running and one queued;
    # a streaming one (stream=True) as many groups as its engine decodes at once.
    per_worker: int = 2
    stream: bool = False

    def items(self, batch_index: int) -> list[Chunk]:
        return self.make_chunks(batch_index)

    def submit(self, item: Chunk | PartialChunk, rank: int, version: int) -> ray.ObjectRef:
        prompts, sampling = (segment_request(item, self.segment_tokens) if self.segment_tokens
                             else (item.prompt_ids, item.sampling))
        images = segment_images(item) if self.segment_tokens else item.images
        extra = {"images": images} if images is not None else {}  # a text request: as before
        if self.stream:
            return self.pool.generate_stream(rank, prompts, sampling, min_version=version,
                                             **extra)
        return self.pool.generate(rank, prompts, sampling, **extra)

    def complete(self, item: Chunk | PartialChunk, rank: int,
                 result: GenerateResult) -> Completion[Chunk | PartialChunk, Group]:
        busy = [(rank, result.started, result.finished)]
        if not self.segment_tokens:
            return Completion(self.score(groups_from_result(item, result.generations,
                                                            result.version)), busy)
        partial = continue_chunk(item, result)
        if partial.unfinished():
            return Completion(ScoringJob([], []), busy, continuation=partial)
        groups = groups_from_result(partial.chunk, partial.responses, partial.version)
        return Completion(self.score(groups), busy)
