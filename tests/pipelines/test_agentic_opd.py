"""On-policy distillation over agentic episodes (pipelines/distill/episode_teachers.py):
each teacher scores the packed trajectories, and under opd_mode pure the advantage of a
model token is its ℓ_teacher − ℓ_student, 0 on the env's tokens; what agentic OPD refuses.
Without Ray: the teacher role here is an in-process stand-in answering `forward_logprobs`
with a real tiny model's forward (a ranked role's interface), a test double of the role
only. The Ray run is `make test-long` (test_agentic_opd_run)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from flywheel.pipelines.agentic.batch import agentic_advantages, pack_trajectories
from flywheel.pipelines.distill.episode_teachers import score_episodes
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.models.tiny_qwen2 import build_tiny_qwen2
from flywheel.platform.models.tiny_qwen2_spec import TinyQwen2Spec
from flywheel.workers.strategies.hf_model import sequence_logprobs
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.model_head import POLICY

from .test_agentic_batch import agentic_cfg, played_groups


@dataclass
class Done:
    value: torch.Tensor

    def result(self) -> torch.Tensor:
        return self.value


@dataclass
class LocalTeacher:
    """A teacher role of `world_size` ranks: checks the rows divide them, then forwards."""

    strategy: HFTrainStrategy
    world_size: int = 1
    seen_rows: int = 0

    def forward_logprobs(self, batch) -> Done:
        assert len(batch) % self.world_size == 0
        self.seen_rows = len(batch)
        return Done(self.strategy.forward_logprobs(batch))


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A random tiny Qwen2 (its 15-id vocabulary: the test folds the episodes' character
    ids into it)."""
    path = build_tiny_qwen2(tmp_path_factory.mktemp("lake_teacher"), TinyQwen2Spec(seed=3))
    cfg = agentic_cfg().actor_train
    return HFTrainStrategy(str(path), cfg, seed=0, total_steps=1, trainable=False,
                           head=POLICY)


def test_pure_opd_credits_each_model_token_its_teacher_log_ratio(teacher):
    cfg = agentic_cfg(teacher={"t": {"model_args": {"model_name_or_path": "x"}}},
                      opd_mode="pure")
    groups = played_groups(cfg, ["Right", "Down", "Down", "Right"])
    batch = pack_trajectories(groups, pad_id=0, gamma=1.0)
    batch.input_ids = batch.input_ids % teacher.model.config.vocab_size
    role = LocalTeacher(teacher, world_size=3)  # 4 rows padded to 6
    score_episodes(batch, {"t": role})
    assert role.seen_rows == 6
    with torch.no_grad():
        want = sequence_logprobs(teacher.model, batch)[0] * batch.response_mask  # [B, L]
    got = batch.extra("teacher_log_probs.t")
    assert torch.allclose(got, want, atol=1e-6) and got[batch.response_mask == 0].eq(0).all()
    metrics = agentic_advantages(batch, cfg, group_size=2, kl_coef=0.0)
    on = batch.response_mask.bool()
    assert torch.allclose(batch.advantages[on], (want - batch.infer_log_probs)[on], atol=1e-6)
    assert batch.advantages[~on].eq(0).all()
    assert metrics["distill/reverse_kl"] == pytest.approx(
        float((batch.infer_log_probs - want)[on].mean()), abs=1e-5)


@pytest.mark.parametrize("extra, key", [
    ({"teacher": {"t": {"model_args": {"model_name_or_path": "x"}, "tag_included": ["a"]}}},
     "teacher.t.tag_included"),
    ({"teacher": {"t": {"weights": "student", "context_template": "{prompt}"}}},
     "teacher.t.weights"),
    ({"teacher": {"t": {"model_args": {"model_name_or_path": "x"}}},
      "adv_estimator": "step_reinforce", "step_level_samples": True}, "step_level_samples"),
])
def test_what_agentic_opd_refuses(extra, key):
    with pytest.raises(ConfigError) as e:
        agentic_cfg(**extra)
    assert e.value.key_path == key, str(e.value)
