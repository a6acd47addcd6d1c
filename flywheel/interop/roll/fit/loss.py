"""ROLL's loss switches on convert: which of flywheel's losses and corrections they are.

Three of ROLL's top-level settings choose what flywheel chooses with `pg_variant` and
`infer_is_correction`, so they convert together, after the rest of the file
(`fit_loss`, called by convert.py), reading the ROLL file as written:

- `importance_sampling: seq` (read by ROLL's RLVR ActorWorker, the default actor_train
  worker: one length-normalised ratio per response, clipped like PPO's) is GSPO:
  `actor_train.pg_variant: gspo` with the same clip keys. ROLL's pg-variant worker
  (actor_pg_worker) does not read it: there it is dropped.
- `use_topr_neg_loss_coef` and `postive_loss_coef` (sic) weighted TOPR's two terms, added
  to the PPO loss that `rl_loss_coef` scaled (ROLL's RLVR ActorWorker up to v0.2.0; ROLL
  now spells TOPR `pg_variant: topr` with `topr_negative_weight` / `topr_positive_weight`
  and no longer reads the two coefficients). With `rl_loss_coef: 0` (ROLL's TOPR example)
  the loss is TOPR alone: `pg_variant: topr`, topr_positive_weight = postive_loss_coef,
  topr_negative_weight = use_topr_neg_loss_coef. ROLL averaged each term over its own
  samples' tokens, flywheel over the batch's: the weights mean the same per token, the
  sum differs by those token shares (reported). PPO plus TOPR terms is not a flywheel loss.
- `train_infer_correction` (both pipelines): ROLL's IS weight of the trainer's old
  log-probs over the sampler's, clamped at `is_weight.upper_bound`, and its filters
  (tokens or sequences whose ratio leaves [ratio_low, ratio_high] lose their loss) are
  flywheel's `infer_is_correction` (algorithms/mismatch.py): a token or sequence weight
  truncated at infer_is_upper_bound is `token-truncate` / `seq-truncate`; the weight with a
  ratio filter of the same granularity, unclamped inside the band, is `token-mask` /
  `seq-mask` with the band as infer_is_lower_bound / infer_is_upper_bound. Any other
  filter (geometric or segment granularity, a probability-difference band, a filter
  without the weight or beside a weight of another granularity) is flywheel's train/infer
  filter (`infer_filter_level` with its ratio and difference bands, algorithms/
  infer_filter.py) beside the truncated weight, or alone. A geometric or segment IS
  weight, an undetached one and several filters have no flywheel counterpart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

KEYS = frozenset({"importance_sampling", "use_topr_neg_loss_coef", "postive_loss_coef",
                  "rl_loss_coef", "train_infer_correction"})
# ROLL's granularity -> flywheel's infer_is_correction level
LEVELS = {"token": "token", "sequence": "seq"}
# TrainInferISWeightConfig / TrainInferFilterConfig defaults (roll/configs/base_config.py)
IS_WEIGHT_DEFAULTS = {"enabled": False, "weight_type": "token", "upper_bound": 1.2,
                      "detach": True}
FILTER_DEFAULTS = {"enabled": False, "agg_type": "token", "ratio_enabled": True,
                   "ratio_low": 0.8, "ratio_high": 1.2, "diff_enabled": False,
                   "diff_low": -0.2, "diff_high": 0.2}


def fit_loss(data: dict[str, Any], out: Conversion) -> None:
    """Convert the KEYS the ROLL file writes (roll_convert._top leaves them here)."""
    _importance_sampling(data, out)
    _topr_coefficients(data, out)
    if "train_infer_correction" in data:
        _train_infer_correction(data["train_infer_correction"] or {}, out)


def _actor(out: Conversion) -> dict[str, Any]:
    return out.data.setdefault("actor_train", {})


def _importance_sampling(data: dict[str, Any], out: Conversion) -> None:
    value = data.get("importance_sampling", "token")
    if value in (None, "token"):
        if "importance_sampling" in data:
            out.dropped.append(f"importance_sampling: off ({value!r})")
        return
    worker = str((data.get("actor_train") or {}).get("worker_cls") or "")
    if "actor_pg_worker" in worker:
        out.dropped.append(f"importance_sampling: {value!r} is read by ROLL's RLVR ActorWorker "
                           f"only, not by {worker.rsplit('.', 1)[-1]} (actor_train.worker_cls)")
        return
    variant = _actor(out).get("pg_variant", "ppo")
    if value != "seq" or variant not in ("ppo", "gspo"):
        out.missing.append(f"sequence-level importance sampling with pg_variant {variant} "
                           f"(importance_sampling = {value!r})")
        return
    _actor(out)["pg_variant"] = "gspo"
    out.mapped.append("importance_sampling: seq -> actor_train.pg_variant: gspo (the "
                      "length-normalised sequence ratio under ppo's clip keys, GSPO)")


def _topr_coefficients(data: dict[str, Any], out: Conversion) -> None:
    try:
        negative = float(data.get("use_topr_neg_loss_coef") or 0.0)
        positive = float(data.get("postive_loss_coef") or 0.0)
        rl = float(1.0 if data.get("rl_loss_coef") is None else data["rl_loss_coef"])
    except (TypeError, ValueError):
        written = ", ".join(f"{key} = {data[key]!r}" for key in (
            "use_topr_neg_loss_coef", "postive_loss_coef", "rl_loss_coef") if key in data)
        # ROLL's docs_examples/example_topr.yaml writes `x_2 # x_2 > 0.0`: a blank to fill
        # in, not a setting. ROLL's RLVRConfig types these fields float and its launcher
        # reads the file with dacite's type check, which stops on a string there too.
        out.missing.append(f"TOPR / RL loss coefficients that are not numbers ({written}): "
                           f"placeholders for a number to write, which ROLL's own loader "
                           f"refuses too (RLVRConfig types them float)")
        return
    if not (negative or positive):
        if rl != 1.0:
            out.missing.append(f"an RL loss coefficient (rl_loss_coef = {rl:g})")
        off = ("use_topr_neg_loss_coef", "postive_loss_coef") + (
            ("rl_loss_coef",) if rl == 1.0 else ())
        out.dropped.extend(f"{key}: off ({data[key]!r})" for key in off if key in data)
        return
    if rl != 0.0:
        out.missing.append(f"TOPR terms added to the PPO loss (rl_loss_coef = {rl:g} with "
                           f"postive_loss_coef = {positive:g}, use_topr_neg_loss_coef = "
                           f"{negative:g}; with rl_loss_coef: 0 they are pg_variant: topr)")
        return
    variant = _actor(out).get("pg_variant", "ppo")
    if variant not in ("ppo", "topr") or data.get("use_kl_loss"):
        out.missing.append(f"TOPR coefficients beside pg_variant {variant} or a KL loss that "
                           f"rl_loss_coef: 0 zeroes (use_topr_neg_loss_coef)")
        return
    actor = _actor(out)
    actor.update(pg_variant="topr", topr_positive_weight=positive,
                 topr_negative_weight=negative)
    out.mapped.append(f"rl_loss_coef: 0, postive_loss_coef: {positive:g}, "
                      f"use_topr_neg_loss_coef: {negative:g} -> actor_train.pg_variant: topr "
                      f"with topr_positive_weight {positive:g}, topr_negative_weight "
                      f"{negative:g} (ROLL averaged each term over its own samples' tokens, "
                      f"flywheel over the batch's)")


def _train_infer_correction(block: dict[str, Any], out: Conversion) -> None:
    weight = {**IS_WEIGHT_DEFAULTS, **(block.get("is_weight") or {})}
    filters = [f for f in ({**FILTER_DEFAULTS, **(f or {})} for f in block.get("filters") or [])
               if f["enabled"] and (f["ratio_enabled"] or f["diff_enabled"])]
    lacking = _lacking(weight, filters)
    if lacking:
        out.missing.append(f"{lacking} (train_infer_correction)")
        return
    band = filters[0] if filters else None
    if band is not None and _is_mask(weight, band):
        choice: dict[str, Any] = {"infer_is_correction": f"{LEVELS[band['agg_type']]}-mask",
                                  "infer_is_lower_bound": band["ratio_low"],
                                  "infer_is_upper_bound": band["ratio_high"]}
        band = None
    elif weight["enabled"]:
        choice = {"infer_is_correction": f"{LEVELS[weight['weight_type']]}-truncate",
                  "infer_is_upper_bound": weight["upper_bound"]}
    else:
        choice = {"infer_is_correction": "none"}
    if band is not None:  # any other filter: flywheel's train/infer filter beside the weight
        choice["infer_filter_level"] = band["agg_type"]
        if band["ratio_enabled"]:
            choice["infer_filter_ratio_band"] = [band["ratio_low"], band["ratio_high"]]
        if band["diff_enabled"]:
            choice["infer_filter_diff_band"] = [band["diff_low"], band["diff_high"]]
    out.data.update(choice)
    out.mapped.append("train_infer_correction -> " + ", ".join(
        f"{k}: {v}" for k, v in choice.items()))


def _is_mask(weight: dict[str, Any], band: dict[str, Any]) -> bool:
    """A token or sequence weight with a ratio band of its granularity, unclamped inside
    the band: flywheel's -mask correction."""
    upper = weight["upper_bound"]
    return (weight["enabled"] and band["ratio_enabled"] and not band["diff_enabled"]
            and band["agg_type"] == weight["weight_type"] and band["agg_type"] in LEVELS
            and (upper is None or upper >= band["ratio_high"]))


def _lacking(weight: dict[str, Any], filters: list[dict[str, Any]]) -> str:
    """What flywheel lacks to run this block; "" when it maps."""
    if weight["enabled"] and weight["weight_type"] not in LEVELS:
        return f"a {weight['weight_type']} IS weight (is_weight.weight_type)"
    if weight["enabled"] and not weight["detach"]:
        return "an IS weight with a gradient (is_weight.detach: false)"
    if len(filters) > 1:
        return "several train/infer filters"
    if weight["enabled"] and weight["upper_bound"] is None and not (
            filters and _is_mask(weight, filters[0])):
        return "an untruncated IS weight (is_weight.upper_bound: null)"
    return ""
