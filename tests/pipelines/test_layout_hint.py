"""The layout hint: said when a pinned split idles a role most of a step, and only then."""

from __future__ import annotations

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.loop.layout_hint import idle_split_hint

from .sim_config import sim_config


def config(train_cores, infer_cores):
    cfg = sim_config("/tmp/unused", 1.0)
    cfg["actor_train"]["cpu_affinity"] = train_cores
    cfg["actor_infer"]["cpu_affinity"] = infer_cores
    return load_config_dict(cfg)


def rows(train_idle: float, infer_idle: float, steps=(1, 2, 3, 4)) -> dict:
    return {s: {"idle/actor_train": train_idle, "idle/actor_infer": infer_idle} for s in steps}


def test_a_split_whose_generation_cores_idle_is_named():
    hint = idle_split_hint(config([0], [1]), rows(0.05, 0.70))
    assert hint.startswith("layout: actor_infer (cores [1]) idled 70% of steps 2-4")
    assert "cores [0]" in hint and "async_generation_ratio 0" in hint


def test_no_hint_for_a_busy_split_shared_cores_or_too_few_steps():
    assert idle_split_hint(config([0], [1]), rows(0.3, 0.4)) is None
    assert idle_split_hint(config([0, 1], [1]), rows(0.05, 0.9)) is None  # overlapping
    assert idle_split_hint(config(None, [1]), rows(0.05, 0.9)) is None  # train unpinned
    assert idle_split_hint(config([0], [1]), rows(0.05, 0.9, steps=(1, 2, 3))) is None
