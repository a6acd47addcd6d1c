"""vllm's engine thread (workers/strategies/vllm_engine_loop.py) with the real engine:
calls share one batch and come back as they finish; weight updates drain or load in
flight; a call waits for the update its caller sent before it."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow

from backend_cases import PROMPTS, hf_trainer  # noqa: E402

from flywheel.workers.strategies.base import SamplingParams  # noqa: E402

LONG = SamplingParams(max_new_tokens=400, n=2, seed=3)  # the random tiny model rarely stops
SHORT = SamplingParams(max_new_tokens=3, n=2, seed=4)


@pytest.fixture(scope="module")
def weights(tiny_model_path):
    return hf_trainer(tiny_model_path).state_dict_for_sync()  # the engine's own weights


class Background:
    """A generate_versioned call in a thread, and when it returned."""

    def __init__(self, engine, prompts, sampling, min_version=0):
        self.result, self.done_at = None, None
        self.thread = threading.Thread(target=self._run,
                                       args=(engine, prompts, sampling, min_version))
        self.thread.start()

    def _run(self, engine, prompts, sampling, min_version):
        self.result = engine.generate_versioned(prompts, sampling, min_version)
        self.done_at = time.monotonic()

    def join(self):
        self.thread.join(timeout=120)
        assert self.result is not None, "the call never returned"
        return self.result


def wait_until_decoding(engine):
    deadline = time.monotonic() + 60
    while not any(s.token_ids for call, _ in list(engine.loop._running.values())
                  for per in call.samples for s in per):
        assert time.monotonic() < deadline, "the engine never started decoding"
        time.sleep(0.005)


def test_a_short_call_returns_while_a_long_one_runs(engine):
    long = Background(engine, PROMPTS[:2], LONG)
    wait_until_decoding(engine)
    _, _, short = engine.generate_versioned(PROMPTS[2:3], SHORT)
    short_done = time.monotonic()
    _, _, gens = long.join()
    assert long.done_at > short_done  # the short call did not wait behind the long one
    assert [len(g.token_ids) for g in short] == [3, 3]
    assert [g.prompt_index for g in gens] == [0, 0, 1, 1]
    alone = engine.generate(PROMPTS[2:3], SHORT)  # same seeds: same samples, any batch
    assert [g.token_ids for g in alone] == [g.token_ids for g in short]


def test_prompts_past_the_prefill_budget_arrive_while_another_call_decodes(engine):
    """Seeded requests prefilled over several steps fail on vLLM's CPU sampler; prompts
    are prefilled whole there (vllm_infer.engine_kwargs)."""
    budget = engine.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
    long = Background(engine, PROMPTS[:1], LONG)
    wait_until_decoding(engine)
    prompts = [[(i * 7 + j) % 200 + 1 for j in range(300)] for i in range(20)]
    assert budget < 20 * 300
    gens = engine.generate(prompts, SHORT)
    assert len(gens) == 40 and len(long.join()[2]) == 2


def test_in_flight_update_continues_running_requests_on_new_weights(engine, weights):
    engine.in_flight_updates = True
    try:
        long = Background(engine, PROMPTS[:2], LONG)
        wait_until_decoding(engine)
        engine.update_weights(weights, version=7)
        loaded = time.monotonic()
        version, _, gens = long.join()
    finally:
        engine.in_flight_updates = False
    assert long.done_at > loaded  # the update did not wait for the request
    assert version == 0 and engine.version == 7
    for g in gens:
        if g.finish_reason == "length":  # ran past the update: both versions, in order
            assert g.token_versions[0] == 0 and g.token_versions[-1] == 7, g.token_versions
            assert g.token_versions == sorted(g.token_versions)
            assert len(g.token_versions) == len(g.token_ids) == len(g.log_probs)
    assert any(g.token_versions for g in gens)


def test_drained_update_waits_for_running_requests(engine, weights):
    start = engine.version
    long = Background(engine, PROMPTS[:2], LONG)
    wait_until_decoding(engine)
    engine.update_weights(weights, version=start + 1)
    updated = time.monotonic()
    version, _, gens = long.join()
    assert long.done_at <= updated  # the update waited for the running request
    assert version == start and all(g.token_versions == [] for g in gens)
    assert engine.version == start + 1


def test_a_call_waits_for_the_update_it_names(engine, weights):
    start = engine.version
    later = Background(engine, PROMPTS[:1], SHORT, min_version=start + 1)
    time.sleep(0.5)
    assert later.result is None  # parked: its update has not arrived
    updated_at = time.time()
    engine.update_weights(weights, version=start + 1)
    version, started, _ = later.join()
    assert version == start + 1 and started >= updated_at
