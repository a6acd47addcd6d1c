"""Cross-field rules of `pipeline_type: distill` (offline distillation), its kind's
`config_check` (config/kinds.py), and the keys it reads.

An offline distillation run trains actor_train on fixed records in the driver process, on
the shared update loop, as SFT does (pipelines/distill/offline_run.py), with the teacher
beside it in the same process: a frozen model whose top-k next-token log-probs the loss
reads. What it refuses, each in one line naming the key:
- keys it does not read (the acts-when table: RL keys, the OPD teacher knobs);
- anything but exactly one teacher with its own model (`weights: own`, a model path);
- the teacher's placement keys (backend, devices, threads): it runs in this process on
  the student's device, so they would do nothing; the teacher's OPD keys (opd_kl_coef,
  tag_included, context_template);
- actor_train elsewhere than hf_train on one device, sequence packing (the top-k head
  takes padded rows), LoRA (not yet), resume;
- max_steps beside num_train_epochs, validation sampling keys, eval_steps without
  validation and the reverse (sft.check_record_schedule).
Pure: each rule raises ConfigError with the key path and the fix.
"""

from __future__ import annotations

from dataclasses import fields

from flywheel.config.checks.sft import SFT_ACTOR_KEYS, SFT_KEYS, check_record_schedule
from flywheel.config.schema import PipelineConfig, TeacherConfig
from flywheel.config.schema.offline_distill import OfflineDistillKeys
from flywheel.platform.config.errors import ConfigError

OFFLINE_DISTILL_KEYS = frozenset(f.name for f in fields(OfflineDistillKeys))
# the kind's `keys`: SFT's (in this process: ray refused as such), its own, the teacher
DISTILL_KIND_KEYS = (SFT_KEYS - {"ray"}) | OFFLINE_DISTILL_KEYS | {"teacher"}
# a teacher's keys that act in process: its model and how many rows one forward takes
TEACHER_KEYS = frozenset({"name", "model_args", "infer_batch_size"})


def check_offline_distill(cfg: PipelineConfig) -> None:
    check_teacher(cfg)
    actor = cfg.actor_train
    defaults = type(actor)()
    for f in fields(actor):
        if f.name not in SFT_ACTOR_KEYS and getattr(actor, f.name) != getattr(defaults, f.name):
            raise ConfigError("", f"actor_train.{f.name}", "offline distillation does not "
                                                            "use it (it trains on fixed "
                                                            "records); remove it")
    if cfg.resume_from_checkpoint:
        raise ConfigError("", "resume_from_checkpoint", "offline distillation runs do not "
                                                        "resume yet; start a new run")
    strategy = actor.strategy_args.strategy_name
    if strategy != "hf_train":
        raise ConfigError("", "actor_train.strategy_args.strategy_name",
                          f"offline distillation trains in this process on hf_train (one "
                          f"device, the teacher beside it), not {strategy}")
    if (actor.device_mapping is not None and len(actor.device_mapping) > 1
            or actor.num_gpus_per_worker != 1):
        raise ConfigError("", "actor_train.device_mapping", "offline distillation trains on "
                                                            "one device in process: leave "
                                                            "device_mapping unset")
    if actor.training_args.sequence_packing:
        raise ConfigError("", "actor_train.training_args.sequence_packing",
                          "the top-k distillation head runs padded rows; remove it")
    if actor.model_args.lora_target is not None:
        raise ConfigError("", "actor_train.model_args.lora_target",
                          "offline distillation trains the whole model (no LoRA yet); "
                          "remove it")
    check_record_schedule(cfg, "offline distillation")


def check_teacher(cfg: PipelineConfig) -> None:
    """One teacher of its own model, with no key that would do nothing in process."""
    if len(cfg.teacher) != 1:
        raise ConfigError("", "teacher", f"offline distillation reads one teacher (its "
                                         f"model_args.model_name_or_path), found "
                                         f"{len(cfg.teacher)}: write teacher: {{<name>: "
                                         f"{{model_args: {{model_name_or_path: ...}}}}}}")
    (name, teacher), = cfg.teacher.items()
    key = f"teacher.{name}"
    if teacher.weights != "own":
        raise ConfigError("", f"{key}.weights", "offline distillation needs a teacher of "
                                                "its own model (the student's own weights "
                                                "would distill into themselves); remove it")
    if not teacher.model_args.model_name_or_path:
        raise ConfigError("", f"{key}.model_args.model_name_or_path",
                          "the teacher's model is required (a hub id, folder or builtin://)")
    bare = TeacherConfig(name=teacher.name, model_args=teacher.model_args,
                         infer_batch_size=teacher.infer_batch_size)
    for f in fields(TeacherConfig):
        if f.name not in TEACHER_KEYS and getattr(teacher, f.name) != getattr(bare, f.name):
            raise ConfigError("", f"{key}.{f.name}",
                              "offline distillation runs its teacher frozen in this process "
                              "beside the student: only its model_args and infer_batch_size "
                              "act (opd_kl_coef, tag_included and context_template are "
                              "on-policy distillation's); remove it")
