"""Partial rollout: chunks generated in segments, continued on the newest weights.

Unit tier: a greedy fake model whose next token depends only on the context, so a chunk
cut into segments must give exactly the responses of one whole request, while recording
which version produced each token. Then the whole pipeline with real Ray actors.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config
from flywheel.pipelines.data.prompt_data import PromptRecord
from flywheel.pipelines.rlvr.generation import (
    Chunk,
    ChunkSource,
    PartialChunk,
    ScoringJob,
    group_from_dict,
    group_to_dict,
    groups_from_result,
    segment_request,
)
from flywheel.pipelines.rlvr.metrics import partial_rollout_metrics
from flywheel.pipelines.rlvr.rollout import segment_tokens
from flywheel.pipelines.run.launch import run
from flywheel.workers.infer_worker import GenerateResult
from flywheel.workers.strategies.base import Generation, SamplingParams

EOS = 0
EXAMPLE = Path(__file__).parents[2] / "examples" / "rlvr_sync.yaml"


def greedy(prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
    """A deterministic 'model': the next token is a function of the context alone, and its
    log-prob encodes the position, so concatenation order is visible."""
    out = []
    for i, prompt in enumerate(prompts):
        for _ in range(sampling.n):
            context, ids, lps, reason = list(prompt), [], [], "length"
            while len(ids) < sampling.max_new_tokens:
                token = (sum(context) * 31 + len(context)) % 7  # EOS = 0 ends it
                ids.append(token)
                lps.append(-0.01 * len(context))
                context.append(token)
                if token == EOS:
                    reason = "stop"
                    break
            out.append(Generation(i, ids, lps, reason))
    return out


def make_chunk(max_new_tokens: int, n: int = 2) -> Chunk:
    prompts = [[1, 2], [3], [4, 5, 6], [2, 2], [6, 1, 1], [5]]
    records = [PromptRecord(f"p{i}", "", "", "t") for i in range(len(prompts))]
    return Chunk(3, 30, records, prompts, SamplingParams(max_new_tokens, n=n, seed=11))


def run_segmented(chunk: Chunk, segment_tokens: int):
    """Drive ChunkSource as the prefetch thread would, with the weights moving on one
    version per segment; returns the groups and every request sent."""
    source = ChunkSource(pool=None, make_chunks=None, segment_tokens=segment_tokens,
                         score=lambda groups: ScoringJob(groups, []))
    item, requests = chunk, []
    for version in range(5, 100):
        prompts, sampling = segment_request(item, segment_tokens)
        requests.append((item, prompts, sampling))
        result = GenerateResult(version, greedy(prompts, sampling), 0.0, 0.0)
        done = source.complete(item, 0, result)
        if done.continuation is None:
            return done.scoring.groups, requests
        item = done.continuation
    raise AssertionError("segments never finished")


@pytest.mark.parametrize("segment_tokens, max_new_tokens", [(1, 5), (2, 7), (3, 7), (7, 7)])
def test_segments_give_the_whole_request_responses(segment_tokens, max_new_tokens):
    chunk = make_chunk(max_new_tokens)
    whole = groups_from_result(chunk, greedy(chunk.prompt_ids, chunk.sampling), 5)
    groups, requests = run_segmented(chunk, segment_tokens)
    assert len(requests) <= math.ceil(max_new_tokens / segment_tokens)
    assert [g.seq for g in groups] == [g.seq for g in whole]
    continued = any(r.token_versions for g in groups for r in g.responses)
    assert continued == (segment_tokens < max_new_tokens)
    for got, want in zip(groups, whole):
        assert got.version == 5  # the start version: that of the first segment
        for r, w in zip(got.responses, want.responses, strict=True):
            assert (r.token_ids, r.log_probs, r.finish_reason) == (
                w.token_ids, w.log_probs, w.finish_reason)
            assert len(r.token_ids) <= max_new_tokens
            versions = r.token_versions or [got.version] * len(r.token_ids)
            assert len(versions) == len(r.token_ids) and versions[0] == got.version
            assert versions == sorted(versions)
            # the version of a token is that of the segment that produced it
            assert versions == [5 + t // segment_tokens for t in range(len(r.token_ids))]


def test_continuations_are_prompt_plus_partial_tokens():
    chunk = make_chunk(7)
    groups, requests = run_segmented(chunk, 2)
    final = {(g.seq - chunk.first_seq, k): chunk.prompt_ids[g.seq - chunk.first_seq] +
             r.token_ids for g in groups for k, r in enumerate(g.responses)}
    first_item, first_prompts, first_sampling = requests[0]
    assert first_item is chunk and first_prompts == chunk.prompt_ids
    assert (first_sampling.n, first_sampling.max_new_tokens, first_sampling.seed) == (2, 2, 11)
    seeds = {first_sampling.seed}
    for item, prompts, sampling in requests[1:]:
        assert isinstance(item, PartialChunk)
        todo = [item.responses[i] for i in item.unfinished()]
        assert len(prompts) == len(todo) > 0 and sampling.n == 1
        assert sampling.max_new_tokens == min(2, 7 - len(todo[0].token_ids))
        # the response so far ends each prompt: a stop string may begin there
        assert sampling.continued == [len(r.token_ids) for r in todo]
        for prompt, r in zip(prompts, todo):
            assert r.finish_reason == "length"
            assert prompt == chunk.prompt_ids[r.prompt_index] + r.token_ids
            assert any(full[:len(prompt)] == prompt for full in final.values())
        seeds.add(sampling.seed)
    assert len(seeds) == len(requests)  # each segment its own (deterministic) seed
    assert [s.seed for _, _, s in run_segmented(chunk, 2)[1]] == [
        s.seed for _, _, s in requests]


def test_token_versions_survive_checkpoints_and_old_checkpoints_load():
    groups, _ = run_segmented(make_chunk(5), 2)
    spanning = [g for g in groups if any(r.token_versions for r in g.responses)]
    assert spanning
    for g in groups:
        assert group_from_dict(json.loads(json.dumps(group_to_dict(g)))) == g
    old = group_to_dict(groups[0])
    for r in old["responses"]:
        del r["token_versions"]  # written before partial rollout existed
    assert all(r.token_versions == [] for r in group_from_dict(old).responses)


def test_partial_rollout_metrics_by_hand():
    def gen(tokens: int, versions: list[int]) -> Generation:
        return Generation(0, [1] * tokens, [0.0] * tokens, "stop", versions)

    groups = groups_from_result(make_chunk(4, n=1), [], 2)[:2]
    groups[0].responses = [gen(2, []), gen(3, [2, 3, 3])]  # the second spans 2 versions
    groups[1].responses = [gen(1, []), gen(2, [2, 2])]
    metrics = partial_rollout_metrics(groups, step=5)  # trained at 0-based step 4
    assert metrics["rollout/partial_frac"] == 1 / 4
    # per-token lags 4 - v: [2, 2], [2, 1, 1], [2], [2, 2] -> 14 / 8
    assert metrics["staleness/token_mean"] == 14 / 8


# ---- the pipeline, with real Ray actors ---------------------------------------------------
def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def check_run(run_dir: Path, cfg, bound: int) -> list[dict]:
    """Ledger and metrics invariants; returns the trained steps' metrics."""
    ledger = rows(run_dir / "samples.jsonl")
    trained = [r for r in ledger if r["fate"] == "trained"]
    seqs = [r["seq"] for r in ledger]
    assert len(seqs) == len(set(seqs)), "a group was trained or dropped twice"
    assert len(trained) == cfg.max_steps * cfg.rollout_batch_size
    assert all(0 <= r["staleness"] <= bound for r in trained)  # from the start version
    steps = [m for m in rows(run_dir / "metrics.jsonl") if m["step"] > 0]
    assert len(steps) == cfg.max_steps
    for m in steps:
        for key in ("rollout/partial_frac", "staleness/token_mean", "staleness/max"):
            assert math.isfinite(m[key]), key
        assert 0 <= m["staleness/token_mean"] <= bound
        assert 0.0 <= m["rollout/partial_frac"] <= 1.0
    return steps


