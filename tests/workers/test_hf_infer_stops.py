"""hf_infer's stop cut across a partial rollout's segment boundary, on the built-in tiny
model: transformers stops at a stop string that began in the response so far (the tail of
the segment's prompt), and the cut must find it there (stops.response_end `before`)."""

from __future__ import annotations

from flywheel.config.schema import WorkerConfig
from flywheel.workers.strategies.base import SamplingParams
from flywheel.workers.strategies.hf_infer import HFInferStrategy


def test_a_stop_string_begun_in_an_earlier_segment_ends_the_response(tiny_model_path):
    infer = HFInferStrategy(tiny_model_path, WorkerConfig(infer_batch_size=1), seed=0)
    decode = infer.tokenizer.decode
    prompt = infer.tokenizer.encode("Once upon a time", add_special_tokens=False)

    def sample(ids, **sampling):  # seeded: the same request draws the same first token
        return infer.generate([ids], SamplingParams(seed=5, **sampling))[0]

    so_far = sample(prompt, max_new_tokens=12).token_ids  # an earlier segment's response
    for k in range(2, len(so_far)):
        (nxt,) = sample(prompt + so_far[:k], max_new_tokens=1).token_ids
        stop = decode([so_far[k - 1], nxt])
        if stop.strip() and stop not in decode(so_far[:k]) and stop not in decode([nxt]):
            break
    else:
        raise AssertionError("no token pair to make a boundary-crossing stop string of")
    nxt_segment = sample(prompt + so_far[:k], max_new_tokens=6, stop_strings=[stop],
                         continued=[k])
    assert nxt_segment.token_ids == [nxt] and nxt_segment.finish_reason == "stop"
