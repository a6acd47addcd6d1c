"""The detection reward (ROLL's DetectionRewardWorker, its IoU terms) on hand-made boxes: the
IoU, the greedy match, the label check, the size penalty and the format term worked out by
hand (workers/rewards/detection.py has the formula)."""

import json

import pytest

from flywheel.config.schema import RewardConfig
from flywheel.workers.rewards.detection import (
    ROLL_IOU_THRESHOLDS,
    DetectionArgs,
    iou,
    parse_boxes,
    score_with,
)
from flywheel.workers.rewards.detection_ap import coco_ap
from flywheel.workers.rewards.registry import Sample, sample_reward

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
    fn = sample_reward("detection", RewardConfig(reward_type="detection",
                                                 reward_args={"min_iou": 0.5}))
    reply = answer(([50, 0, 150, 100], "circle"))
    assert fn.score([Sample("", reply, GOLD)])[0].score == pytest.approx(0.1 / 1.1)
    with pytest.raises(ValueError, match="min_iou"):
        DetectionArgs(min_iou=2.0)
    with pytest.raises(ValueError, match="no box"):
        score("x", reference="red")


def test_completeness_blends_misses_and_false_alarms_into_the_iou_term():
    # one exact box and one disjoint: mean IoU 1, misses 0, false alarms 1/2:
    # completeness 1 - (0 + 0.5) / 2 = 0.75; term 0.5 * 1 + 0.5 * 0.75; size penalty 0.6
    two = answer(([0, 0, 100, 100], "circle"), ([200, 200, 300, 300], "circle"))
    ratio = {"iou_max_iou_first": 1.0, "iou_completeness": 0.5}
    assert score(two, det_reward_ratio=ratio) == pytest.approx((0.875 * 0.6 + 0.1) / 1.1)


def test_the_iou_terms_average_over_rolls_thresholds():
    # IoU 0.8 matches at 0.5, 0.55, ..., 0.8 (7 of ROLL's 11 thresholds), not above
    reply = answer(([0, 0, 100, 80], "circle"))
    assert score(reply, iou_thresholds=ROLL_IOU_THRESHOLDS) == pytest.approx(
        (0.8 * 7 / 11 + 0.1) / 1.1)
    with pytest.raises(ValueError, match="write one"):
        DetectionArgs(min_iou=0.5, iou_thresholds=[0.5])


def test_label_first_matching_finds_the_same_label_box_iou_first_misses():
    # the exact box is a dog: IoU-first matches it to the cat (IoU counted 0) and stops;
    # label-first gives the cat its cat box at IoU 0.5. Two replies for one box: 0.6.
    gold = answer(([0, 0, 100, 100], "cat"))
    reply = answer(([0, 0, 100, 100], "dog"), ([0, 0, 100, 50], "cat"))
    args = {"iou_thresholds": [0.5], "format_ratio": 0.0}
    assert score(reply, gold, det_reward_ratio={"iou_max_iou_first": 1.0}, **args) == 0.0
    assert score(reply, gold, det_reward_ratio={"iou_max_label_first": 1.0},
                 **args) == pytest.approx(0.5 * 0.6)


def test_coco_ap_worked_by_hand():
    # two cats; replies: G2 exact, a miss, G1 exact. Precision 1, 1/2, 2/3 at recall
    # 1/2, 1/2, 1 -> envelope 1, 2/3, 2/3: recall points 0..0.50 (51) take 1, the 50
    # above take 2/3; every threshold alike (exact boxes)
    gold = [((0, 0, 10, 10), "cat"), ((20, 0, 30, 10), "cat")]
    pred = [((20, 0, 30, 10), "cat"), ((50, 50, 60, 60), "cat"), ((0, 0, 10, 10), "cat")]
    ap = (51 + 50 * 2 / 3) / 101
    assert coco_ap(pred, gold, iou) == pytest.approx({"map": ap, "map50": ap, "map75": ap})
    # the miss first: precision 0, 1/2, 2/3; the envelope lifts every point to 2/3
    late = [((50, 50, 60, 60), "cat"), ((0, 0, 10, 10), "cat"), ((20, 0, 30, 10), "cat")]
    assert coco_ap(late, gold, iou)["map"] == pytest.approx(2 / 3)
    # IoU 0.72: a hit at 0.5..0.7 (5 of 10 thresholds), a miss from 0.75; a reply box of
    # a label the reference lacks is left out; no reply box of a reference label: all 0
    one = [((0, 0, 100, 100), "cat")]
    assert coco_ap([((0, 0, 100, 72), "cat"), ((0, 0, 5, 5), "dog")], one, iou) == \
        pytest.approx({"map": 0.5, "map50": 1.0, "map75": 0.0})
    assert coco_ap([((0, 0, 5, 5), "dog")], one, iou) == {"map": 0.0, "map50": 0.0,
                                                          "map75": 0.0}


def test_map_terms_weigh_in_and_a_records_own_settings_replace_reward_args():
    reply = answer(([0, 0, 100, 72], "circle"))  # IoU 0.72: map 0.5, map50 1
    assert score(reply, det_reward_ratio={"map": 1.0, "map50": 1.0}) == pytest.approx(
        (0.75 + 0.1) / 1.1)
    fn = sample_reward("detection", RewardConfig(reward_type="detection"))
    record = {"reward_model": {"ground_truth": GOLD, "format_ratio": 0.0,
                               "verifier_parm": {"det_reward_ratio": {"map50": 1.0}}}}
    plain, own = fn.score([Sample("", reply, GOLD), Sample("", reply, GOLD, record)])
    assert plain.score == pytest.approx((0.72 + 0.1) / 1.1)
    assert own.score == pytest.approx(1.0)
    with pytest.raises(ValueError, match="unknown term"):
        DetectionArgs(det_reward_ratio={"miou": 1.0})
