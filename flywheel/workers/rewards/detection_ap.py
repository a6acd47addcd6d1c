"""COCO average precision of one reply's boxes against one image's reference boxes: the
mAP terms of ROLL's DetectionRewardWorker (behaviour only), our own code.

The metric is COCO's box AP (Lin et al. 2014, "Microsoft COCO: Common Objects in
Context", and the COCO detection evaluation, cocodataset.org/#detection-eval, as
pycocotools' COCOeval computes it), on a single image:

- per category (a label of the reference; a reply box whose label is in no reference box
  is left out, as ROLL leaves it out), the reply's boxes in their order (every box has
  confidence 1: COCOeval's stable sort keeps the reply's order), at most 100;
- at IoU threshold t, each reply box in turn takes the not yet matched reference box of
  the largest IoU >= t (the later one on a tie, as COCOeval): a true positive, else a
  false positive;
- precision and recall after each box; precision made non-increasing from the right (the
  interpolated precision); AP(t) is its mean over the 101 recall points 0, 0.01, ..., 1,
  each taking the precision at the first box whose recall reaches it (0 past the last);
- mAP = the mean of AP over the categories and the thresholds 0.5, 0.55, ..., 0.95;
  AP50 and AP75 at one threshold. A category without any reply box scores 0.

A box is (x1, y1, x2, y2) and a label (detection.py's `Box`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

MAX_DETECTIONS = 100  # COCOeval's largest maxDets, the one its AP figures use
RECALL_POINTS = [i / 100 for i in range(101)]
COCO_THRESHOLDS = [0.5 + 0.05 * i for i in range(10)]

Coords = tuple[float, float, float, float]
IoU = Callable[[Coords, Coords], float]


def category_ap(pred: Sequence[Coords], gold: Sequence[Coords], threshold: float,
                iou: IoU) -> float:
    """AP at one IoU threshold of one category's reply boxes (in order) against its
    reference boxes (at least one)."""
    matched: set[int] = set()
    hits: list[bool] = []
    for box in pred[:MAX_DETECTIONS]:
        best, found = min(threshold, 1 - 1e-10), -1  # COCOeval's bound: IoU 1 still matches
        for j, ref in enumerate(gold):
            value = iou(box, ref)
            if j in matched or value < best:
                continue
            best, found = value, j
        if found >= 0:
            matched.add(found)
        hits.append(found >= 0)
    tp = fp = 0
    recall, precision = [], []
    for hit in hits:
        tp, fp = tp + hit, fp + (not hit)
        recall.append(tp / len(gold))
        precision.append(tp / (tp + fp))
    for i in range(len(precision) - 1, 0, -1):  # the envelope: non-increasing from the right
        precision[i - 1] = max(precision[i - 1], precision[i])
    total, k = 0.0, 0
    for point in RECALL_POINTS:  # recall is non-decreasing: one pass
        while k < len(recall) and recall[k] < point:
            k += 1
        total += precision[k] if k < len(recall) else 0.0
    return total / len(RECALL_POINTS)


def coco_ap(pred: Sequence[tuple[Coords, str]], gold: Sequence[tuple[Coords, str]],
            iou: IoU) -> dict[str, float]:
    """{"map", "map50", "map75"} of the reply's labelled boxes against the reference's
    (module doc); all 0 when no reply box carries a reference label."""
    labels = list(dict.fromkeys(label for _, label in gold))
    if not any(label in labels for _, label in pred):
        return {"map": 0.0, "map50": 0.0, "map75": 0.0}
    per_threshold: dict[float, float] = {}
    for t in COCO_THRESHOLDS:
        per_label = [category_ap([b for b, lab in pred if lab == label],
                                 [b for b, lab in gold if lab == label], t, iou)
                     for label in labels]
        per_threshold[t] = sum(per_label) / len(per_label)
    return {"map": sum(per_threshold.values()) / len(per_threshold),
            "map50": per_threshold[COCO_THRESHOLDS[0]],
            "map75": per_threshold[COCO_THRESHOLDS[5]]}
