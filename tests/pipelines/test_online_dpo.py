"""`pipeline_type: online_dpo` (pipelines/online_dpo/rollout.py): a group's pair is its best
and worst sample, laid in the pair layout the pairwise loss reads; a tied group gives no
pair and is counted, and the replay buffer's filter drops tied groups for this kind; the
kind's refusals name their keys. A 2-step run on the tiny model logs the DPO metrics and
equals, number for number, a plain synchronous loop written from the strategies' APIs.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from flywheel.algorithms.preference.pair_logprobs import PAIR_EXTRA, split_pairs
from flywheel.pipelines.config import load_config, load_config_dict
from flywheel.pipelines.data.records import PromptRecord
from flywheel.pipelines.loop.group_filter import group_filter
from flywheel.pipelines.online_dpo.rollout import OnlineDPORollout, group_pairs
from flywheel.pipelines.rlvr.generation import Group
from flywheel.pipelines.run.launch import run
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.strategies.base import Generation

from .plain_loop import TIMING
from .plain_online_dpo_loop import plain_online_dpo_loop

EXAMPLE = "examples/online_dpo_tiny.yaml"


def group(seq, scores, prompt=(1, 2)):
    responses = [Generation(0, [10 + seq, 20 + i], [-0.5, -0.25], "stop")
                 for i in range(len(scores))]
    return Group(seq, PromptRecord(str(seq), "p", "a", "t"), list(prompt), responses, 0,
                 list(scores))


def test_a_groups_pair_is_its_best_and_worst_sample_and_a_tie_gives_none():
    groups = [group(0, [0.0, 1.0, 0.5]), group(1, [1.0, 1.0, 1.0]),
              group(2, [0.2, 0.1, 0.9, 0.1])]
    pairs = group_pairs(groups)
    # rows: group 0 is 0..2, group 1 3..5 (tied: no pair), group 2 6..9
    assert pairs.chosen.tolist() == [1, 8] and pairs.rejected.tolist() == [0, 7]
    assert pairs.groups.tolist() == [0, 2] and pairs.dropped == 1  # first of equal lows


def test_pack_lays_the_pairs_for_the_pair_loss_and_counts_the_ties():
    rollout = OnlineDPORollout(SimpleNamespace(tokenizer=SimpleNamespace(pad_token_id=0)))
    batch = rollout.pack([group(0, [0.0, 1.0]), group(1, [0.5, 0.5]),
                          group(2, [0.3, 0.7, 0.1])])
    assert batch.scores.tolist() == pytest.approx([1.0, 0.0, 0.7, 0.1])
    assert batch.input_ids[:, 2:].tolist() == [[10, 21], [10, 20], [12, 21], [12, 22]]
    chosen, rejected = split_pairs(batch.scores, batch.extra(PAIR_EXTRA))
    assert torch.all(chosen > rejected)
    said = rollout.add_advantages(batch, 0.0)
    assert said["online_dpo/pairs"] == 2.0 and said["online_dpo/tied_groups"] == 1.0
    assert said["online_dpo/chosen_score"] == pytest.approx(0.85)
    with pytest.raises(RuntimeError, match="nothing to prefer"):
        rollout.pack([group(0, [1.0, 1.0])])


def test_the_buffer_drops_tied_groups_for_online_dpo_only():
    cfg = load_config(EXAMPLE)
    assert not cfg.drop_uniform_groups and group_filter(cfg).drop_uniform
    rlvr = load_config_dict({"pipeline_type": "rlvr"})
    assert not group_filter(rlvr).drop_uniform


BASE = {"pipeline_type": "online_dpo", "reference": {}}


@pytest.mark.parametrize(("extra", "key", "says"), [
    ({"adv_estimator": "reinforce"}, "adv_estimator", "online DPO does not read it"),
    ({"init_kl_coef": 0.1}, "init_kl_coef", "online DPO does not read it"),
    ({"chosen_key": "good"}, "chosen_key", "acts in pipeline_type dpo or reward_model only"),
    ({"actor_train": {"pg_variant": "tis"}}, "actor_train.pg_variant", "pairwise loss"),
    ({"reference": None}, "reference", "add a reference block"),
    ({"dpo_loss_type": "simpo"}, "reference", "uses no reference"),
    ({"actor_train": {"training_args": {"per_device_train_batch_size": 3}}},
     "actor_train.training_args.per_device_train_batch_size", "split a pair"),
    ({"simpo_gamma": 1.0}, "simpo_gamma", "SimPO's margin"),
])
def test_config_errors(extra, key, says):
    data = {k: v for k, v in {**BASE, **extra}.items() if v is not None}
    with pytest.raises(ConfigError) as error:
        load_config_dict(data)
    assert error.value.key_path == key and says in str(error.value), str(error.value)


def batch(group: int, rows: int) -> dict:
    return {**BASE, "rollout_batch_size": 8, "num_return_sequences_in_group": group,
            "actor_train": {"training_args": {"per_device_train_batch_size": rows}}}


def test_the_batch_check_counts_the_pairs_rows_not_the_samples():
    """A step trains each group's pair, 2 rows, whatever the group size: 8 prompts fill
    one optimizer step of 16 rows with groups of 3, and half of one of 32 with groups of 4."""
    assert load_config_dict(batch(group=3, rows=16)).num_return_sequences_in_group == 3
    with pytest.raises(ConfigError) as error:
        load_config_dict(batch(group=4, rows=32))
    assert error.value.key_path == "rollout_batch_size"
    assert "8 x 2 = 16 rows per step" in str(error.value), str(error.value)


def test_the_example_validates_with_its_roles():
    cfg = load_config(EXAMPLE)
    assert cfg.pipeline_type == "online_dpo" and cfg.reference is not None


def short_overrides(out, *extra: str) -> list[str]:
    """The example shrunk: 8 prompts x 4 samples a step (two chunks of 4 prompts)."""
    return [f"output_dir={out}", "max_steps=2", "save_steps=0", "rollout_batch_size=8",
            "num_return_sequences_in_group=4", "logging_steps=100",
            "actor_train.training_args.per_device_train_batch_size=16", *extra]


@pytest.fixture(scope="module")
def short_online_run(tmp_path_factory, ray_session, arith_model_path):
    """2 steps of the example through Ray (four roles), validating at steps 0 and 2."""
    out = tmp_path_factory.mktemp("online_dpo") / "run"
    cfg = load_config(EXAMPLE, short_overrides(out, "eval_steps=2", "val_batch_size=16"))
    return [json.loads(x) for x in (run(cfg) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.long  # a Ray run of four roles, ~20 s idle: the suite's budget (make test-long)
def test_a_short_online_dpo_run_trains_pairs_and_logs_the_dpo_metrics(short_online_run):
    rows = short_online_run
    steps = [r for r in rows if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert 1 <= r["online_dpo/pairs"] <= 8
        assert r["online_dpo/chosen_score"] > r["online_dpo/rejected_score"]
        assert r["online_dpo/tied_groups"] == 0.0  # dropped by the filter before the batch
    assert steps[0]["dpo/reward_margin"] == pytest.approx(0.0, abs=1e-6)  # policy = ref
    assert rows[0]["step"] == 0 and "val/accuracy" in rows[0] and "val/accuracy" in steps[-1]


@pytest.mark.slow
@pytest.mark.long  # shares that run, plus the plain loop (~10 s)
def test_ratio_zero_online_dpo_equals_the_plain_synchronous_loop(short_online_run, tmp_path,
                                                                 arith_model_path):
    """The run's 2 steps (Ray actors, the prefetch thread, the replay buffer's filter and
    refill, the step loop, the kind's pack and loss) equal a loop in this process that
    calls the strategies and the reward directly (plain_online_dpo_loop.py), every
    training number exactly: the same groups kept, the same pairs, the same losses."""
    cfg = load_config(EXAMPLE, short_overrides(tmp_path, "eval_steps=0", "validation=null"))
    plain = plain_online_dpo_loop(cfg, arith_model_path, 2)
    piped = [r for r in short_online_run if r["step"] > 0]
    assert [r["step"] for r in piped] == [1, 2] and len(plain) == 2
    for got, want in zip(piped, plain, strict=True):
        assert got["staleness/max"] == 0
        assert {"dpo/loss", "dpo/reward_margin", "actor/grad_norm",
                "online_dpo/pairs"} <= want.keys()  # not a vacuous match
        for key, value in want.items():
            if not key.startswith(TIMING):
                assert got[key] == value, (got["step"], key, got[key], value)
    assert any(r["rollout/dropped_filtered"] > 0 for r in piped)  # a refill was exercised
