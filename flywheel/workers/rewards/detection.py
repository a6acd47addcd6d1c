"""detection: boxes in the reply against the reference's boxes (ROLL's DetectionRewardWorker,
roll/pipeline/rlvr/rewards/detection_reward_worker.py, behaviour only).

Both sides are in ROLL's answer form, `<answer>[{"bbox_2d": [x1, y1, x2, y2], "label":
"circle"}, ...]</answer>`, in whatever coordinates the data uses (the shape data and ROLL's
Orsta data: 0-1000 relative to the image side). Parsing (`parse_boxes`) keeps the list
items with a `bbox_2d` of four numbers, x1 <= x2 and y1 <= y2, and a string `label`, drops
repeated boxes, and compares labels case-blind; a reply without `<answer>...</answer>`
parses to nothing.

The score, as ROLL computes it:

    score = (accuracy * accuracy_ratio + format * format_ratio)
            / (accuracy_ratio + format_ratio)
    format = 1 if the reply holds one <answer>...</answer> whose boxes parse, else 0
    accuracy = sum over terms of det_reward_ratio[term] * term * size_penalty
               / sum of the weights (0 when they sum to 0)
    size_penalty = 0.6 ** | |pred| - |gt| |

with the terms (ROLL's det_reward_ratio names):

- `iou_max_iou_first`: matches greedy by IoU, largest first over all pairs (ROLL's
  `greedy_match_by_iou_max_iou_first`; a label mismatch matches with IoU 0);
  `iou_max_label_first`: each reference box in turn takes the same-label reply box of the
  largest IoU (ROLL's `greedy_match_by_iou_max_label_first`). A pair below the threshold
  does not match. Either term is `mean_iou * (1 - c) + completeness * c`, c =
  det_reward_ratio's `iou_completeness`, mean_iou = (sum of matched IoUs) / |gt|,
  completeness = 1 - (miss rate + false-alarm rate) / 2; averaged over `iou_thresholds`
  (ROLL's default: 0.5, 0.55, ..., 0.95, 0.99), or at `min_iou` alone when that list is
  empty (min_iou 0: any overlap matches, a dense signal for a tiny model whose boxes start
  far below 0.5);
- `map`, `map50`, `map75`: COCO box AP of the reply on this one image (detection_ap.py).

Per record (ROLL's data layout): a record whose `reward_model` column is a dict with
`format_ratio`, `accuracy_ratio` or `verifier_parm.det_reward_ratio` scores with those in
place of reward_args' (ROLL reads them from each record, with a missing term weighted 0).
Left out: ROLL's Qwen2.5-VL pixel rescaling (`det_verifier_normalized`: the reference's
coordinates must be the reply's), its `DET_IOU_THRESHOLD=dynamic` schedule, and its format
check's newlines around the tags. Metadata: `parsed` (the reply's boxes parsed), `iou`
(iou_max_iou_first's mean IoU over the thresholds, before completeness and the size
penalty), `boxes`
(how many the reply gave), and `map` when the map terms are weighted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from flywheel.config.schema import RewardConfig
from flywheel.platform.config.catalogs import settings_from
from flywheel.workers.rewards.detection_ap import coco_ap
from flywheel.workers.rewards.registry import Sample, SampleReward
from flywheel.workers.rewards.result import RewardResult

OPEN, CLOSE = "<answer>", "</answer>"
SIZE_PENALTY = 0.6  # ROLL's size_penalty_ratio, per box too many or too few
# ROLL's det_reward_ratio: the weighted terms, then the completeness weight inside the IoU terms
TERMS = ("iou_max_iou_first", "iou_max_label_first", "map", "map50", "map75")
RATIO_KEYS = (*TERMS, "iou_completeness")
# ROLL's IoU thresholds (DET_IOU_THRESHOLD unset: "average" over these)
ROLL_IOU_THRESHOLDS = [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99]

Box = tuple[tuple[float, float, float, float], str]  # (x1, y1, x2, y2), lower-case label


@dataclass
class DetectionArgs:
    # Weight of the format term against accuracy_ratio (ROLL's reward_model.format_ratio,
    # default 0.1): a reply whose boxes parse earns format_ratio / (sum of the two).
    format_ratio: float = 0.1
    # Weight of the accuracy term (ROLL's reward_model.accuracy_ratio, default 1.0).
    accuracy_ratio: float = 1.0
    # A predicted box matches a reference box only at IoU >= min_iou (0: any overlap
    # counts, a dense signal), when iou_thresholds is empty.
    min_iou: float = 0.0
    # The IoU terms averaged over these thresholds (ROLL's default "average": 0.5, 0.55,
    # ..., 0.95, 0.99); empty: min_iou alone. Written with a min_iou other than 0: refused.
    iou_thresholds: list[float] = field(default_factory=list)
    # ROLL's det_reward_ratio: the weight of each accuracy term, each in [0, 1]:
    # iou_max_iou_first, iou_max_label_first, map, map50, map75, and iou_completeness (the
    # completeness share inside the two IoU terms). A key left out weighs 0.
    det_reward_ratio: dict[str, float] = field(
        default_factory=lambda: {"iou_max_iou_first": 1.0})

    def __post_init__(self) -> None:
        if self.format_ratio < 0 or self.accuracy_ratio < 0:
            raise ValueError(f"format_ratio and accuracy_ratio must be >= 0, got "
                             f"{self.format_ratio} and {self.accuracy_ratio}")
        if self.format_ratio + self.accuracy_ratio <= 0:
            raise ValueError("format_ratio + accuracy_ratio must be > 0")
        if not 0.0 <= self.min_iou <= 1.0:
            raise ValueError(f"min_iou must be in [0, 1], got {self.min_iou}")
        if not all(0.0 <= t <= 1.0 for t in self.iou_thresholds):
            raise ValueError(f"iou_thresholds must lie in [0, 1], got {self.iou_thresholds}")
        if self.iou_thresholds and self.min_iou:
            raise ValueError("min_iou and iou_thresholds both set: write one of them")
        unknown = set(self.det_reward_ratio) - set(RATIO_KEYS)
        if unknown:
            raise ValueError(f"det_reward_ratio: unknown term(s) {sorted(unknown)} (known: "
                             f"{', '.join(RATIO_KEYS)})")
        if not all(0.0 <= float(w) <= 1.0 for w in self.det_reward_ratio.values()):
            raise ValueError(f"det_reward_ratio: each weight must be in [0, 1], got "
                             f"{self.det_reward_ratio}")


def answer_body(text: str) -> str | None:
    """The text between the first `<answer>` and the `</answer>` after it, or None."""
    start = text.find(OPEN)
    end = text.find(CLOSE, start + len(OPEN)) if start >= 0 else -1
    return text[start + len(OPEN):end].strip() if end >= 0 else None


def parse_boxes(text: str) -> list[Box]:
    """The well-formed boxes of `text`'s answer, repeats dropped (module doc); [] if none."""
    body = answer_body(text)
    try:
        items = json.loads(body) if body else None
    except (ValueError, RecursionError):  # model output: bracket runs nest past the stack
        return []
    boxes: list[Box] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("label"), str):
            continue
        coords = item.get("bbox_2d")
        if (not isinstance(coords, list) or len(coords) != 4
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                           for v in coords)):
            continue
        x1, y1, x2, y2 = (float(v) for v in coords)
        box = ((x1, y1, x2, y2), item["label"].lower())
        if x1 <= x2 and y1 <= y2 and all(b[0] != box[0] for b in boxes):
            boxes.append(box)
    return boxes


def iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Intersection over union of two x1, y1, x2, y2 boxes (0 for empty ones)."""
    inter = (max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
             * max(0.0, min(a[3], b[3]) - max(a[1], b[1])))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def iou_first_matches(pred: list[Box], gold: list[Box], threshold: float) -> list[float]:
    """The matched pairs' IoUs (0 where labels differ), greedy by IoU, largest first over
    all pairs; a pair of no overlap never matches."""
    pairs = sorted(((iou(p[0], g[0]), i, j) for i, p in enumerate(pred)
                    for j, g in enumerate(gold)), key=lambda t: -t[0])
    used_pred, used_gold, matches = set(), set(), []
    for value, i, j in pairs:
        if value <= 0.0 or value < threshold:  # sorted: no later pair matches either
            break
        if i in used_pred or j in used_gold:
            continue
        used_pred.add(i)
        used_gold.add(j)
        matches.append(value if pred[i][1] == gold[j][1] else 0.0)
    return matches


def label_first_matches(pred: list[Box], gold: list[Box], threshold: float) -> list[float]:
    """The matched pairs' IoUs: each reference box in order takes the unmatched reply box
    of its label with the largest IoU (the first on a tie), if that reaches `threshold`."""
    used, matches = set(), []
    for coords, label in gold:
        best, found = -1.0, -1
        for i, (box, lab) in enumerate(pred):
            value = iou(box, coords)
            if i not in used and lab == label and value > best:
                best, found = value, i
        if found >= 0 and best >= threshold:
            used.add(found)
            matches.append(best)
    return matches


def iou_term(matches: list[float], n_pred: int, n_gold: int, completeness: float) -> float:
    """ROLL's weighted IoU score of one match: mean IoU over the reference boxes, blended
    with completeness (1 - the mean of the miss and false-alarm rates)."""
    mean_iou = sum(matches) / n_gold
    missed = (n_gold - len(matches)) / n_gold
    false_alarm = (n_pred - len(matches)) / n_pred if n_pred else 0.0
    return mean_iou * (1.0 - completeness) + (1.0 - (missed + false_alarm) / 2) * completeness


def accuracy_terms(args: DetectionArgs, pred: list[Box], gold: list[Box]) -> dict[str, float]:
    """Each weighted term before the size penalty (only those with a weight)."""
    ratio = args.det_reward_ratio
    thresholds = args.iou_thresholds or [args.min_iou]
    c = float(ratio.get("iou_completeness", 0.0))
    terms: dict[str, float] = {}
    for name, match in (("iou_max_iou_first", iou_first_matches),
                        ("iou_max_label_first", label_first_matches)):
        if ratio.get(name):
            terms[name] = sum(iou_term(match(pred, gold, t), len(pred), len(gold), c)
                              for t in thresholds) / len(thresholds)
    if any(ratio.get(k) for k in ("map", "map50", "map75")):
        terms |= coco_ap(pred, gold, iou)
    return terms


def score_with(args: DetectionArgs, response: str, reference: str) -> RewardResult:
    gold = parse_boxes(reference)
    if not gold:
        raise ValueError(f"detection: the reference holds no box in <answer>[{{\"bbox_2d\": "
                         f"...}}]</answer> form: {reference[:120]!r}")
    pred = parse_boxes(response)
    formatted = bool(pred) and response.count(OPEN) == 1 and response.count(CLOSE) == 1
    thresholds = args.iou_thresholds or [args.min_iou]
    mean_iou = sum(sum(iou_first_matches(pred, gold, t)) for t in thresholds) / (
        len(gold) * len(thresholds)) if pred else 0.0
    accuracy, metadata = 0.0, {"parsed": bool(pred), "iou": mean_iou, "boxes": len(pred)}
    weights = {k: float(args.det_reward_ratio.get(k, 0.0)) for k in TERMS}
    if pred and sum(weights.values()) > 0:
        terms = accuracy_terms(args, pred, gold)
        accuracy = SIZE_PENALTY ** abs(len(pred) - len(gold)) * sum(
            weights[k] * terms.get(k, 0.0) for k in TERMS) / sum(weights.values())
        if "map" in terms:
            metadata["map"] = terms["map"]
    value = (accuracy * args.accuracy_ratio + args.format_ratio * formatted) / (
        args.accuracy_ratio + args.format_ratio)
    return RewardResult(value, metadata)


def record_args(args: DetectionArgs, record: dict[str, Any] | None) -> DetectionArgs:
    """`args` with a ROLL record's own settings in place (module doc): its `reward_model`
    column's format_ratio, accuracy_ratio and verifier_parm.det_reward_ratio."""
    settings = (record or {}).get("reward_model")
    if not isinstance(settings, dict):
        return args
    found = {k: float(settings[k]) for k in ("format_ratio", "accuracy_ratio")
             if settings.get(k) is not None}
    ratio = (settings.get("verifier_parm") or {}).get("det_reward_ratio")
    if isinstance(ratio, dict):
        found["det_reward_ratio"] = {k: float(v) for k, v in ratio.items() if v is not None}
    return replace(args, **found) if found else args


def build(cfg: RewardConfig) -> SampleReward:
    args = settings_from(DetectionArgs, cfg.reward_args, "reward_args")

    def score(samples: list[Sample]) -> list[RewardResult]:
        return [score_with(record_args(args, s.record), s.response, s.reference)
                for s in samples]

    return SampleReward(score)
