"""ROLL's on-policy distillation (examples/start_onpolicy_distill_pipeline.py): RLVR or
agentic (`pure_opd_pipeline_type`) with a teacher, its roles renamed student_train /
student_infer (roll/configs/base_config.py `_handle_opd_mapping`). flywheel's is RLVR with
`teacher:` blocks (docs: pipelines/distillation.md), so `fit` makes it that:

- student_train -> actor_train, student_infer -> actor_infer;
- ROLL's launcher forces `is_pure_opd: true` (a file with student roles or is_pure_opd is
  pure) -> `opd_mode: pure`; `use_opd: true` alone (an RLVR file started by the RLVR
  launcher) -> `opd_mode: mixed`; ROLL's pure mode sets gamma 0, adv_estimator reinforce
  and no KL loss or KL reward, which flywheel's pure mode does by reading none of them:
  those keys are dropped, said;
- `teacher`: one block (ROLL names it `default`) or a mapping of named blocks, each with
  its `opd_kl_coef` and `tag_included`; its backend through the shared table (ROLL's
  `megatron_infer` -> `megatron_train`: flywheel's teachers are forward-only roles on a
  training backend, which builds no optimizer for them); training-only keys a teacher
  never uses (training_args, data_args, gradient checkpointing, packing) dropped, said;
- `pure_opd_pipeline_type: agentic` is reported missing: flywheel's agentic kind takes
  teachers (pipelines/distill/episode_teachers.py), but this converter maps ROLL's OPD
  pipeline onto one kind (`runs_as`, rlvr); converting an agentic OPD file needs `runs_as`
  chosen per file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flywheel.interop.roll.pipelines.pipeline import RollPipeline

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

KEYS = {"is_pure_opd": False, "use_opd": False, "pure_opd_pipeline_type": "rlvr"}
STUDENT_ROLES = {"student_train": "actor_train", "student_infer": "actor_infer"}
# ROLL's pure OPD overrides these (base_config._apply_opd_config): flywheel's pure mode
# takes the advantage from the teachers alone, so none of them acts there
PURE_OVERRIDES = {"gamma": "ROLL's pure OPD sets gamma 0 (opd_gamma 0 is flywheel's "
                           "default)",
                  "use_kl_loss": "ROLL's pure OPD turns the KL loss off",
                  "kl_loss_coef": "ROLL's pure OPD turns the KL loss off",
                  "add_token_level_kl": "ROLL's pure OPD turns the KL reward off",
                  "init_kl_coef": "ROLL's pure OPD turns the KL reward off",
                  "critic_warmup": "ROLL's pure OPD has no critic"}
# a teacher's keys that would do nothing (it scores with a forward pass, never trains)
TEACHER_UNUSED = {"training_args": "a teacher never trains",
                  "generating_args": "a teacher never samples",
                  "use_sequence_packing": "flywheel packs training micro-batches only",
                  "sequence_packing_args": "flywheel packs training micro-batches only"}
NEVER_BACKWARD = ("disable_gradient_checkpointing",)


def is_single_teacher(value: Any) -> bool:
    """A role block (ROLL's WorkerConfig), not a mapping of named teachers."""
    from flywheel.interop.roll import keys

    return isinstance(value, dict) and any(k in keys.WORKER for k in value)


def fit_opd(data: dict[str, Any], out: Conversion) -> dict[str, Any]:
    data = dict(data)
    pure = bool(data.pop("is_pure_opd", False)) or any(k in data for k in STUDENT_ROLES)
    mixed = bool(data.pop("use_opd", False))
    for roll_name, ours in STUDENT_ROLES.items():
        if roll_name in data:
            data[ours] = data.pop(roll_name)
            out.mapped.append(f"{roll_name} -> {ours} (ROLL maps it there in pure OPD)")
    if pure and mixed:
        out.missing.append("is_pure_opd with use_opd: ROLL refuses the two together "
                           "(pure or mixed OPD); keep one")
    mode = "pure" if pure or not mixed else "mixed"
    out.data["opd_mode"] = mode
    out.mapped.append(f"{'is_pure_opd' if mode == 'pure' else 'use_opd'}: true -> opd_mode: "
                      f"{mode}" + (" (ROLL's on-policy launcher forces is_pure_opd)"
                                   if mode == "pure" else ""))
    kind = data.pop("pure_opd_pipeline_type", "rlvr")
    if kind == "agentic":
        out.missing.append("converting on-policy distillation over agentic episodes "
                           "(pure_opd_pipeline_type: agentic; flywheel runs it as "
                           "pipeline_type agentic with teacher: blocks, written by hand)")
    if mode == "pure":
        if data.get("adv_estimator") != "reinforce":
            out.mapped.append(f"adv_estimator: {data.get('adv_estimator')!r} -> 'reinforce' "
                              f"(ROLL's pure OPD forces it; the advantage is the teachers' "
                              f"alone either way)")
        data["adv_estimator"] = "reinforce"
        for key, why in PURE_OVERRIDES.items():
            if key in data:
                out.dropped.append(f"{key}: {data.pop(key)!r}: {why}")
    teachers = data.pop("teacher", None)
    if is_single_teacher(teachers):
        teachers = {"default": teachers}
        out.mapped.append("teacher -> teacher.default (ROLL's name for a single teacher)")
    for name, block in (teachers or {}).items():
        fit_teacher(block if isinstance(block, dict) else {}, f"teacher.{name}", out)
    return data


def fit_teacher(block: dict[str, Any], where: str, out: Conversion) -> None:
    """One teacher's block through the shared role walk, minus what a teacher never uses."""
    from flywheel.interop.roll import rules
    from flywheel.interop.roll.fit.backends import role_precision
    from flywheel.interop.roll.role_walk import walk_role

    block = dict(block)
    for key, why in TEACHER_UNUSED.items():
        if key in block:
            block.pop(key)
            out.dropped.append(f"{where}.{key}: {why}")
    model_args = dict(block.get("model_args") or {})
    for key in NEVER_BACKWARD:
        if key in model_args:
            out.dropped.append(f"{where}.model_args.{key}: {model_args.pop(key)!r}: a "
                               f"teacher never trains (no backward pass to checkpoint)")
    block["model_args"] = model_args
    table = {**rules.WORKER, "opd_kl_coef": rules.SAME, "tag_included": rules.SAME}
    walk_role(block, where, table, out)
    strategy = block.get("strategy_args") or {}
    if strategy.get("strategy_name") == "megatron_infer":
        out.mapped.append(f"{where}: a forward-only role on megatron_train (flywheel has no "
                          f"megatron_infer; a teacher builds no optimizer), keeping "
                          f"megatron_infer's parallel layout (checked key by key)")
        # the walk kept megatron_infer's strategy_config; its bf16 / fp16 flag is the
        # teacher's dtype, as for the top-level roles
        role = out.data
        for part in where.split("."):
            role = role.get(part) if isinstance(role, dict) else None
        role_precision(role, where, out)


PIPELINE = RollPipeline(name="opd", title="on-policy distillation",
                        launcher="examples/start_onpolicy_distill_pipeline.py",
                        roles=("student_train", "student_infer", "teacher"), keys=KEYS,
                        runs_as="rlvr", fit=fit_opd)
