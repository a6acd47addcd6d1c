"""A small agentic config on the latency-only backends, for scheduling and fault tests.

Envs, env workers, Ray actors, prefetch generator, buffer and ledger are the real ones;
sim_infer answers every turn with random tokens (the envs count them as invalid actions)
and sim_train only takes time, so a run of a few steps takes seconds.
"""

from __future__ import annotations

import copy


def agentic_sim_config(output_dir, ratio: float, *, gen_s: float = 0.002,
                       train_s: float = 0.03, jitter: float = 0.0, seed: int = 0,
                       **top) -> dict:
    cfg = {
        "pipeline_type": "agentic", "exp_name": "agentic_sim", "seed": seed,
        "output_dir": str(output_dir), "pretrain": "builtin://tiny-qwen2",
        "async_generation_ratio": ratio,
        "rollout_batch_size": 8, "val_batch_size": 4,  # 2 groups of 4 episodes per step
        "max_steps": 6, "eval_steps": 3, "logging_steps": 100,
        "tracking": {"mlflow": False},
        "actor_train": {
            "strategy_args": {"strategy_name": "sim_train", "strategy_config": {
                "seconds_per_step": train_s, "jitter": jitter}},
            "device_mapping": [0],
            "training_args": {"per_device_train_batch_size": 8},
        },
        "actor_infer": {
            "strategy_args": {"strategy_name": "sim_infer", "strategy_config": {
                "seconds_per_prompt": gen_s, "jitter": jitter}},
            "device_mapping": [1],
        },
        "train_env_manager": {"num_env_groups": 2, "group_size": 4,
                              "max_env_num_per_worker": 4},  # 2 env workers, 1 group each
        "val_env_manager": {"num_env_groups": 4, "group_size": 1},
        "custom_envs": {"FrozenLake": {
            "env_type": "frozen_lake", "max_steps": 2, "max_tokens_per_step": 6,
            "agent_system_template": "", "agent_template": "{observation}\n",
            "env_config": {"size": 3, "env_instruction": ""}}},
    }
    return {**copy.deepcopy(cfg), **top}
