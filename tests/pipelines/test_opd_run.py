"""On-policy distillation end to end: the shipped synchronous RLVR example, shrunk, with a
teacher of another seed (a random-init tiny Qwen2, seed 1) on a device slot of its own,
through real Ray actors, 10 steps of pure OPD.

In the suite, 2 steps: the teacher's log-probs that reached the groups (the rollout dump
keeps them) equal a plain transformers forward of the teacher on the same tokens, to 1e-5,
and every training number equals a plain synchronous OPD loop's in this process
(plain_opd_loop.py). Long (make test-long): 10 steps, the student's reverse KL to the
teacher (distill/reverse_kl, the token mean of log π_S − log π_T on its own samples) falls;
ratio 1, the staleness bound holds and the teacher's log-probs are never stale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from flywheel.pipelines.config import load_config
from flywheel.pipelines.run.launch import run
from flywheel.platform.models.tiny_qwen2 import build_tiny_qwen2
from flywheel.platform.models.tiny_qwen2_spec import TinyQwen2Spec

from .plain_loop import TIMING
from .plain_opd_loop import plain_opd_loop
from .sync_example import EXAMPLE, SMALL

STEPS = 10


def opd_overrides(root: Path, teacher: Path, steps: int, *extra: str) -> list[str]:
    return SMALL + [
        f"max_steps={steps}", "eval_steps=0", "validation=null", "save_steps=0",
        f"output_dir={root / 'run'}",
        f"teacher.seed1.model_args.model_name_or_path={teacher}",
        "teacher.seed1.device_mapping=[1]",  # a slot of its own
        "rollout_mock.mode=dump", f"rollout_mock.dump_dir={root / 'dump'}", *extra]


def opd_run_in(root: Path, steps: int, *extra: str) -> tuple[Path, Path, Path]:
    teacher = build_tiny_qwen2(root / "teacher", TinyQwen2Spec(seed=1))
    run(load_config(EXAMPLE, opd_overrides(root, teacher, steps, *extra)))
    return root / "run", root / "dump", teacher


@pytest.fixture(scope="module")
def short_opd_run(tmp_path_factory, ray_session, arith_model_path):
    return opd_run_in(tmp_path_factory.mktemp("opd"), 2)


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_teacher_forward(dump: Path, step: int, teacher_path: Path) -> int:
    """The teacher log-probs that reached step `step`'s groups (the rollout dump keeps
    them) equal a plain transformers forward of the teacher on the same tokens, to 1e-5;
    how many responses were checked."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(teacher_path, torch_dtype=torch.float32).eval()
    groups = json.loads((dump / "train" / f"step_{step:06d}.json").read_text())["groups"]
    checked = 0
    for group in groups:
        scored = group["teacher_log_probs"]["seed1"]
        for response, recorded in zip(group["responses"], scored):
            ids = group["prompt_ids"] + response["token_ids"]
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].float()  # [L, V]
            log_probs = torch.log_softmax(logits / 1.0, -1)  # the example's temperature: 1
            start = len(group["prompt_ids"])
            expected = [log_probs[t - 1, ids[t]].item() for t in range(start, len(ids))]
            assert recorded == pytest.approx(expected, abs=1e-5)
            checked += 1
    return checked


@pytest.mark.slow
def test_the_teachers_log_probs_are_a_forward_of_the_teacher(short_opd_run):
    out, dump, teacher_path = short_opd_run
    assert assert_teacher_forward(dump, 2, teacher_path) == 32  # 8 prompts x 4 samples
    metrics = read_metrics(out)[-1]
    assert metrics["distill/rows/seed1"] == 1.0 and metrics["distill/reverse_kl"] > 0


@pytest.mark.slow
def test_ratio_zero_opd_equals_the_plain_synchronous_opd_loop(short_opd_run, tmp_path,
                                                              arith_model_path):
    """The run's 2 steps (Ray actors, the step loop, the teacher scoring each chunk beside
    the rewards) equal a loop in this process that calls the strategies directly
    (plain_opd_loop.py), every training number exactly."""
    out, _, teacher = short_opd_run
    cfg = load_config(EXAMPLE, opd_overrides(tmp_path, teacher, 2))
    plain = plain_opd_loop(cfg, arith_model_path, str(teacher), 2)
    piped = [r for r in read_metrics(out) if r["step"] > 0]
    assert [r["step"] for r in piped] == [1, 2]
    for got, want in zip(piped, plain, strict=True):
        assert got["staleness/max"] == 0
        assert {"pg/loss", "distill/reverse_kl", "actor/grad_norm"} <= want.keys()
        for key, value in want.items():
            if not key.startswith(TIMING):
                assert got[key] == value, (got["step"], key, got[key], value)


@pytest.mark.long
def test_the_students_reverse_kl_to_the_teacher_falls(tmp_path, ray_session, arith_model_path):
    out, _, _ = opd_run_in(tmp_path, STEPS, "actor_train.training_args.learning_rate=5e-3")
    records = [r for r in read_metrics(out) if "distill/reverse_kl" in r]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    kl = [r["distill/reverse_kl"] for r in records]
    assert all(r["distill/reverse_kl/seed1"] == r["distill/reverse_kl"] for r in records)
    assert sum(kl[-3:]) / 3 < 0.9 * sum(kl[:3]) / 3, kl


@pytest.mark.long
def test_with_ratio_one_the_staleness_bound_holds_and_the_teacher_is_never_stale(
        tmp_path, ray_session, arith_model_path):
    """Generation a step ahead (actor_infer on a slot of its own): every trained group's
    staleness is at most ceil(1) (samples.jsonl and staleness/max), some group is 1 step
    stale (the window is used), and every step's teacher log-probs are still a forward of
    the teacher's fixed weights."""
    steps = 4
    out, dump, teacher = opd_run_in(tmp_path, steps, "async_generation_ratio=1",
                                    "actor_infer.device_mapping=[2]")
    ledger = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    trained = [r for r in ledger if r["fate"] == "trained"]
    assert len(trained) == steps * 8  # rollout_batch_size groups a step
    assert all(0 <= r["staleness"] <= 1 for r in trained)
    rows = [r for r in read_metrics(out) if r["step"] > 0]
    assert max(r["staleness/max"] for r in rows) == 1
    for step in range(1, steps + 1):
        assert assert_teacher_forward(dump, step, teacher) == 32


@pytest.mark.long
def test_self_distillation_runs_on_actor_train_with_no_teacher_worker(tmp_path, ray_session,
                                                                      arith_model_path):
    """The student as its own teacher with the answer in its context: 2 steps, its signal
    logged, and no teacher worker (the run's worker logs name its roles)."""
    out = tmp_path / "run"
    run(load_config(EXAMPLE, SMALL + [
        "max_steps=2", "eval_steps=0", "validation=null", "save_steps=0", f"output_dir={out}",
        "teacher.me.weights=student",
        "teacher.me.context_template='{prompt}{answer} {prompt}'"]))
    records = [r for r in read_metrics(out) if "distill/reverse_kl/me" in r]
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["distill/rows/me"] == 1.0 and r["distill/reverse_kl"] != 0 for r in records)
    assert sorted(p.name for p in (out / "logs").iterdir()) == [  # no teacher worker
        "actor_infer-0.log", "actor_train-0.log", "rewards.math_rule-0.log"]
