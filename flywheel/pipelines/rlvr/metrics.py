"""RLVR's own per-step metrics, beside the loop's (pipelines/loop/step_metrics.py).

With partial rollout, `rollout/partial_frac` (share of responses whose tokens span more
than one version) and `staleness/token_mean` (the lag per token, by the version that
sampled it); what the rewards said beside their scores (`reward/timed_out`, ...); records
with a tag are also reported per tag (`reward/<tag>/mean`, `reward/<tag>/prompts`,
`val/<tag>/accuracy`); untagged ones only in the totals.
"""

from __future__ import annotations

import re

from flywheel.pipelines.loop.seams import Taken
from flywheel.pipelines.rlvr.generation import Group


def partial_rollout_metrics(groups: list[Group], step: int) -> dict[str, float]:
    """`step` is the 1-based step that trained `groups` (RLVR groups)."""
    responses = [(g.version, r) for g in groups for r in g.responses]
    spanning = [len(set(r.token_versions)) > 1 for _, r in responses]
    lags = [step - 1 - v for start, r in responses
            for v in (r.token_versions or [start] * len(r.token_ids))]
    return {"rollout/partial_frac": sum(spanning) / len(spanning),
            "staleness/token_mean": sum(lags) / len(lags) if lags else 0.0}


def reward_info_metrics(taken: Taken) -> dict[str, float]:  # RLVR groups
    """What the rewards said about the samples whose fate this step decided (trained or
    dropped): `reward/timed_out` and `reward/crashed` count samples the hard per-sample
    limit killed or whose scoring process died (each scored 0), `reward/out_of_memory`
    (present when any) those of them whose request ran out of the scoring process's
    memory_mb; `reward/parse_rate` is the
    share of samples, among those whose reward reports it, in which an answer was found;
    `reward/judge_parse_failures` counts llm_judge samples whose judge gave no verdict that
    parsed (each scored 0), present when an llm_judge reward scored any of them;
    `reward/correct_rate`, among samples whose reward reports `correct` (ifeval,
    multiple_choice: ROLL's `scores`, before penalties; math_rule), the share judged correct;
    `reward/rm_raw_score`, the reward_model's mean score before its shift, scale and clip;
    `reward/format_rate`, among samples of rewards with a format_pattern, the share that
    matched it; `reward/fn_errors` counts samples whose user reward function (reward_type python)
    raised or answered something that is not a score, `reward/fn_unscored` those it
    answered None for (each scored 0), both present when such a reward scored any."""
    infos = [info for g in [*taken.groups, *taken.stale, *taken.filtered]
             for info in g.reward_info]
    metrics = {"reward/timed_out": float(sum(bool(i.get("timed_out")) for i in infos)),
               "reward/crashed": float(sum(bool(i.get("crashed")) for i in infos))}
    oom = sum(bool(i.get("out_of_memory")) for i in infos)
    if oom:
        metrics["reward/out_of_memory"] = float(oom)
    parsed = [bool(i["parsed"]) for i in infos if "parsed" in i]
    if parsed:
        metrics["reward/parse_rate"] = sum(parsed) / len(parsed)
    judged = [bool(i["judge_parse_failure"]) for i in infos if "judge_parse_failure" in i]
    if judged:
        metrics["reward/judge_parse_failures"] = float(sum(judged))
    for key, name in (("correct", "reward/correct_rate"), ("format_ok", "reward/format_rate")):
        flags = [bool(i[key]) for i in infos if key in i]
        if flags:
            metrics[name] = sum(flags) / len(flags)
    raw = [float(i["rm_raw_score"]) for i in infos if "rm_raw_score" in i]
    if raw:
        metrics["reward/rm_raw_score"] = sum(raw) / len(raw)
    for key, name in (("fn_error", "reward/fn_errors"), ("fn_unscored", "reward/fn_unscored")):
        flags = [bool(i[key]) for i in infos if key in i]
        if flags:
            metrics[name] = float(sum(flags))
    return metrics


def uniform_group_metrics(groups: list[Group]) -> dict[str, float]:
    """`rollout/uniform_frac`: share of the trained groups whose samples all scored the same,
    which GRPO gives zero advantage (dynamic sampling, drop_uniform_groups, keeps it at 0
    unless the refill cap is reached)."""
    uniform = sum(len(set(g.scores)) <= 1 for g in groups)
    return {"rollout/uniform_frac": uniform / len(groups)}


def metric_tag(tag: str) -> str:
    """A record tag as one segment of a metric name: every character other than a letter,
    digit, `_`, `.` or `-` becomes `_` (so `a/b` cannot open a namespace)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", tag)


def _scores_by_tag(groups: list[Group]) -> dict[str, list[list[float]]]:
    by_tag: dict[str, list[list[float]]] = {}
    for g in groups:
        if g.record.tag:
            by_tag.setdefault(metric_tag(g.record.tag), []).append(g.scores)
    return dict(sorted(by_tag.items()))


def domain_reward_metrics(groups: list[Group]) -> dict[str, float]:
    """Per record tag, over the groups trained this step: `reward/<tag>/mean` (mean sample
    score) and `reward/<tag>/prompts` (prompts of that tag in the batch: the domain mix)."""
    metrics = {}
    for tag, groups_scores in _scores_by_tag(groups).items():
        scores = [s for scores in groups_scores for s in scores]
        metrics[f"reward/{tag}/mean"] = sum(scores) / len(scores)
        metrics[f"reward/{tag}/prompts"] = float(len(groups_scores))
    return metrics


def domain_val_metrics(groups: list[Group]) -> dict[str, float]:
    """`val/<tag>/accuracy`: mean validation score of the records of each tag."""
    metrics = {}
    for tag, groups_scores in _scores_by_tag(groups).items():
        scores = [s for scores in groups_scores for s in scores]
        metrics[f"val/{tag}/accuracy"] = sum(scores) / len(scores)
    return metrics
