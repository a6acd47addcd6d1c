"""Which of ROLL's pipelines a ROLL file is for, and what each pipeline reads.

ROLL picks the pipeline by the script a user starts (`examples/start_<pipeline>_pipeline.py`,
each reading the file into its own config dataclass); the file does not name it. So
`platform convert` recognises it from the file's roles and keys, by flywheel's own rule
(the first that matches, in this order; `--pipeline NAME` says it instead):

1. `sft_train` (SFT's one role)                                          -> sft
2. `student` or `student_pretrain` / `teacher_pretrain` (offline distillation's roles
   and models)                                                           -> distill
3. `student_train`, `student_infer`, `teacher`, `use_opd: true` or `is_pure_opd: true`
   (RLVR or agentic with a teacher, started by the on-policy launcher)   -> opd
4. a DPO key (`chosen_key`, `rejected_key`, `ipo`, `beta`, `label_smoothing`) and no
   actor_infer, rewards or envs (nothing generates: DPO's roles are actor_train and
   reference)                                                            -> dpo
5. `custom_envs`, `train_env_manager` or `val_env_manager`                -> agentic
6. anything else                                                         -> rlvr

Each pipeline is one module here holding its `RollPipeline`: the launcher, the roles and the
top-level keys that pipeline's config dataclass reads beyond the shared ones (the key
tables: field names and literal defaults of ROLL's `roll/pipeline/<name>/*_config.py` at
8eb27cc2, as facts about its file format), and `runs_as`: the flywheel pipeline_type that
runs it, or None while flywheel has none. A key of a pipeline flywheel does not run is
reported "needs pipeline <name>", never as a key ROLL ignores. A pipeline that flywheel
comes to run sets `runs_as` and its `fit` (what the conversion does to the file's data
before the shared walk); nothing else here changes.
"""

from __future__ import annotations

from typing import Any

from flywheel.interop.roll.pipelines import agentic, distill, dpo, opd, rlvr, sft
from flywheel.interop.roll.pipelines.pipeline import RollPipeline

PIPELINES: dict[str, RollPipeline] = {p.name: p for p in (
    rlvr.PIPELINE, agentic.PIPELINE, sft.PIPELINE, dpo.PIPELINE, distill.PIPELINE,
    opd.PIPELINE)}
NAMES = tuple(PIPELINES)  # `--pipeline`'s choices


def pipelines() -> dict[str, RollPipeline]:
    """Every ROLL pipeline by name."""
    return PIPELINES


AGENTIC_MARKERS = ("custom_envs", "train_env_manager", "val_env_manager")
DPO_MARKERS = ("chosen_key", "rejected_key", "ipo", "beta", "label_smoothing")
OPD_ROLES = ("student_train", "student_infer", "teacher")


def recognise(data: dict[str, Any]) -> tuple[str, str]:
    """(pipeline name, the rule that chose it) for a ROLL file's resolved top level."""
    present = [k for k in data if data.get(k) is not None]
    if "sft_train" in present:
        return "sft", "it has an sft_train role"
    offline = [k for k in ("student", "student_pretrain", "teacher_pretrain") if k in present]
    if offline:
        return "distill", f"it has {_said(offline)} (offline distillation's roles)"
    opd = [k for k in OPD_ROLES if k in present] + [
        k for k in ("use_opd", "is_pure_opd") if data.get(k) is True]
    if opd:
        return "opd", f"it has {_said(opd)} (a teacher: on-policy distillation)"
    generates = any(k in present for k in ("actor_infer", "rewards", *AGENTIC_MARKERS))
    dpo = [k for k in DPO_MARKERS if k in present]
    if dpo and not generates:
        return "dpo", f"it has {_said(dpo)} (DPO's keys) and nothing that generates"
    agentic = [k for k in AGENTIC_MARKERS if k in present]
    if agentic:
        return "agentic", f"it has {_said(agentic)}"
    return "rlvr", "none of the other pipelines' roles or keys"


def _said(keys: list[str]) -> str:
    return ", ".join(keys)
