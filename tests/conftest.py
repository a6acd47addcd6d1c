"""Fixtures shared across tiers: one local Ray for the session, the built-in tiny models."""

from __future__ import annotations

import pytest

SLOTS = 4  # logical device slots for the session's Ray (device_mapping indices 0..3)


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray shared by every test that needs actors (starting one costs ~4 s)."""
    import ray

    from flywheel.config.schema import RayConfig
    from flywheel.platform.ray_runtime import start_ray

    started = start_ray(RayConfig(num_cpus=2, object_store_memory_mb=256), num_slots=SLOTS)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    """The built-in random-init tiny Qwen2 (built once into the flywheel cache)."""
    from flywheel.platform.models.builtin import resolve_pretrain

    return resolve_pretrain("builtin://tiny-qwen2")


@pytest.fixture(scope="session")
def arith_model_path() -> str:
    """The tiny Qwen2 after its SFT warm start (about 30 s the first time, then cached)."""
    from flywheel.platform.models.builtin import resolve_pretrain

    return resolve_pretrain("builtin://tiny-qwen2-arith")


@pytest.fixture(scope="session")
def tiny_idefics3_path(tmp_path_factory) -> str:
    """A tiny random-init Idefics3 with its processor (about a second to build; issue 29)."""
    from flywheel.platform.models.tiny_idefics3 import build_tiny_idefics3

    return str(build_tiny_idefics3(tmp_path_factory.mktemp("tiny_idefics3")))
