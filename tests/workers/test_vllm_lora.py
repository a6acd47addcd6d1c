"""vllm serving actor_train's LoRA adapter per weight version (`lora_sync: adapter`,
workers/strategies/vllm_adapters.py), on the built-in tiny model in fp32, in process.

What each test holds: the sync is A and B alone; vllm with the synced adapter samples the
greedy tokens hf_infer samples with the merged model, with the same log-probs; a request
running when a new adapter loads finishes on the one it started with; adapters no request
uses are removed with their folders; the keys are refused where they would do nothing.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow

from backend_cases import PARITY_ATOL, PROMPTS  # noqa: E402

from flywheel.config.schema import ModelArgs, TrainingArgs, WorkerConfig  # noqa: E402
from flywheel.workers.strategies.base import SamplingParams  # noqa: E402
from flywheel.workers.strategies.hf_infer import HFInferStrategy  # noqa: E402
from flywheel.workers.strategies.hf_train import HFTrainStrategy  # noqa: E402
from flywheel.workers.strategies.vllm_adapters import AdapterSpec  # noqa: E402
from flywheel.workers.strategies.vllm_infer import VLLMInferStrategy  # noqa: E402

RANK, ALPHA = 8, 16.0
GREEDY = SamplingParams(max_new_tokens=40, n=1, do_sample=False)


@pytest.fixture(scope="module")
def trainer(tiny_model_path) -> HFTrainStrategy:
    """One fp32 LoRA trainer (all-linear, r 8, alpha 16) for the module."""
    args = ModelArgs(lora_target="all-linear", lora_rank=RANK, lora_alpha=ALPHA)
    return HFTrainStrategy(tiny_model_path, WorkerConfig(model_args=args,
                                                         training_args=TrainingArgs()),
                           seed=0, total_steps=1)


def move(trainer: HFTrainStrategy, seed: int) -> HFTrainStrategy:
    """The adapter moved at random, as training would (B != 0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in trainer.model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=generator) * 0.1)
    return trainer


def sync(trainer: HFTrainStrategy, lora_sync: str) -> dict[str, torch.Tensor]:
    """What a sync of `trainer` sends under `lora_sync`."""
    trainer.cfg = dataclasses.replace(trainer.cfg, model_args=dataclasses.replace(
        trainer.cfg.model_args, lora_sync=lora_sync))
    return {k: v.clone() for k, v in trainer.weights_for_sync()}


@pytest.fixture(scope="module")
def served(tiny_model_path):
    """One vllm engine serving adapters (in-flight updates on, as partial rollout has)."""
    set_num_threads = torch.set_num_threads  # vLLM's CPU worker replaces it process-wide
    engine = VLLMInferStrategy(tiny_model_path, WorkerConfig(), seed=0,
                               in_flight_updates=True, lora_adapter=AdapterSpec(RANK, ALPHA))
    yield engine
    torch.set_num_threads = set_num_threads


def test_the_sync_is_the_adapter_alone(trainer):
    adapter, merged = sync(move(trainer, 1), "adapter"), sync(trainer, "merged")
    assert adapter and all(".lora_A." in k or ".lora_B." in k for k in adapter)
    size = sum(t.numel() for t in adapter.values())
    assert size < sum(t.numel() for t in merged.values()) / 4


def test_served_adapter_samples_as_hf_infer_with_the_merged_model(served, trainer,
                                                                   tiny_model_path):
    """The same greedy tokens (40 per prompt) and log-probs within PARITY_ATOL: vllm adds
    (alpha / r) B A x at run time, hf_infer holds W0 + (alpha / r) B A."""
    base = [g.token_ids for g in served.generate(PROMPTS[:8], GREEDY)]
    served.update_weights(sync(move(trainer, 2), "adapter"), version=1)
    hf = HFInferStrategy(tiny_model_path, WorkerConfig(infer_batch_size=8), seed=0)
    hf.update_weights(sync(trainer, "merged"), version=1)
    ours, theirs = served.generate(PROMPTS[:8], GREEDY), hf.generate(PROMPTS[:8], GREEDY)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    assert min(len(g.token_ids) for g in ours) >= 32, [len(g.token_ids) for g in ours]
    assert [g.token_ids for g in ours] != base  # the adapter changed what is sampled
    diff = max(abs(a - b) for x, y in zip(ours, theirs)
               for a, b in zip(x.log_probs, y.log_probs))
    assert diff < PARITY_ATOL, diff


def test_a_running_request_keeps_its_adapter_and_old_ones_go(served, trainer):
    long = SamplingParams(max_new_tokens=300, n=1, seed=3)  # the tiny model rarely stops
    start = served.version
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        out=served.generate_versioned(PROMPTS[:2], long)))
    thread.start()
    deadline = time.monotonic() + 60
    while not any(s.token_ids for call, _ in list(served.loop._running.values())
                  for per in call.samples for s in per):
        assert time.monotonic() < deadline, "the engine never started decoding"
        time.sleep(0.005)
    served.update_weights(sync(move(trainer, 3), "adapter"), version=start + 1)
    thread.join(timeout=120)
    version, _, gens = result["out"]
    assert version == start
    assert all(g.token_versions == [] for g in gens)  # every token of its start version
    assert served.generate_versioned(PROMPTS[:1], GREEDY)[0] == start + 1
    # the start version's adapter is gone with its folder once nothing runs on it
    served.update_weights(sync(move(trainer, 4), "adapter"), version=start + 2)
    folders = served.adapters.folders
    assert list(folders) == [start + 3]  # adapter id = version + 1
    assert served.llm.llm_engine.list_loras() == {start + 3}
    assert all(os.path.isdir(f) for f in folders.values())
