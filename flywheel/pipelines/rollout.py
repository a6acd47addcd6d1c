"""Rollout for RLVR: prompts → sampled response groups → verifier scores.

A `Group` is one prompt and its `n` responses, stamped with the policy version that
generated them; it is the unit that flows from generation to reward to training (and,
with asynchronous generation, the unit that is kept or dropped as stale).

Generation fans prompts out over actor_infer workers in contiguous shards; rewards route
each record to the reward whose `tag_included` holds its tag (an empty list takes every
tag) and fan out over that reward's workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flywheel.platform.cluster import Cluster
from flywheel.platform.config.schema import GeneratingArgs, RewardConfig
from flywheel.pipelines.prompt_data import PromptRecord
from flywheel.workers.strategies.base import Generation, SamplingParams


@dataclass
class Group:
    record: PromptRecord
    prompt_ids: list[int]
    responses: list[Generation]
    version: int  # policy version that generated every response of this group
    scores: list[float] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)


def sampling_params(args: GeneratingArgs, n: int, seed: int) -> SamplingParams:
    return SamplingParams(
        max_new_tokens=args.max_new_tokens, n=n, temperature=args.temperature,
        top_p=args.top_p, top_k=args.top_k, do_sample=args.do_sample, seed=seed,
    )


def _shards(items: list, parts: int) -> list[list]:
    size = -(-len(items) // parts)
    return [items[i * size:(i + 1) * size] for i in range(parts)]


def generate_groups(actor_infer: Cluster, records: list[PromptRecord],
                    prompt_ids: list[list[int]], sampling: SamplingParams) -> list[Group]:
    """Sample `sampling.n` responses for each prompt over every actor_infer worker."""
    shards = _shards(list(range(len(records))), actor_infer.world_size)
    refs = []
    for rank, idx in enumerate(shards):
        if idx:
            shard_sampling = SamplingParams(**{**vars(sampling), "seed": sampling.seed + rank})
            refs.append((rank, idx, actor_infer.submit_one(
                rank, "generate", [prompt_ids[i] for i in idx], shard_sampling)))
    groups: list[Group] = []
    for rank, idx, ref in refs:
        version, gens = actor_infer.get(ref, rank)
        for local, i in enumerate(idx):
            responses = [g for g in gens if g.prompt_index == local]
            groups.append(Group(records[i], prompt_ids[i], responses, version))
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


def score_groups(groups: list[Group], reward_clusters: dict[str, Cluster],
                 reward_cfgs: dict[str, RewardConfig], tokenizer) -> None:
    """Decode responses and fill `group.scores` / `group.texts` in place."""
    for group in groups:
        group.texts = [tokenizer.decode(g.token_ids, skip_special_tokens=True)
                       for g in group.responses]
    for name, indices in route_rewards(groups, reward_cfgs).items():
        if not indices:
            continue
        cluster = reward_clusters[name]
        items = [(groups[gi].record.prompt, text, groups[gi].record.answer)
                 for gi in indices for text in groups[gi].texts]
        results = [r for part in cluster.scatter("score", _shards(items, cluster.world_size))
                   for r in part]
        pos = 0
        for gi in indices:
            n = len(groups[gi].texts)
            groups[gi].scores = [r.score for r in results[pos:pos + n]]
            pos += n
