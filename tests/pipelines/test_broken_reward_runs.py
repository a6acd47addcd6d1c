"""Real runs of a broken reward function, as a user meets them (issues 44 and 53): one that
raises on every sample and one that never answers stop the run with a named error and a
non-zero exit, saying so on the console first, instead of finishing "done" (the raising
one) or costing sample_timeout_s per sample in silence (the hanging one). The in-process
checks of each piece are tests/workers/test_reward_limits.py's; these are the end to end
versions, through `platform run` in a process of its own (about 2 minutes each, under load).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG = """
exp_name: {name}
seed: 1
pipeline_type: rlvr
pretrain: builtin://tiny-qwen2-arith
import_allowlist: [tests.workers]
async_generation_ratio: 0
rollout_batch_size: 4
num_return_sequences_in_group: 4
prompt_length: 16
response_length: 4
max_steps: 5
logging_steps: 1
eval_steps: 0
adv_estimator: grpo
output_dir: {out}
actor_train:
  model_args: {{dtype: fp32}}
  training_args: {{learning_rate: 1.0e-4, per_device_train_batch_size: 16}}
  data_args: {{template: native, file_name: [builtin://arithmetic/train]}}
  device_mapping: [0]
actor_infer:
  generating_args: {{max_new_tokens: 4, num_return_sequences: 4}}
  device_mapping: [0]
rewards:
  broken:
    reward_type: python
    reward_import_path: tests.workers.hostile_rewards:{function}
{limits}
"""


def platform_run(tmp_path: Path, function: str, limits: str) -> subprocess.CompletedProcess:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(name=function, out=tmp_path / "run", function=function,
                                    limits=limits))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    platform = Path(sys.executable).parent / "platform"  # the CLI a user runs
    return subprocess.run([str(platform), "run", "--config", str(config)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=540)


@pytest.mark.long
@pytest.mark.timeout(600)
def test_a_reward_that_always_raises_stops_the_run_after_max_failed_steps(tmp_path):
    done = platform_run(tmp_path, "always_raises", "    max_failed_steps: 2")
    assert done.returncode == 1, done.stderr[-2000:]
    said = done.stdout + done.stderr
    assert "step 1: reward 'broken' scored 0 of its 16 samples (unscored: fn_error 16" in said
    assert ("error: RewardScoresNothing: reward 'broken' scored none of its samples in 2 "
            "steps in a row") in said
    assert "step 3" not in said


@pytest.mark.long
@pytest.mark.timeout(600)
def test_a_reward_that_always_hangs_stops_the_run_at_max_consecutive_timeouts(tmp_path):
    done = platform_run(tmp_path, "always_hangs",
                        "    sample_timeout_s: 2\n    max_consecutive_timeouts: 4")
    assert done.returncode == 1, done.stderr[-2000:]
    said = done.stdout + done.stderr
    assert ("rewards.broken: reward 'python': a sample timed out at sample_timeout_s 2s"
            in said)  # the first timeout, on the console while the step ran
    assert "RewardHangs: reward 'python': 4 samples in a row timed out" in said
    assert "step 1/" not in said  # no step of 16 x 2 s trained on zeros
