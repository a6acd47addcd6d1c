"""The textbook synchronous RLVR loop, written out (generate, score, train, sync; no
prefetch thread, no validation): what a run at async_generation_ratio 0 must equal number
for number (DESIGN.md invariant 1). Shared by the text test (test_async_learning.py) and the
image-prompt one (test_image_rlvr_run.py)."""

from __future__ import annotations

from pathlib import Path

from flywheel.pipelines.loop.step_loop import StepLoop
from flywheel.pipelines.rlvr.generation import generate_chunks, submit_scoring
from flywheel.pipelines.rlvr.rollout import RLVRRollout, load_prompt_sets
from flywheel.pipelines.roles.roles import start_roles
from flywheel.platform.timing import StepTimer
from flywheel.workers.strategies.hf_model import load_tokenizer

# metrics of wall time and queues, which no two runs share
TIMING = ("time/", "throughput/", "idle/", "rollout/queue_depth")


def plain_sync_loop(cfg, model_path: str, steps: int) -> list[dict]:
    """Each step's metrics. The prompts load as a run loads them (`load_prompt_sets`: image
    data through the model's processor)."""
    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)  # the loop writes samples there
    tokenizer = load_tokenizer(model_path)
    prompts = load_prompt_sets(cfg, tokenizer)
    roles = start_roles(cfg, model_path, total_steps=steps)
    try:
        rollout = RLVRRollout(cfg, roles, tokenizer, prompts.train, [],
                              image_encoder=prompts.image_encoder)
        pipeline = StepLoop(cfg, roles, rollout, tracker=None, output_dir=Path(cfg.output_dir))
        out = []
        for step in range(steps):
            groups = generate_chunks(roles.actor_infer, rollout.chunks_for_batch(step))
            submit_scoring(groups, roles.rewards, cfg.rewards, rollout.tokenizer).finish()
            out.append(pipeline.train_on(groups, StepTimer()))
            roles.actor_infer.call_all("update_weights", pipeline.policy.latest(), step + 1)
        return out
    finally:
        roles.shutdown()


def assert_same_steps(piped: list[dict], plain: list[dict], steps: int) -> None:
    """A run's step rows (step > 0) equal the plain loop's, every metric but timing."""
    # every step of each loop, none missing on either side: zip alone would stop early
    assert [r["step"] for r in piped] == list(range(1, steps + 1)) and len(plain) == steps
    for got, want in zip(piped, plain, strict=True):
        assert got["staleness/max"] == 0
        assert {"reward/mean", "pg/loss", "pg/approx_kl"} <= want.keys()  # not a vacuous match
        for key, value in want.items():
            if not key.startswith(TIMING):
                assert got[key] == value, (got["step"], key)
