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
4. no actor_infer, rewards or envs (nothing generates: DPO's roles are actor_train and
   reference), and a DPO key (`chosen_key`, `rejected_key`, `ipo`, `beta`,
   `label_smoothing`) or actor_train                                    -> dpo
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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion


@dataclass(frozen=True)
class RollPipeline:
    name: str  # as `--pipeline` takes it
    title: str  # what the report calls it
    launcher: str  # ROLL's entry script
    roles: tuple[str, ...]  # the role blocks only this pipeline reads
    keys: dict[str, Any] = field(default_factory=dict)  # its own top-level keys: defaults
    runs_as: str | None = None  # flywheel's pipeline_type for it; None: not built yet
    # the file's resolved data -> the data the shared walk converts (roles renamed, its own
    # keys consumed into flywheel's), reporting into the Conversion
    fit: Callable[[dict[str, Any], Conversion], dict[str, Any]] | None = None
    # once the shared walk is done, before packing and defaults (defaults.finish): the
    # roles' backends onto ones that run this pipeline
    fit_backends: Callable[[Conversion], None] | None = None
    # ROLL's shared top-level keys this pipeline never reads: their defaults are not written
    unread: frozenset[str] = frozenset()
    generates: bool = True  # it samples (actor_infer's generating_args defaults apply)

    def reads(self, key: str) -> bool:
        return key in self.keys or key in self.roles


def _catalog() -> dict[str, RollPipeline]:
    # the modules import this one (RollPipeline): their tables are read on first use
    from flywheel.interop.roll.pipelines import agentic, distill, dpo, opd, rlvr, sft

    return {p.name: p for p in (rlvr.PIPELINE, agentic.PIPELINE, sft.PIPELINE, dpo.PIPELINE,
                                distill.PIPELINE, opd.PIPELINE)}


def pipelines() -> dict[str, RollPipeline]:
    """Every ROLL pipeline by name (`--pipeline`'s choices)."""
    return _catalog()


NAMES = ("rlvr", "agentic", "sft", "dpo", "distill", "opd")  # the CLI's choices, light

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
    if "actor_train" in present and not generates:
        return "dpo", "it has actor_train without actor_infer, rewards or envs (DPO's roles)"
    agentic = [k for k in AGENTIC_MARKERS if k in present]
    if agentic:
        return "agentic", f"it has {_said(agentic)}"
    return "rlvr", "none of the other pipelines' roles or keys"


def owner(key: str, pipeline: RollPipeline) -> RollPipeline | None:
    """The pipeline flywheel does not run whose key `key` is, when it is the file's own
    pipeline's (so ROLL reads it for this file): its keys are reported as needing it."""
    if pipeline.runs_as is None and pipeline.reads(key):
        return pipeline
    return None


def _said(keys: list[str]) -> str:
    return ", ".join(keys)
