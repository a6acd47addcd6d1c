"""The train/infer filter (algorithms/infer_filter.py), ROLL's train_infer_correction
filters, on numbers worked out by hand; and the config that turns it on."""

from __future__ import annotations

import math

import pytest
import torch

from flywheel.algorithms import MismatchCorrection, TrainInferFilter, train_infer_filter
from flywheel.algorithms.infer_filter import segment_mean
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.loop.step_loop import mismatch_correction
from flywheel.platform.config.errors import ConfigError

# One agentic row: two turns of model tokens (mask 1) around an observation (mask 0).
MASK = torch.tensor([[1, 1, 0, 0, 1, 1, 1]])
# sampler probabilities, and the trainer's: turn 1 agrees, turn 2 moves mass on token 4
P_INFER = torch.tensor([[0.5, 0.5, 0.3, 0.3, 0.2, 0.5, 0.5]])
P_OLD = torch.tensor([[0.5, 0.5, 0.9, 0.9, 0.5, 0.5, 0.5]])


def run(rule):
    return train_infer_filter(P_OLD.log(), P_INFER.log(), MASK, rule)


def test_segment_mean_is_per_run_of_model_tokens():
    values = torch.tensor([[1.0, 3.0, 9.0, 9.0, 3.0, 6.0, 0.0]])
    assert segment_mean(values, MASK.bool()).tolist() == [[2.0, 2.0, 0, 0, 3.0, 3.0, 3.0]]


def test_levels_by_hand():
    # token: token 4 has ratio 2.5 and difference 0.3; the masked tokens never count
    keep, metrics = run(TrainInferFilter("token", ratio_band=(0.8, 1.2)))
    assert keep.tolist() == [[1, 1, 0, 0, 0, 1, 1]]
    assert metrics["offpolicy/filter_kept_frac"] == pytest.approx(4 / 5)
    assert metrics["offpolicy/prob_diff_mean"] == pytest.approx(0.3 / 5)
    # segment: turn 2's geometric ratio is 2.5 ** (1/3) = 1.357, its mean difference 0.1
    keep, _ = run(TrainInferFilter("segment", ratio_band=(0.8, 1.3)))
    assert keep.tolist() == [[1, 1, 0, 0, 0, 0, 0]]
    keep, _ = run(TrainInferFilter("segment", ratio_band=(0.8, 1.4), diff_band=(-0.05, 0.05)))
    assert keep.tolist() == [[1, 1, 0, 0, 0, 0, 0]]  # the difference band drops turn 2
    keep, _ = run(TrainInferFilter("segment", diff_band=(-0.1, 0.11)))
    assert keep.tolist() == [[1, 1, 0, 0, 1, 1, 1]]
    # geometric: 2.5 ** (1/5) = 1.201 over the row; sequence: 2.5 and difference 0.3
    assert run(TrainInferFilter("geometric", ratio_band=(0.8, 1.2)))[0].sum() == 0
    assert run(TrainInferFilter("geometric", ratio_band=(0.8, 1.21)))[0].sum() == 5
    assert run(TrainInferFilter("sequence", diff_band=(-0.29, 0.29)))[0].sum() == 0
    assert run(TrainInferFilter("sequence", ratio_band=(2.4, 2.6)))[0].sum() == 5
    assert math.isclose(2.5 ** (1 / 5), 1.2011, abs_tol=1e-4)


def test_the_filter_multiplies_the_weight_or_stands_alone():
    rule = TrainInferFilter("token", ratio_band=(0.8, 1.2))
    alone = MismatchCorrection(apply=True, weigh=False, filter=rule)
    weights, metrics = alone(P_OLD.log(), P_INFER.log(), MASK)
    assert weights.tolist() == [[1, 1, 0, 0, 0, 1, 1]] and "offpolicy/filter_kept_frac" in metrics
    truncated = MismatchCorrection("token", "truncate", upper=2.0, apply=True, filter=rule)
    weights, _ = truncated(P_OLD.log(), (P_INFER * torch.tensor([[1, 1, 1, 1, 1, 1.1, 1]])).log(),
                           MASK)
    assert weights[0, 5].item() == pytest.approx(1 / 1.1) and weights[0, 4].item() == 0
    with pytest.raises(ValueError, match="needs a ratio band"):
        TrainInferFilter("token")


def test_config_turns_the_filter_on_and_refuses_what_would_not_act():
    cfg = load_config_dict({"infer_filter_level": "segment", "infer_filter_diff_band": [-0.1, 0.1]})
    correction = mismatch_correction(cfg)
    assert correction.apply and not correction.weigh
    assert correction.filter == TrainInferFilter("segment", None, (-0.1, 0.1))
    assert mismatch_correction(load_config_dict({})).filter is None
    for data, key, message in (
            ({"infer_filter_level": "token"}, "infer_filter_level", "infer_filter_ratio_band"),
            ({"infer_filter_ratio_band": [0.8, 1.2]}, "infer_filter_ratio_band",
             "infer_filter_level"),
            ({"infer_filter_level": "token", "infer_filter_diff_band": [0.1, -0.1]},
             "infer_filter_diff_band", "low <= high")):
        with pytest.raises(ConfigError, match=message) as error:
            load_config_dict(data)
        assert error.value.key_path == key
