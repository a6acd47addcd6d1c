"""Runs of `platform run` in a child process, killed or signalled at chosen moments.

Used by test_chaos.py (short, in the suite) and `make chaos` (`python -m
tests.pipelines.chaos_runs --rounds N`, longer). Each run is a sim RLVR config (latency-only
backends, several chunks per infer worker; with `vllm=True` the tiny model on hf_train and a
streaming vllm that loads weights while responses run; with `lora=True` the tiny model on
hf_train with a LoRA adapter, whose checkpoints hold only the adapter and its optimizer
state, synced merged to hf_infer: a kill must lose nothing of what the base does not hold)
in its own session, so a kill can take the driver alone (SIGKILL, as a node's OOM killer
would) and then the run's local Ray with it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

from tests.pipelines.agentic_sim_config import agentic_sim_config
from tests.pipelines.sim_config import sim_config

BATCH = 8  # sim_config's rollout_batch_size
AGENTIC_GROUPS = 2  # agentic_sim_config: rollout_batch_size 8 / group_size 4
ROOT = Path(__file__).parents[2]


def write_config(path: Path, out: Path, ratio: float, max_steps: int, agentic: bool = False,
                 vllm: bool = False, lora: bool = False, **top) -> Path:
    if lora:  # the adapter on the train side; hf_infer (starts in seconds) gets it merged
        cfg = sim_config(out, ratio, max_steps=max_steps, eval_steps=0, save_steps=1, **top)
        cfg["actor_train"]["strategy_args"] = {"strategy_name": "hf_train"}
        cfg["actor_train"]["model_args"] = {"lora_target": "all-linear", "lora_rank": 4}
        cfg["actor_train"]["training_args"] = {"learning_rate": 1e-3}  # the adapter moves
        cfg["actor_infer"]["strategy_args"] = {"strategy_name": "hf_infer"}
        cfg["actor_infer"]["generating_args"]["max_new_tokens"] = 16
    elif vllm:  # the real path: hf_train, and vllm streaming with updates in flight
        cfg = sim_config(out, ratio, max_steps=max_steps, eval_steps=0, save_steps=1,
                         partial_rollout=True, **top)
        cfg["actor_train"]["strategy_args"] = {"strategy_name": "hf_train"}
        cfg["actor_infer"]["strategy_args"] = {"strategy_name": "vllm"}
        cfg["actor_infer"]["generating_args"]["max_new_tokens"] = 48  # random init: long
    elif agentic:  # 2 env groups per step, each episode several generate calls
        cfg = agentic_sim_config(out, ratio, gen_s=0.02, train_s=0.1, max_steps=max_steps,
                                 eval_steps=0, save_steps=1, **top)
    else:
        cfg = sim_config(out, ratio, gen_s=0.02, train_s=0.1, max_steps=max_steps,
                         eval_steps=0, save_steps=1, **top)
        cfg["actor_infer"]["infer_batch_size"] = 1  # 8 chunks per batch for one infer worker
    cfg["ray"] = {"num_cpus": 2, "object_store_memory_mb": 256}
    path.write_text(yaml.safe_dump(cfg))
    return path


def start(args: list[str], log: Path, address: str | None = None) -> subprocess.Popen:
    """`platform run ARGS` in a session of its own; `address`: join that Ray (the test
    session's, saving a Ray start per run) instead of starting one."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if address:
        args = [*args, "--address", address]
    return subprocess.Popen([sys.executable, "-m", "flywheel", "run", *args], cwd=ROOT,
                            stdout=log.open("a"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def steps_logged(out: Path) -> int:
    path = out / "metrics.jsonl"
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.endswith("}"))


def wait_for_step(proc: subprocess.Popen, out: Path, step: int, limit_s: float) -> None:
    """Until step `step` is logged and checkpointed (save_steps 1)."""
    deadline = time.monotonic() + limit_s
    while steps_logged(out) < step or not (out / f"checkpoint-{step}" / "COMPLETE").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"run ended or stalled before step {step} (rc {proc.poll()})")
        time.sleep(0.05)


def kill_run(proc: subprocess.Popen) -> None:
    """SIGKILL the driver, then whatever it left in its session (its local Ray)."""
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def ledger_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def check_ledger(out: Path, steps: int, groups_per_step: int = BATCH) -> None:
    """Every group of steps 1..`steps` trained exactly once; none recorded twice."""
    rows = ledger_rows(out)
    counts = Counter(r["seq"] for r in rows)
    twice = sorted(s for s, n in counts.items() if n > 1)
    assert not twice, f"groups recorded more than once: {twice[:10]}"
    trained = sorted(r["seq"] for r in rows if r["fate"] == "trained")
    assert trained == list(range(steps * groups_per_step)), "a group was lost or trained twice"


def metrics_by_step(out: Path) -> dict[int, dict]:
    skip = ("time/", "throughput/", "idle/", "rollout/queue_depth")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: {k: v for k, v in r.items() if not k.startswith(skip)} for r in rows}


