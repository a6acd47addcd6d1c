"""`platform convert --from roll` of ROLL's distillation files (interop/roll/pipelines/opd.py
and distill.py): the shapes of its on-policy (one teacher, many teachers) and offline
distillation examples convert into configs that validate, each key mapped or reported;
ROLL's megatron_infer teacher becomes a forward-only megatron_train role (on-policy) or the
in-process teacher (offline), said in the report."""

from pathlib import Path

import yaml

from flywheel.pipelines.config import convert_roll, load_config_dict

PIPELINES = Path(__file__).parents[1] / "data" / "configs" / "roll" / "pipelines"


def write(tmp_path, data) -> Path:
    path = tmp_path / "roll.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def opd_shape() -> dict:
    return yaml.safe_load((PIPELINES / "onpolicy_distill.yaml").read_text())


def test_the_single_teacher_opd_file_converts_to_pure_opd_on_rlvr():
    out = convert_roll(PIPELINES / "onpolicy_distill.yaml")
    assert not out.missing and not out.needs_pipeline, out.missing
    data = out.data
    assert data["pipeline_type"] == "rlvr" and data["opd_mode"] == "pure"
    assert data["adv_estimator"] == "reinforce"
    assert data["actor_train"]["data_args"]["file_name"] == ["data/math.jsonl"]
    assert data["actor_infer"]["strategy_args"]["strategy_name"] == "vllm"
    teacher = data["teacher"]["default"]
    assert teacher["model_args"]["model_name_or_path"] == "Qwen/Qwen3-32B"
    assert teacher["strategy_args"] == {"strategy_name": "megatron_train"}
    assert any("teacher.default: a forward-only role on megatron_train" in m
               for m in out.mapped)
    cfg = load_config_dict(data)
    assert cfg.teacher["default"].opd_kl_coef == 1.0


def test_many_teachers_route_by_tag_through_the_rewards_domains(tmp_path):
    """ROLL's multi-teacher example's shape: teachers by name with opd_kl_coef and
    tag_included, the data mix keyed by reward (whose tag_included are the tags)."""
    data = opd_shape()
    block = data.pop("teacher")
    data["teacher"] = {
        "math": {**block, "opd_kl_coef": 1.0, "tag_included": ["math_dapo"],
                 "model_args": {**block["model_args"], "disable_gradient_checkpointing": True},
                 "training_args": {"per_device_train_batch_size": 1}},
        "code": {**block, "opd_kl_coef": 0.5, "tag_included": ["KodCode"]}}
    data["student_train"]["data_args"]["domain_interleave_probs"] = {"math_rule": 0.5,
                                                                     "code_rule": 0.5}
    data["rewards"] = {
        "math_rule": {**data["rewards"]["math_rule"], "tag_included": ["math_dapo"]},
        "code_rule": {"worker_cls": "roll.pipeline.rlvr.rewards.code_sandbox_reward_worker."
                                    "CodeSandboxRewardWorker", "tag_included": ["KodCode"]}}
    out = convert_roll(write(tmp_path, data))
    assert not out.missing, out.missing
    teachers = out.data["teacher"]
    assert teachers["math"]["tag_included"] == ["math_dapo"]
    assert teachers["code"]["opd_kl_coef"] == 0.5
    assert "training_args" not in teachers["math"]
    assert "disable_gradient_checkpointing" not in teachers["math"]["model_args"]
    assert any(d.startswith("teacher.math.training_args: a teacher never trains")
               for d in out.dropped)
    load_config_dict(out.data)
    del data["teacher"]["code"]  # KodCode records would have no teacher
    refused = convert_roll(write(tmp_path, data))
    assert any("no teacher takes tag(s) KodCode" in m for m in refused.missing)


