"""A small RLVR config on the latency-only backends, for scheduling tests.

Everything but the model maths is real (Ray actors, prefetch generator, rewards, ledger);
generation and training only take time (with seeded jitter), so tests can sweep
latencies and ratios in seconds.
"""

from __future__ import annotations

import copy


def sim_config(output_dir, ratio: float, *, gen_s: float = 0.004, train_s: float = 0.04,
               jitter: float = 0.0, seed: int = 0, **top) -> dict:
    cfg = {
        "exp_name": "sim", "seed": seed, "output_dir": str(output_dir),
        "pretrain": "builtin://tiny-qwen2", "async_generation_ratio": ratio,
        "rollout_batch_size": 8, "num_return_sequences_in_group": 2,
        "max_steps": 8, "eval_steps": 3, "val_batch_size": 8, "logging_steps": 100,
        "tracking": {"mlflow": False},
        "actor_train": {
            "strategy_args": {"strategy_name": "sim_train", "strategy_config": {
                "seconds_per_step": train_s, "jitter": jitter}},
            "device_mapping": [0],
            "training_args": {"per_device_train_batch_size": 16},
            "data_args": {"file_name": ["builtin://arithmetic/train"]},
        },
        "actor_infer": {
            "strategy_args": {"strategy_name": "sim_infer", "strategy_config": {
                "seconds_per_prompt": gen_s, "jitter": jitter}},
            "device_mapping": [1],
            "generating_args": {"max_new_tokens": 4},
            "infer_batch_size": 4,
        },
        "validation": {"data_args": {"file_name": ["builtin://arithmetic/val"]}},
    }
    merged = {**copy.deepcopy(cfg), **top}
    if not merged["eval_steps"]:  # a validation block never run is refused (issue 24)
        del merged["validation"]
    return merged
