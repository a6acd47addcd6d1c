"""detection: boxes in the reply against the reference's boxes (ROLL's DetectionRewardWorker,
roll/pipeline/rlvr/rewards/detection_reward_worker.py, behaviour only).

Both sides are in ROLL's answer form, `<answer>[{"bbox_2d": [x1, y1, x2, y2], "label":
"circle"}, ...]</answer>`, in whatever coordinates the data uses (the shape data and ROLL's
Orsta data: 0-1000 relative to the image side). Parsing (`parse_boxes`) keeps the list
items with a `bbox_2d` of four numbers, x1 <= x2 and y1 <= y2, and a string `label`, drops
repeated boxes, and compares labels case-blind; a reply without `<answer>...</answer>`
parses to nothing.

The score, as ROLL computes it with its IoU terms only:

    accuracy = size_penalty * (1/|gt|) * sum over matches of IoU (0 for a label mismatch)
    size_penalty = 0.6 ** | |pred| - |gt| |
    format = 1 if the reply holds one <answer>...</answer> whose boxes parse, else 0
    score = (accuracy * 1.0 + format * format_ratio) / (1.0 + format_ratio)

Matches are greedy by IoU, largest first (ROLL's `greedy_match_by_iou_max_iou_first`); a
pair below `min_iou` does not match. Left out: ROLL's COCO mAP terms (they need its COCO
evaluator; its shipped configs weight them, this reward does not compute them), its
completeness term, its averaging over IoU thresholds 0.5-0.99 (a tiny model's boxes start
far below 0.5 and would score 0 throughout: `min_iou` 0 keeps the signal dense; set 0.5
for ROLL's lowest threshold) and its Qwen2.5-VL pixel rescaling (the reference's
coordinates must be the reply's). ROLL's format check also wants newlines around the
tags; this one does not. Metadata: `parsed` (the reply's boxes parsed), `iou` (the
accuracy before the size penalty), `boxes` (how many the reply gave).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from flywheel.platform.config.catalogs import settings_from
from flywheel.platform.config.schema import RewardConfig
from flywheel.workers.rewards.result import RewardResult

OPEN, CLOSE = "<answer>", "</answer>"
SIZE_PENALTY = 0.6  # ROLL's size_penalty_ratio, per box too many or too few

Box = tuple[tuple[float, float, float, float], str]  # (x1, y1, x2, y2), lower-case label


@dataclass
class DetectionArgs:
    # Weight of the format term against accuracy's 1.0 (ROLL's reward_model.format_ratio,
    # default 0.1): a reply whose boxes parse earns format_ratio / (1 + format_ratio).
    format_ratio: float = 0.1
    # A predicted box matches a reference box only at IoU >= min_iou (0: any overlap
    # counts, a dense signal; ROLL averages thresholds 0.5 to 0.99).
    min_iou: float = 0.0

    def __post_init__(self) -> None:
        if self.format_ratio < 0:
            raise ValueError(f"format_ratio must be >= 0, got {self.format_ratio}")
        if not 0.0 <= self.min_iou <= 1.0:
            raise ValueError(f"min_iou must be in [0, 1], got {self.min_iou}")


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


def matched_iou(pred: list[Box], gold: list[Box], min_iou: float) -> float:
    """Sum over greedy matches (largest IoU first) of the IoU, 0 where labels differ."""
    pairs = sorted(((iou(p[0], g[0]), i, j) for i, p in enumerate(pred)
                    for j, g in enumerate(gold)), key=lambda t: -t[0])
    used_pred, used_gold, total = set(), set(), 0.0
    for value, i, j in pairs:
        if value <= 0.0 or value < min_iou:  # sorted: no later pair matches either
            break
        if i in used_pred or j in used_gold:
            continue
        used_pred.add(i)
        used_gold.add(j)
        total += value if pred[i][1] == gold[j][1] else 0.0
    return total


def score_with(args: DetectionArgs, response: str, reference: str) -> RewardResult:
    gold = parse_boxes(reference)
    if not gold:
        raise ValueError(f"detection: the reference holds no box in <answer>[{{\"bbox_2d\": "
                         f"...}}]</answer> form: {reference[:120]!r}")
    pred = parse_boxes(response)
    formatted = bool(pred) and response.count(OPEN) == 1 and response.count(CLOSE) == 1
    mean_iou = matched_iou(pred, gold, args.min_iou) / len(gold) if pred else 0.0
    accuracy = mean_iou * SIZE_PENALTY ** abs(len(pred) - len(gold)) if pred else 0.0
    value = (accuracy + args.format_ratio * formatted) / (1.0 + args.format_ratio)
    return RewardResult(value, {"parsed": bool(pred), "iou": mean_iou, "boxes": len(pred)})


def build(cfg: RewardConfig) -> Callable[[str, str, str], RewardResult]:
    args = settings_from(DetectionArgs, cfg.reward_args, "reward_args")

    def score(prompt: str, response: str, reference: str) -> RewardResult:
        return score_with(args, response, reference)

    return score
