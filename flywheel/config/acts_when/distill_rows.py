"""The "acts when" rows of on-policy distillation's keys (schema/distill.py): its top-level
knobs act only with a teacher, and a teacher, like a reference, never samples or trains.
acts_when/table.py adds these rows to its ROWS (and its LoRA rows name teachers)."""

from __future__ import annotations

from flywheel.config.acts_when.rule import ActsWhen, Condition
from flywheel.config.checks.offline_distill import OFFLINE_DISTILL_KEYS
from flywheel.config.kinds import kind_of, kinds_said

TEACHER = Condition("with a teacher: block on an RL pipeline (on-policy distillation)",
                    lambda cfg, _: bool(cfg.teacher) and kind_of(cfg).rl)


def _declares(name: str):
    """The kinds that list `name` in their keys (RLVR reads every key it has no row for)."""
    return lambda kind: kind.keys is not None and name in kind.keys


# offline distillation's keys act where a kind declares them (pipeline_type distill)
_OFFLINE = [ActsWhen(name, Condition(f"with {kinds_said(_declares(name))}",
                                     lambda cfg, _, name=name: _declares(name)(kind_of(cfg))),
                     "offline distillation's loss and its teacher cache",
                     "on-policy distillation reads the teacher's log-probs of the sampled "
                     "tokens (opd_mode, opd_gamma): remove it")
            for name in sorted(OFFLINE_DISTILL_KEYS)]
_NEVER_SAMPLES = Condition("on actor_infer and validation", lambda cfg, _: False)
_NEVER_TRAINS = Condition("on actor_train and critic", lambda cfg, _: False)
_NEVER_BACKWARD = Condition("on actor_train", lambda cfg, _: False)

OWN_TEACHER = Condition("on a teacher with weights: own",
                        lambda cfg, path: cfg.teacher[str(path[1])].weights == "own")
# a teacher of the student's own weights loads nothing and starts no worker
OWN_KEYS = ("model_args", "strategy_args", "device_mapping", "num_gpus_per_worker",
            "infer_batch_size", "num_threads", "cpu_affinity")

DISTILL_ROWS = [
    *_OFFLINE,
    *[ActsWhen(f"teacher.*.{key}", OWN_TEACHER, "the teacher's own model and workers",
               "weights: student scores on actor_train (no second model, no worker): "
               "remove it") for key in OWN_KEYS],
    ActsWhen("opd_mode", TEACHER, "whether the teachers' signal replaces or adds to the "
                                  "verifier rewards' advantage", "add a teacher, or remove it"),
    ActsWhen("opd_gamma", TEACHER, "the discount of the teachers' per-token signal",
             "add a teacher, or remove it"),
    ActsWhen("teacher.*.generating_args", _NEVER_SAMPLES, "sampling settings",
             "a teacher scores the student's tokens at actor_infer's temperature: remove it"),
    ActsWhen("teacher.*.training_args", _NEVER_TRAINS, "the optimizer and batch sizes",
             "a teacher never trains: remove it"),
    *[ActsWhen(f"teacher.*.model_args.{key}", _NEVER_BACKWARD, does,
               "a teacher never trains: remove it")
      for key, does in (("disable_gradient_checkpointing", "gradient checkpointing"),
                        ("moe_aux_loss_coef", "the MoE router's load-balancing loss"),
                        ("freeze_module_prefix", "modules that do not train"))],
]
