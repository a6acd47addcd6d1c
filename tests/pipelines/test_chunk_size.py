"""How a batch's prompts are cut into generation requests (pipelines/rlvr/generation.py
`chunk_size`): small for a static-batching engine, so scoring overlaps generation; whole per
worker for an engine that batches continuously, so its steps decode every sequence; one
group per request for an engine that streams (many requests share its batch)."""

from flywheel.pipelines.rlvr.generation import chunk_size
from flywheel.workers.strategies.registry import STRATEGIES


def test_static_batching_gets_two_requests_per_worker():
    assert chunk_size(8, 1, 16) == 4
    assert chunk_size(8, 2, 16) == 2
    assert chunk_size(2, 1, 64) == 1
    assert chunk_size(64, 1, 16) == 16  # capped by infer_batch_size


def test_continuous_batching_gets_the_batch_in_one_request_per_worker():
    assert chunk_size(2, 1, 64, continuous_batching=True) == 2
    assert chunk_size(8, 2, 16, continuous_batching=True) == 4
    assert chunk_size(7, 2, 16, continuous_batching=True) == 4  # no third request
    assert chunk_size(64, 1, 16, continuous_batching=True) == 16  # the cap still holds


def test_which_engines_batch_continuously():
    assert {name for name, spec in STRATEGIES.items() if spec.continuous_batching} == {
        "vllm", "sglang"}


def test_a_streaming_engine_gets_one_group_per_request():
    assert chunk_size(8, 1, 16, continuous_batching=True, streams=True) == 1
    assert {name for name, spec in STRATEGIES.items() if spec.streams} == {"vllm"}
