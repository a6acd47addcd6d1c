"""ROLL's offline distillation pipeline (examples/start_distill_pipeline.py and
start_distill_vl_pipeline.py, roll/pipeline/distill/distill_config.py): flywheel's
`pipeline_type: distill` (docs: pipelines/distillation.md).

A student trained on a teacher's top-k logits over fixed question/answer records. `fit`:
- `student` -> actor_train, `student_pretrain` -> pretrain, `teacher_pretrain` (or the
  teacher's own model_args.model_name_or_path) -> `teacher.default.model_args`;
- the divergence's keys keep their names (logits_topk, distill_loss_weight,
  kd_temperature, teacher_temperature, kd_objective, adaptive_kl_alpha, skew_lambda,
  distill_on_prompt); `logits_transfer_backend` (how ROLL moves logits between GPUs) goes;
- `question_key` / `answer_key` -> data_args' prompt / response columns (actor_train's
  and validation's); `sequence_length` bounds the whole record, as for SFT;
- the student's `num_train_epochs` stays epochs (ROLL's distill runs whole epochs);
- backends (`fit_distill_backend`): flywheel's offline distillation trains the student in
  process on hf_train with the teacher beside it, so a Megatron / FSDP2 / DeepSpeed student
  goes to hf_train and the teacher's backend, devices and batch keys are dropped, each
  said; a VL file (images) is reported missing: flywheel's offline distillation reads
  text records.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from flywheel.interop.roll.pipelines.pipeline import RollPipeline

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

KEYS = {"student_pretrain": None, "teacher_pretrain": None, "question_key": "question",
        "answer_key": "answer", "logits_topk": 64, "distill_loss_weight": 0.5,
        "kd_temperature": 1, "teacher_temperature": 1, "kd_objective": "forward_kl",
        "adaptive_kl_alpha": 0.5, "skew_lambda": 0.1, "distill_on_prompt": False,
        "logits_transfer_backend": "ipc+nccl"}
# ROLL's keys flywheel's distill kind reads under the same name
SAME_NAMES = ("logits_topk", "distill_loss_weight", "kd_temperature", "teacher_temperature",
              "kd_objective", "adaptive_kl_alpha", "skew_lambda", "distill_on_prompt")
# ROLL's column keys -> data_args' ROLL-spelled column keys (prompt_data.ROLL_COLUMNS)
COLUMNS = {"question_key": "prompt", "answer_key": "response"}
PACKING = ("use_sequence_packing", "sequence_packing_args")
TEACHER_KEEPS = ("model_args", "infer_batch_size")
# a vision-language model's name (ROLL starts those files with its VL distill launcher)
VL_NAME = re.compile(r"[-_]vl\b|[-_]vl[-_]", re.IGNORECASE)


def fit_distill(data: dict[str, Any], out: Conversion) -> dict[str, Any]:
    from flywheel.interop.roll.pipelines.sft import _lengths

    data = dict(data)
    models = [str(data.get(k) or "") for k in ("student_pretrain", "teacher_pretrain")]
    if any(VL_NAME.search(m) for m in models):
        out.missing.append(f"image records in offline distillation (ROLL's VL distill "
                           f"pipeline, examples/start_distill_vl_pipeline.py, for "
                           f"{' and '.join(m for m in models if m)}): flywheel's distill "
                           f"reads text records")
    student = data.pop("student", None)
    data["actor_train"] = dict(student) if isinstance(student, dict) else {}
    out.mapped.append("student -> actor_train (the role flywheel's offline distillation "
                      "trains)")
    if data.get("student_pretrain") is not None:
        data["pretrain"] = data.pop("student_pretrain")
        out.mapped.append(f"student_pretrain -> pretrain: {data['pretrain']!r}")
    for key in SAME_NAMES:
        if key in data:
            out.data[key] = data.pop(key)
            out.mapped.append(f"{key}: {out.data[key]!r} -> {key}")
    backend = data.pop("logits_transfer_backend", None)
    if backend is not None:
        out.dropped.append(f"logits_transfer_backend: {backend!r}: how ROLL moves the "
                           f"teacher's logits between GPUs; flywheel's teacher runs in the "
                           f"student's process")
    if data.get("max_steps") is not None:
        out.dropped.append(f"max_steps: {data.pop('max_steps')!r}: ROLL's distillation runs "
                           f"student.training_args.num_train_epochs whole epochs")
    _teacher(data, out)
    _epochs(data["actor_train"], out)
    for key in PACKING:
        if key in data["actor_train"]:
            data["actor_train"].pop(key)
            out.dropped.append(f"student.{key}: flywheel's top-k distillation head runs "
                               f"padded rows (the same numbers, only slower)")
    for roll_key, ours in COLUMNS.items():
        written = roll_key in data
        value = data.pop(roll_key, KEYS[roll_key])
        for block in ("actor_train", "validation"):
            if isinstance(data.get(block), dict):
                out.data.setdefault(block, {}).setdefault("data_args", {})[ours] = value
        how = "" if written else f" (unset: ROLL's default {value!r})"
        out.mapped.append(f"{roll_key}: {value!r}{how} -> actor_train.data_args.{ours} and "
                          f"validation.data_args.{ours}")
    _lengths(data, out)
    return data


def _teacher(data: dict[str, Any], out: Conversion) -> None:
    """teacher.default: its model (teacher_pretrain first, as ROLL fills it) and dtype."""
    block = data.pop("teacher", None)
    block = dict(block) if isinstance(block, dict) else {}
    model_args = dict(block.get("model_args") or {})
    name = data.pop("teacher_pretrain", None) or model_args.get("model_name_or_path")
    teacher: dict[str, Any] = {"model_args": {"model_name_or_path": name}}
    if "dtype" in model_args:
        teacher["model_args"]["dtype"] = model_args["dtype"]
    if "infer_batch_size" in block:
        teacher["infer_batch_size"] = block["infer_batch_size"]
    out.data["teacher"] = {"default": teacher}
    out.mapped.append(f"teacher_pretrain / teacher -> teacher.default.model_args "
                      f"(model_name_or_path {name!r})")
    for key, value in model_args.items():
        if key not in ("model_name_or_path", "dtype"):
            out.dropped.append(f"teacher.model_args.{key}: {value!r}: flywheel's teacher is "
                               f"a frozen transformers model in the student's process (its "
                               f"dtype and model act)")
    for key in block:
        if key not in TEACHER_KEEPS:
            out.dropped.append(f"teacher.{key}: the teacher runs in the student's process "
                               f"on its device (no backend, devices or batch of its own; "
                               f"ROLL's megatron_infer teacher maps to none)")


def _epochs(role: dict[str, Any], out: Conversion) -> None:
    args = role.get("training_args") if isinstance(role.get("training_args"), dict) else {}
    epochs = args.get("num_train_epochs", 1.0)
    role["training_args"] = {**args, "num_train_epochs": epochs}
    out.mapped.append(f"student.training_args.num_train_epochs: {epochs} -> "
                      f"actor_train.training_args.num_train_epochs (whole passes over the "
                      f"records, as ROLL's distillation)")


def fit_distill_backend(out: Conversion) -> None:
    """The student in process on hf_train; a VL file is reported missing."""
    actor = out.data.get("actor_train") or {}
    strategy = actor.get("strategy_args") or {}
    name = strategy.get("strategy_name")
    if name not in (None, "hf_train"):
        config = strategy.get("strategy_config") or {}
        actor["strategy_args"] = {"strategy_name": "hf_train"}
        dropped = f"; strategy_config {', '.join(config)} dropped" if config else ""
        out.mapped.append(f"actor_train.strategy_args.strategy_name: {name} -> hf_train "
                          f"(flywheel's offline distillation trains in process on one "
                          f"device{dropped})")
    for key in ("device_mapping", "num_gpus_per_worker"):
        if key in actor:
            out.dropped.append(f"actor_train.{key}: {actor.pop(key)!r}: offline distillation "
                               f"trains on this process's one device")
    if out.vl and not any(m.startswith("image records") for m in out.missing):
        out.missing.append("image records in offline distillation: flywheel's distill "
                           "reads text records")


UNREAD = frozenset({"max_steps", "val_batch_size"})

PIPELINE = RollPipeline(name="distill", title="offline distillation",
                        launcher="examples/start_distill_pipeline.py",
                        roles=("student", "teacher"), keys=KEYS, runs_as="distill",
                        fit=fit_distill, fit_backends=fit_distill_backend, unread=UNREAD,
                        generates=False)
