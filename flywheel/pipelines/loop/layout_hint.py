"""A hint printed once when a run's CPU split leaves cores idle most of a step.

Why: pinning actor_train and actor_infer to cores of their own lets generation run beside
training, but each phase then has part of the machine. When one phase takes most of a step
(training a 135M model on one core while generation on the other finishes early), the
other role's cores idle, and the colocated synchronous layout, where each phase has every
core in turn, can be faster than the overlap wins back. The run measures it
(`idle/actor_train`, `idle/actor_infer`) and says so; it changes nothing itself.
"""

from __future__ import annotations

from flywheel.config.schema import PipelineConfig

# Steps measured: the first step carries start-up costs (engine warm-up, first sync).
FIRST, LAST = 2, 4
IDLE_SHARE = 0.5  # a role idle more than this share of a step, on average


def idle_split_hint(cfg: PipelineConfig, rows: dict[int, dict[str, float]]) -> str | None:
    """The hint for `rows` (metrics by step), or None: the roles are not pinned to disjoint
    cores, fewer than steps FIRST..LAST are in, or neither role idled that much."""
    train, infer = cfg.actor_train.cpu_affinity, cfg.actor_infer.cpu_affinity
    if not train or not infer or set(train) & set(infer):
        return None
    steps = range(FIRST, LAST + 1)
    if any(s not in rows for s in steps):
        return None
    for role, cores, other in (("actor_train", train, infer), ("actor_infer", infer, train)):
        idle = [rows[s].get(f"idle/{role}") for s in steps]
        if None in idle:
            return None
        share = sum(idle) / len(idle)
        if share > IDLE_SHARE:
            return (f"layout: {role} (cores {cores}) idled {share:.0%} of steps {FIRST}-{LAST} "
                    f"while the other role had cores {other}: each phase runs on part of "
                    f"the machine. Giving both roles every core (no cpu_affinity, "
                    f"async_generation_ratio 0, phases taking turns) may be faster; compare "
                    f"time/step")
    return None