def test_a_megatron_infer_teacher_keeps_its_layout_and_its_bf16_is_its_dtype(tmp_path):
    """ROLL's multi-teacher file gives each megatron_infer teacher a strategy_config (TP,
    PP, CP and Megatron's bf16 flag): the layout stays on the forward-only megatron_train
    role and validates there, bf16 becomes the teacher's model_args.dtype (the merged tree
    refused the file: 'bf16: unknown key for megatron_train')."""
    data = opd_shape()
    data["teacher"]["strategy_args"]["strategy_config"] = {
        "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 4,
        "context_parallel_size": 1, "bf16": True}
    data["teacher"] = {"math": data["teacher"]}
    out = convert_roll(write(tmp_path, data))
    assert not out.missing, out.missing
    teacher = out.data["teacher"]["math"]
    assert teacher["strategy_args"]["strategy_config"] == {
        "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 4,
        "context_parallel_size": 1}
    assert teacher["model_args"]["dtype"] == "bf16"
    assert any(m.startswith("teacher.math.strategy_args.strategy_config.bf16: true -> "
                            "teacher.math.model_args.dtype: bf16") for m in out.mapped)
    load_config_dict(out.data)


def test_use_opd_alone_is_mixed_and_agentic_opd_is_missing(tmp_path):
    data = opd_shape()
    data["actor_train"], data["actor_infer"] = data.pop("student_train"), data.pop(
        "student_infer")
    data["use_opd"] = True  # an RLVR file started by the RLVR launcher
    out = convert_roll(write(tmp_path, data))
    assert out.roll_pipeline == "opd" and out.data["opd_mode"] == "mixed", out.missing
    assert out.data["adv_estimator"] == "grpo"  # mixed keeps the rewards' estimator
    data["pure_opd_pipeline_type"] = "agentic"
    assert any("agentic episodes" in m for m in convert_roll(write(tmp_path, data)).missing)


def test_the_offline_distillation_file_converts_to_the_distill_kind():
    out = convert_roll(PIPELINES / "distill_megatron.yaml")
    assert not out.missing and not out.needs_pipeline, out.missing
    data = out.data
    assert data["pipeline_type"] == "distill" and data["pretrain"] == "Qwen/Qwen2.5-7B-Instruct"
    assert data["teacher"] == {"default": {"model_args": {
        "model_name_or_path": "Qwen/Qwen2.5-14B-Instruct", "dtype": "bf16"}}}
    assert (data["logits_topk"], data["distill_loss_weight"], data["kd_objective"]) == (
        64, 0.85, "forward_kl")
    assert data["actor_train"]["data_args"]["prompt"] == "question"
    assert data["actor_train"]["data_args"]["response"] == "answer"
    assert data["actor_train"]["strategy_args"] == {"strategy_name": "hf_train"}
    assert data["actor_train"]["training_args"]["num_train_epochs"] == 1.0
    said = "\n".join(out.mapped + out.dropped)
    assert "megatron_train -> hf_train" in said and "logits_transfer_backend" in said
    assert "teacher.strategy_args: the teacher runs in the student's process" in said
    cfg = load_config_dict(data)
    assert cfg.sequence_length == 1024 and cfg.prompt_length == 1024


def test_a_vl_distillation_file_is_reported_missing_image_records(tmp_path):
    """ROLL's two VL distillation files (Qwen2.5-VL student and teacher, started by its VL
    launcher): flywheel's offline distillation reads text records."""
    data = yaml.safe_load((PIPELINES / "distill_megatron.yaml").read_text())
    data["student_pretrain"] = "Qwen/Qwen2.5-VL-7B-Instruct"
    data["teacher_pretrain"] = "Qwen/Qwen2.5-VL-32B-Instruct"
    out = convert_roll(write(tmp_path, data))
    assert [m for m in out.missing if m.startswith("image records in offline distillation")]


def test_a_forward_only_reference_reports_the_strategy_config_it_leaves(tmp_path):
    """deepspeed_infer becomes a forward-only deepspeed_train role; its own settings do not
    carry over, and the report says so (they were dropped without a line before)."""
    data = opd_shape()
    data["reference"] = {"device_mapping": "list(range(0,1))",
                         "strategy_args": {"strategy_name": "deepspeed_infer",
                                           "strategy_config": {"zero_optimization":
                                                               {"stage": 3}}}}
    out = convert_roll(write(tmp_path, data))
    assert ("reference.strategy_args.strategy_name: deepspeed_infer -> deepspeed_train "
            "(forward-only roles run on deepspeed_train)") in out.mapped
    assert any(d.startswith("reference.strategy_args.strategy_config: zero_optimization: "
                            "deepspeed_infer's settings") for d in out.dropped), out.dropped