def chaos_run(work: Path, ratio: float, seed: int, kills: int, max_steps: int = 6,
              limit_s: float = 120, address: str | None = None,
              agentic: bool = False, vllm: bool = False,
              lora: bool = False) -> tuple[Path, list[str]]:
    """One run killed `kills` times at random moments (seeded) and resumed each time;
    returns its directory and what happened (for the report)."""
    rng = random.Random(seed)
    kind = "agentic-" if agentic else "vllm-" if vllm else "lora-" if lora else ""
    out = work / f"chaos-{kind}r{ratio:g}-s{seed}"
    config = write_config(work / f"{out.name}.yaml", out, ratio, max_steps, agentic=agentic,
                          vllm=vllm, lora=lora)
    log = work / f"{out.name}.log"
    events = []
    args = ["--config", str(config)]
    for _ in range(kills):
        proc = start(args, log, address)
        done = steps_logged(out)
        wait_for_step(proc, out, done + 1, limit_s)  # at least one step in every segment
        time.sleep(rng.uniform(0.0, 0.6))  # then a random moment of a later step
        if proc.poll() is not None:
            break
        kill_run(proc)
        events.append(f"SIGKILL after step {steps_logged(out)}")
        args = ["--resume", str(out)]
    proc = start(args, log, address)
    rc = proc.wait(timeout=limit_s)
    assert rc == 0, f"resumed run failed (rc {rc}); see {log}"
    check_ledger(out, max_steps, AGENTIC_GROUPS if agentic else BATCH)
    if lora:  # LoRA was on: the checkpoint holds the adapter, not the model
        held = sorted(p.name for p in (out / f"checkpoint-{max_steps}" / "actor_train").iterdir())
        assert "adapter" in held and "model" not in held, f"not a LoRA checkpoint: {held}"
    return out, events


# (async_generation_ratio, kind) of each run of a `make chaos` round
KINDS_RUN = ((0.0, "rlvr"), (1.0, "rlvr"), (1.0, "agentic"), (1.0, "vllm"), (1.0, "lora"))
KINDS = dict.fromkeys(kind for _, kind in KINDS_RUN)


def main() -> None:  # `make chaos`
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("/tmp/flywheel-chaos"))
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS),
                        help="which kinds of run (default: all)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    for seed in range(args.rounds):
        for ratio, kind in KINDS_RUN:
            if kind not in args.kinds:
                continue
            t0 = time.monotonic()
            out, events = chaos_run(args.work, ratio, seed, kills=3, max_steps=8,
                                    agentic=kind == "agentic", vllm=kind == "vllm",
                                    lora=kind == "lora",
                                    limit_s=300 if kind in ("vllm", "lora") else 120)
            print(f"{kind} r={ratio:g} seed={seed}: {', '.join(events)}; every group trained "
                  f"once ({time.monotonic() - t0:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
