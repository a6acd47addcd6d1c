"""Tool calls in agentic runs (issue 26 item 3).

- default suite, in process (no Ray: a run costs ~30 s here): the env jobs a config plans
  carry the tag's tools, an env worker built from them wraps its envs with the tools and
  the step limit, scripted replies call the calculator and answer with its result, and
  the counts come out of the pipeline's env metrics;
- long: the latency-only backends through Ray (random replies, so no call parses): the
  counts reach the run's metrics.jsonl for training and validation;
- long: the built-in tiny model, taught by a short SFT to answer every multiply question
  with one calculator call, plays through the real pipeline (actor_train on hf_train,
  actor_infer on hf_infer, env workers running the tool): calls are run, answered and
  counted for training and validation.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from flywheel.envs import make
from flywheel.pipelines.agentic.batch import env_metrics
from flywheel.pipelines.agentic.env_jobs import EpisodeGroup, train_jobs
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.run.launch import run
from flywheel.pipelines.sft.train import SFTSettings, encode_records, train_sft
from flywheel.workers.env_worker import EnvWorker
from flywheel.workers.strategies.hf_model import load_tokenizer
from tests.pipelines.agentic_sim_config import agentic_sim_config

CALL = '<tool_call>{"name":"calculator","arguments":{"expression":"6*7"}}</tool_call>'
INSTRUCTION = "{a}*{b}=?"


@pytest.fixture(scope="module")
def tool_calling_model(tmp_path_factory, tiny_model_path) -> str:
    """The tiny model after SFT on (multiply question -> CALL): it calls on every turn."""
    out = tmp_path_factory.mktemp("tool_model") / "model"
    shutil.copytree(tiny_model_path, out)
    tokenizer = load_tokenizer(str(out))
    questions = [make("multiply", min_digits=1, max_digits=2, instruction=INSTRUCTION)
                 .reset(seed=s)[0] + "\n" for s in range(32)]
    data = encode_records([{"prompt": q, "response": CALL} for q in questions], tokenizer)
    torch.manual_seed(0)
    model, losses = train_sft(out, data, SFTSettings(steps=150, lr=3e-3, batch_size=16))
    model.save_pretrained(out)
    assert losses[-1] < 0.05, losses[-10:]
    return str(out)


def config(model_path: str, out: Path) -> dict:
    return {
        "pipeline_type": "agentic", "exp_name": "tools", "seed": 0, "output_dir": str(out),
        "pretrain": model_path, "max_steps": 1, "eval_steps": 1, "logging_steps": 1,
        "rollout_batch_size": 8, "val_batch_size": 4, "sequence_length": 512,
        "tracking": {"mlflow": False},
        "actor_train": {"device_mapping": [0], "model_args": {"dtype": "fp32"},
                        "training_args": {"per_device_train_batch_size": 8}},
        "actor_infer": {"device_mapping": [1]},
        "train_env_manager": {"num_env_groups": 2, "group_size": 4, "tags": ["Multiply"]},
        "val_env_manager": {"num_env_groups": 4, "group_size": 1, "tags": ["Multiply"]},
        "custom_envs": {"Multiply": {
            "env_type": "multiply", "max_steps": 3, "max_tokens_per_step": 80,
            "agent_system_template": "", "agent_template": "{observation}\n",
            "env_config": {"min_digits": 1, "max_digits": 2, "instruction": INSTRUCTION},
            "tool_use": {"tools": [{"tool_id": "calculator"}], "max_tool_uses": 1,
                         "tool_timeout_s": 5, "max_tool_output_tokens": 16}}},
    }


COUNTS = ("tool_calls", "tool_valid_calls", "tool_malformed", "tool_unknown", "tool_errors",
          "tool_timeouts", "tool_over_budget")


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_an_env_worker_plays_a_job_with_the_tools_its_config_declares(
        tmp_path, tiny_model_path, monkeypatch):
    cfg = load_config_dict(config(tiny_model_path, tmp_path))
    [job] = train_jobs(cfg, batch_index=0, infer_workers=1)
    assert job.tool_use == cfg.custom_envs["Multiply"].tool_use
    # in this process: keep its thread settings (a worker sets them for its own process)
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "2"))
    worker = EnvWorker("env_workers", 0, 1, tiny_model_path, infer_actors=[],
                       num_threads=torch.get_num_threads())
    manager = worker._manager(job)  # each env a ToolEnv(MultiplyEnv) in its own process
    eos = worker.codec.tokenizer.eos_token_id

    def factors(prompt: list[int]) -> tuple[int, int]:
        a, b = re.search(r"(\d+)\*(\d+)=\?", worker.codec.decode(prompt)).groups()
        return int(a), int(b)

    def generate(prompts, max_tokens):
        replies = []
        for prompt in prompts:
            a, b = factors(prompt)
            if "<tool_response>" not in worker.codec.decode(prompt):
                text = CALL.replace("6*7", f"{a}*{b}")
            else:
                text = f"<answer>{a * b}</answer>"
            ids = worker.codec.encode(text) + [eos]
            replies.append((ids, [-1.0] * len(ids)))
        return replies

    trajectories = manager.rollout(generate, worker.codec, job.seed)
    worker.close()
    group = EpisodeGroup(0, "Multiply", trajectories, 0, [0, 0])
    metrics = env_metrics([group], "env/")
    assert metrics["env/success"] == 1.0 and metrics["env/episode_length"] == 2.0
    assert {k: metrics[f"env/{k}"] for k in COUNTS} == {
        "tool_calls": 1, "tool_valid_calls": 1, "tool_malformed": 0, "tool_unknown": 0,
        "tool_errors": 0, "tool_timeouts": 0, "tool_over_budget": 0}
    # the tool's answer reached the model's next prompt, in tool-response tags, unmasked
    t = trajectories[0]
    a, b = factors(t.input_ids[:t.prompt_length])
    between = worker.codec.decode(t.input_ids[t.turn_spans[0][1]:t.turn_spans[1][0]])
    assert between == f"<tool_response>\n{a * b}\n</tool_response>\n"
    assert not any(t.response_mask[t.turn_spans[0][1]:t.turn_spans[1][0]])


@pytest.mark.long  # a Ray run (~30 s on 2 cores), beyond make test's budget
def test_env_workers_play_with_tools_and_report_their_counts(tmp_path, ray_session,
                                                             tiny_model_path):
    raw = agentic_sim_config(tmp_path, 0.0, max_steps=1, eval_steps=1)
    multiply = config(tiny_model_path, tmp_path)["custom_envs"]["Multiply"]
    raw["custom_envs"] = {"Multiply": {**multiply, "max_tokens_per_step": 6}}
    for pool in ("train_env_manager", "val_env_manager"):
        raw[pool] = {**raw[pool], "tags": ["Multiply"]}
    records = read_metrics(run(load_config_dict(raw)))
    for prefix in ("env/", "val/env/"):
        metrics = next(r for r in records if f"{prefix}success" in r)
        assert {f"{prefix}{k}" for k in COUNTS} <= set(metrics), sorted(metrics)
        assert metrics[f"{prefix}tool_calls"] == 0.0  # random replies hold no call


@pytest.mark.long  # SFT of the tiny model, then a real run: 6-7 minutes on a busy 2-core box
@pytest.mark.timeout(900)
def test_tool_calls_are_run_and_counted_in_the_run_metrics(ray_session, tool_calling_model,
                                                           tmp_path):
    records = read_metrics(run(load_config_dict(config(tool_calling_model, tmp_path / "run"))))
    # Greedy validation, every episode: turn 0 is the learnt call, run and answered (42);
    # what follows the tool's answer was never trained (the env counts it as an action).
    val = next(r for r in records if "val/env/tool_calls" in r)
    assert val["val/env/tool_valid_calls"] == pytest.approx(1.0)
    for kind in ("tool_errors", "tool_timeouts", "tool_unknown"):
        assert val[f"val/env/{kind}"] == 0.0
    assert val["val/env/tool_calls"] == pytest.approx(sum(
        val[f"val/env/{k}"] for k in COUNTS if k != "tool_calls"))
    # Training samples at temperature 1: some calls come out malformed, all are counted.
    train = next(r for r in records if "env/tool_calls" in r)
    assert train["env/tool_calls"] > 0.5 and train["env/tool_valid_calls"] > 0.25
    assert train["env/tool_calls"] == pytest.approx(sum(
        train[f"env/{k}"] for k in COUNTS if k != "tool_calls"))
