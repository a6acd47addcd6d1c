"""Validation's requests (pipelines/rlvr/generation.py `generate_chunks`): on an engine that
streams, every chunk goes out at once through `generate_stream`, so they share the engine's
batch; otherwise each worker runs its chunks one after another through `generate`. Either
way the groups come back in chunk order. The infer role here is a recording double: the
real engines run under tests/models/test_smollm2_rlvr.py (vllm validation at step 0)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from flywheel.pipelines.data.prompt_data import PromptRecord
from flywheel.pipelines.rlvr.generation import batch_chunks, generate_chunks
from flywheel.workers.infer_worker import GenerateResult
from flywheel.workers.strategies.base import Generation, SamplingParams


@dataclass
class RecordingInferRole:
    world_size: int = 2
    calls: list[tuple] = field(default_factory=list)

    def _answer(self, prompts):
        return GenerateResult(0, [Generation(i, [p[0]], [0.0], "stop")
                                  for i, p in enumerate(prompts)], 0.0, 0.0)

    def generate(self, rank, prompts, sampling):
        self.calls.append(("generate", rank, None))
        return self._answer(prompts)

    def generate_stream(self, rank, prompts, sampling, min_version):
        self.calls.append(("generate_stream", rank, min_version))
        return self._answer(prompts)

    def get(self, ref, rank):
        return ref


@pytest.mark.parametrize("stream, method", [(True, "generate_stream"), (False, "generate")])
def test_chunks_round_robin_and_groups_in_chunk_order(stream, method):
    records = [PromptRecord(str(i), f"p{i}", "", "") for i in range(5)]
    chunks = batch_chunks(0, records, [[10 + i] for i in range(5)],
                          SamplingParams(max_new_tokens=4), size=2, run_seed=1)
    role = RecordingInferRole()
    groups = generate_chunks(role, chunks, stream=stream)
    expected_version = 0 if stream else None  # paused: no update to wait for
    assert role.calls == [(method, 0, expected_version), (method, 1, expected_version),
                          (method, 0, expected_version)]
    assert [g.responses[0].token_ids for g in groups] == [[10], [11], [12], [13], [14]]