def test_tiny_model_run_spans_versions(tmp_path, ray_session, tiny_model_path):
    """Segments continue on new weights, and validation (at steps 0, 3 and 4) pauses
    generation with segments in flight and loses none of them."""
    cfg = load_config(EXAMPLE, [
        f"output_dir={tmp_path}",
        "pretrain=builtin://tiny-qwen2",      # random init: long responses, rarely an eos
        "response_length=24",                 # 12 segments of 2 tokens per response
        "async_generation_ratio=1", "actor_infer.device_mapping=[1]",
        "partial_rollout=true", "partial_rollout_segment_tokens=2",
        "max_steps=4", "eval_steps=3", "val_batch_size=8", "logging_steps=100",
        "tracking.mlflow=false",
        "rollout_batch_size=8", "num_return_sequences_in_group=4",  # 32 rows per step
        "actor_train.training_args.per_device_train_batch_size=32",  # one optimizer step
    ])
    steps = check_run(run(cfg), cfg, bound=1)
    # generation of a batch outlasts a train step, so weights change under some responses
    assert sum(m["rollout/partial_frac"] for m in steps) > 0, steps


def test_vllm_continues_running_requests_on_new_weights(tmp_path, ray_session,
                                                        tiny_model_path):
    """No segments on vllm: weights load while its requests run (vllm_engine_loop.py)."""
    pytest.importorskip("vllm")
    cfg = load_config(EXAMPLE, [
        f"output_dir={tmp_path}", "pretrain=builtin://tiny-qwen2", "response_length=64",
        "async_generation_ratio=1", "actor_infer.device_mapping=[1]",
        "actor_infer.strategy_args.strategy_name=vllm", "partial_rollout=true",
        "max_steps=4", "eval_steps=0", "validation=null", "logging_steps=100",
        "tracking.mlflow=false",
        "rollout_batch_size=8", "num_return_sequences_in_group=4",
        "actor_train.training_args.per_device_train_batch_size=32",
    ])
    assert segment_tokens(cfg) == 0  # whole requests, never re-prefilled in segments
    steps = check_run(run(cfg), cfg, bound=1)
    # generation of a batch outlasts a train step, so weights change under some responses
    assert sum(m["rollout/partial_frac"] for m in steps) > 0, steps


@pytest.mark.long  # two runs, ~60 s on the 2-core machine
def test_vllm_streaming_at_ratio_0_repeats_number_for_number(tmp_path, ray_session,
                                                             tiny_model_path):
    """Groups stream into one engine batch in whatever order their calls arrive; with the
    same seed a synchronous run still gives the same samples and metrics."""
    pytest.importorskip("vllm")

    def metrics(out: Path) -> list[dict]:
        cfg = load_config(EXAMPLE, [
            f"output_dir={out}", "pretrain=builtin://tiny-qwen2", "response_length=32",
            "actor_infer.strategy_args.strategy_name=vllm", "max_steps=3", "eval_steps=0",
            "validation=null", "save_steps=0", "logging_steps=100", "tracking.mlflow=false",
            "rollout_batch_size=8", "num_return_sequences_in_group=4",
            "actor_train.training_args.per_device_train_batch_size=32"])
        timing = ("time/", "throughput/", "idle/", "rollout/queue_depth")
        return [{k: v for k, v in m.items() if not k.startswith(timing)}
                for m in rows(run(cfg) / "metrics.jsonl")]

    assert metrics(tmp_path / "a") == metrics(tmp_path / "b")
