"""A converted ROLL GEM file's tool tag through an env worker, in process (no Ray): the job
the converted config plans carries the tag's tools in GEM's call tags, the worker wraps its
`roll_qa` envs with the local search, and a scripted model that searches, then answers from
the result, wins every episode; the search result reaches the next prompt unmasked."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from flywheel.envs import group_seed, make
from flywheel.pipelines.agentic.batch import env_metrics
from flywheel.pipelines.agentic.env_jobs import EpisodeGroup, train_jobs
from flywheel.pipelines.config import convert_roll, load_config_dict
from flywheel.workers.env_worker import EnvWorker

ROOT = Path(__file__).parents[2]


def test_env_worker_plays_a_converted_gem_qa_tag_with_its_search_tool(
        tmp_path, tiny_model_path, monkeypatch):
    conversion = convert_roll(ROOT / "tests/data/configs/roll/gem/gem_tools.yaml")
    monkeypatch.chdir(ROOT)  # the converted file names the shipped data by relative path
    data = {**conversion.data, "pretrain": tiny_model_path, "output_dir": str(tmp_path)}
    data["custom_envs"]["QaSearch"]["max_tokens_per_step"] = 128  # the tiny model is char-level
    cfg = load_config_dict(data)
    job = next(j for j in train_jobs(cfg, batch_index=0, infer_workers=1)
               if j.tag == "QaSearch")
    assert job.tool_use.call_format == "tags" and job.tool_use.tools[0].tool_id == "search"
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "2"))
    worker = EnvWorker("env_workers", 0, 1, tiny_model_path, infer_actors=[],
                       num_threads=torch.get_num_threads())
    manager = worker._manager(job)  # each env a ToolEnv(QuestionEnv) in its own process
    # replicas here, reset as the manager resets env i, tell the scripted model the item
    size = job.manager.group_size
    envs = [make(job.manager.env_type, **job.manager.env_config)
            for _ in range(len(manager.envs))]
    for i, env in enumerate(envs):
        env.reset(seed=group_seed(job.seed, i // size))
    eos = worker.codec.tokenizer.eos_token_id

    def generate(prompts, max_tokens):
        replies = []
        for prompt, env in zip(prompts, envs):
            question, answer = env.item
            seen = worker.codec.decode(prompt)
            text = (f"<answer>{answer}</answer>" if "[1] " in seen
                    else f"<search>{question}</search>")
            ids = worker.codec.encode(text) + [eos]
            replies.append((ids, [-1.0] * len(ids)))
        return replies

    trajectories = manager.rollout(generate, worker.codec, job.seed)
    worker.close()
    metrics = env_metrics([EpisodeGroup(0, "QaSearch", trajectories, 0, [0, 0])], "env/")
    assert metrics["env/success"] == 1.0 and metrics["env/tool_valid_calls"] == 1.0
    # ROLL's tool_success_reward 0.2 for the search, then 1 for the answer
    assert [t.rewards for t in trajectories] == [[0.2, 1.0]] * len(trajectories)
    t = trajectories[0]
    first = worker.codec.decode(t.input_ids[:t.prompt_length])
    assert "<search>...</search>" in first  # the tool instructions follow the question
    between = worker.codec.decode(t.input_ids[t.turn_spans[0][1]:t.turn_spans[1][0]])
    assert "[1] " in between and not any(t.response_mask[t.turn_spans[0][1]:t.turn_spans[1][0]])
