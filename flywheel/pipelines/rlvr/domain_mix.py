"""The mix of domains in each RLVR batch: `actor_train.data_args.domain_interleave_probs`.

A domain is a set of training records: those carrying a tag, or (ROLL's meaning of the
key) those a named reward scores (rlvr/reward_routing.py). With probabilities p_d, batch b
holds n_d(b) prompts of domain d, where

    n_d(b) = round(p_d * B * (b + 1)) - (prompts of d in batches 0 .. b-1),   B = batch size

rounded so that the batch holds exactly B (largest remainders first). It is a quota, not a
coin per prompt: each batch is within a prompt or two of p_d * B and the share over any
run of batches is p_d within 1/(b + 1) prompts per batch, whatever B (ROLL gives each
domain int(p_d * B) per batch and the last domain the rest, which drifts from p_d when
p_d * B is not whole). Each domain's records come from a `PromptOrder` of their own
(seeded by the run seed and the domain's name), epoch after epoch, so a small domain is
re-drawn while a large one is still in its first epoch. A batch interleaves its domains
(each spread evenly over the batch), so the groups that dynamic sampling or the staleness
bound keep from a batch are not biased toward one domain.

Everything is a pure function of (seed, records, probabilities, batch index): the
prefetch generator, a resumed run (the checkpoint's next batch) and a regenerated batch
see the same prompts, like `PromptOrder` without domains. The counts before batch b are
recomputed from batch 0 when asked out of order (O(b) small steps, on resume).

Not here: the config rules (values >= 0, summing to 1; config/checks/rewards.py)
and what is measured per domain (`reward/<tag>/mean`, loop/step_metrics.py).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.data.prompt_data import DataError, PromptOrder, PromptRecord
from flywheel.pipelines.rlvr.reward_routing import check_routes, rewards_for_tag

KEY = "actor_train.data_args.domain_interleave_probs"


@dataclass
class Domain:
    name: str  # the domain_interleave_probs key
    prob: float  # rescaled so that the domains' probabilities sum to 1
    records: list[PromptRecord]


def domain_quotas(probs: list[float], batch_size: int, index: int,
                  given: list[int]) -> list[int]:
    """Prompts of each domain in batch `index`, given how many each had in the batches
    before it: the cumulative target p * B * (index + 1) minus what was given, floored,
    then topped up (or cut back) by largest (smallest) remainder to exactly B."""
    want = [p * batch_size * (index + 1) - g for p, g in zip(probs, given)]
    counts = [max(0, math.floor(w)) for w in want]
    domains = range(len(probs))
    while sum(counts) < batch_size:
        d = max(domains, key=lambda i: (want[i] - counts[i], -i))
        counts[d] += 1
    while sum(counts) > batch_size:
        d = min((i for i in domains if counts[i] > 0), key=lambda i: (want[i] - counts[i], i))
        counts[d] -= 1
    return counts


def interleaved(parts: list[list[PromptRecord]]) -> list[PromptRecord]:
    """The parts' records merged so that each part is spread evenly over the result."""
    keyed = [((i + 0.5) / len(part), d, rec)
             for d, part in enumerate(parts) for i, rec in enumerate(part)]
    return [rec for _, _, rec in sorted(keyed, key=lambda k: (k[0], k[1]))]


def domain_seed(seed: int, name: str) -> int:
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=6).digest()
    return int.from_bytes(digest, "little")


@dataclass
class DomainOrder:
    """Which records make up batch b: a pure function of (seed, b). Same interface as
    PromptOrder (`batch(index, size)`); called from the generator thread only."""

    domains: list[Domain]  # those with probability > 0
    seed: int
    streams: list[PromptOrder] = field(init=False)
    _size: int = 0  # batch size the counts below were computed for
    _next: int = 0  # batches whose counts are summed in _given
    _given: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.streams = [PromptOrder(d.records, seed=domain_seed(self.seed, d.name))
                        for d in self.domains]

    def counts(self, index: int, size: int) -> tuple[list[int], list[int]]:
        """(prompts of each domain in batch `index`, prompts of each in the batches before)."""
        probs = [d.prob for d in self.domains]
        if size != self._size or index < self._next:
            self._size, self._next, self._given = size, 0, [0] * len(self.domains)
        while self._next < index:
            step = domain_quotas(probs, size, self._next, self._given)
            self._given = [g + s for g, s in zip(self._given, step)]
            self._next += 1
        return domain_quotas(probs, size, index, self._given), list(self._given)

    def batch(self, index: int, size: int) -> list[PromptRecord]:
        counts, before = self.counts(index, size)
        return interleaved([stream.take(start, n)
                            for stream, start, n in zip(self.streams, before, counts)])


def split_domains(records: list[PromptRecord], cfg: PipelineConfig) -> list[Domain]:
    """The records of each domain_interleave_probs key; every record in exactly one, every
    key naming a tag in the data or a reward (one-line DataErrors otherwise)."""
    probs = cfg.actor_train.data_args.domain_interleave_probs
    tags = sorted({r.tag for r in records})
    for name in probs:
        if name not in tags and name not in cfg.rewards:
            raise DataError(f"{KEY}.{name}: no training record has tag '{name}' and no reward "
                            f"is named '{name}' (tags in the data: {', '.join(map(repr, tags))})")
    members: dict[str, list[PromptRecord]] = {name: [] for name in probs}
    homes_by_tag: dict[str, list[str]] = {}
    for tag in tags:
        takers = rewards_for_tag(tag, cfg.rewards, cfg.reward_aggregation)
        homes_by_tag[tag] = [name for name in probs
                             if name == tag or (name not in tags and name in takers)]
    for tag, homes in homes_by_tag.items():
        shown = f"tag '{tag}'" if tag else "no tag"
        if not homes:
            n = sum(r.tag == tag for r in records)
            raise DataError(f"{KEY}: {n} training record(s) with {shown} are in no domain; "
                            f"give '{tag}' a probability (0 leaves them out)")
        if len(homes) > 1:
            raise DataError(f"{KEY}: records with {shown} are in domains "
                            f"{' and '.join(homes)}; each record belongs to one domain")
    for r in records:
        members[homes_by_tag[r.tag][0]].append(r)
    total = sum(probs.values())
    domains = [Domain(name, p / total, members[name]) for name, p in probs.items()]
    for d in domains:
        if d.prob > 0 and not d.records:
            raise DataError(f"{KEY}.{d.name}: probability {probs[d.name]} but no record of "
                            f"this domain")
    return domains


def training_order(records: list[PromptRecord], cfg: PipelineConfig) -> PromptOrder | DomainOrder:
    """The prompt order of an RLVR run: by domain quotas when domain_interleave_probs is
    set, else one shuffled order over every record."""
    if not cfg.actor_train.data_args.domain_interleave_probs:
        return PromptOrder(records, seed=cfg.seed)
    return DomainOrder([d for d in split_domains(records, cfg) if d.prob > 0], cfg.seed)


def check_routing(cfg: PipelineConfig, train_records: list[PromptRecord],
                  val_records: list[PromptRecord]) -> None:
    """Before any worker starts: every record goes to some reward, and with
    domain_interleave_probs every training record is in one domain (DataError otherwise)."""
    check_routes(train_records, cfg, "actor_train")
    check_routes(val_records, cfg, "validation")
    if cfg.actor_train.data_args.domain_interleave_probs:
        split_domains(train_records, cfg)
