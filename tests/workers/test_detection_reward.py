"""The detection reward (ROLL's DetectionRewardWorker, its IoU terms) on hand-made boxes: the
IoU, the greedy match, the label check, the size penalty and the format term worked out by
hand (workers/rewards/detection.py has the formula)."""

import json

import pytest

from flywheel.platform.config.schema import RewardConfig
from flywheel.workers.rewards.detection import DetectionArgs, parse_boxes, score_with
from flywheel.workers.rewards.registry import reward_fn

GOLD = '<answer>[{"bbox_2d": [0, 0, 100, 100], "label": "circle"}]</answer>'


def answer(*boxes) -> str:
    return "<answer>" + json.dumps([{"bbox_2d": b, "label": lab} for b, lab in boxes]) \
        + "</answer>"


def score(response: str, reference: str = GOLD, **args) -> float:
    return score_with(DetectionArgs(**args), response, reference).score


def test_an_exact_box_scores_one_and_a_half_overlap_its_iou():
    assert score(GOLD) == pytest.approx(1.0)  # (1 + 0.1) / 1.1
    # [50, 0, 150, 100] overlaps 50x100 of a 15000 union: IoU 1/3
    assert score(answer(([50, 0, 150, 100], "circle"))) == pytest.approx((1 / 3 + 0.1) / 1.1)
    # disjoint: format only
    assert score(answer(([200, 200, 300, 300], "circle"))) == pytest.approx(0.1 / 1.1)


def test_a_wrong_label_earns_no_iou_and_labels_compare_case_blind():
    assert score(answer(([0, 0, 100, 100], "square"))) == pytest.approx(0.1 / 1.1)
    assert score(answer(([0, 0, 100, 100], "Circle"))) == pytest.approx(1.0)


def test_extra_boxes_cost_the_size_penalty_and_match_greedily_by_iou():
    # the exact box matches the gold one; the extra box is unmatched: 1 * 0.6 ** 1
    two = answer(([50, 0, 150, 100], "circle"), ([0, 0, 100, 100], "circle"))
    assert score(two) == pytest.approx((0.6 + 0.1) / 1.1)
    # two gold boxes, one predicted exactly: mean over gold (1 + 0) / 2, times 0.6
    gold = answer(([0, 0, 100, 100], "circle"), ([200, 0, 300, 100], "square"))
    assert score(answer(([200, 0, 300, 100], "square")), gold) == pytest.approx(
        (0.5 * 0.6 + 0.1) / 1.1)


def test_min_iou_and_format_ratio_act():
    half = answer(([50, 0, 150, 100], "circle"))  # IoU 1/3
    assert score(half, min_iou=0.5) == pytest.approx(0.1 / 1.1)
    assert score(half, format_ratio=0.0) == pytest.approx(1 / 3)


def test_replies_that_do_not_parse_score_zero():
    for reply in ("circle at the top left", '[{"bbox_2d": [0, 0, 100, 100], "label": '
                  '"circle"}]', "<answer>[{\"bbox_2d\": [0, 0, 100]}]</answer>",
                  "<answer>not json</answer>", answer(([100, 0, 0, 100], "circle")),
                  answer(([0, 0, True, 100], "circle")),
                  "<answer>" + "[" * 5000 + "</answer>"):  # nests past Python's stack
        result = score_with(DetectionArgs(), reply, GOLD)
        assert (result.score, result.metadata["parsed"]) == (0.0, False), reply
    # two answer tags: the boxes still count, the format does not
    assert score(GOLD + GOLD) == pytest.approx(1.0 / 1.1)
    assert parse_boxes(answer(([0, 0, 1, 1], "a"), ([0, 0, 1, 1], "b"))) == [
        ((0.0, 0.0, 1.0, 1.0), "a")]  # a repeated box is dropped


def test_the_reward_is_registered_with_its_settings_checked():
    fn = reward_fn("detection", RewardConfig(reward_type="detection",
                                             reward_args={"min_iou": 0.5}))
    assert fn("", answer(([50, 0, 150, 100], "circle")), GOLD).score == pytest.approx(0.1 / 1.1)
    with pytest.raises(ValueError, match="min_iou"):
        DetectionArgs(min_iou=2.0)
    with pytest.raises(ValueError, match="no box"):
        score("x", reference="red")
