"""`pipeline_type: distill` (pipelines/distill/offline_run.py): the student's top-k head and
the teacher's top-k against a full-vocabulary forward (value and gradient), the teacher
cache keyed so a changed teacher or k is never read, a short run through `platform run`
whose divergence to the teacher falls and whose second run reads every teacher value from
the cache, and the config's refusals. Tiny models, in process, fp32."""

from __future__ import annotations

import json

import pytest
import torch

from flywheel.algorithms.distill import distill_loss
from flywheel.cli import main
from flywheel.config.schema import ModelArgs
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.distill.teacher_topk import TeacherTopK, load_teacher, rows_batch
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.models.tiny_qwen2 import build_tiny_qwen2
from flywheel.platform.models.tiny_qwen2_spec import TinyQwen2Spec
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.hf_model import load_causal_lm
from flywheel.workers.strategies.topk_head import (
    TOPK_INDICES,
    TopKHead,
    teacher_topk,
)

FP32 = ModelArgs(dtype="fp32", disable_gradient_checkpointing=True)
ROWS = [[1, 5, 6, 7, 2], [1, 8, 9, 2, 3, 4, 11]]  # token ids of the tiny vocabulary (15)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill_models")
    return (str(build_tiny_qwen2(root / "student", TinyQwen2Spec(seed=1))),
            str(build_tiny_qwen2(root / "teacher", TinyQwen2Spec(seed=2))))


def mask_of(batch: TokenBatch, first: int) -> torch.Tensor:
    mask = batch.attention_mask.float().clone()
    mask[:, :first] = 0
    return mask


def test_the_teachers_top_k_and_the_students_head_are_a_full_forward(models):
    """Top-k of softmax(z / T) at the mask, and the student's label and top-k log-probs
    (temperature on the top-k only) with the gradient of a full-vocabulary reference."""
    student_path, teacher_path = models
    batch = rows_batch(ROWS, 0)
    batch.response_mask = mask_of(batch, 3)  # positions 3.. of each row
    teacher = load_causal_lm(teacher_path, FP32, torch.device("cpu")).eval()
    values, ids = teacher_topk(teacher, batch, batch.response_mask, 4, temperature=2.0)
    with torch.no_grad():
        full = torch.log_softmax(teacher(input_ids=batch.input_ids,
                                         attention_mask=batch.attention_mask).logits / 2.0, -1)
    want_values, want_ids = torch.topk(full[:, :-1], 4, dim=-1)  # position t-1 predicts t
    on = batch.response_mask[:, 1:].bool()
    assert torch.allclose(values[:, 1:][on], want_values[on], atol=1e-6)
    assert torch.equal(ids[:, 1:][on], want_ids[on])
    assert not values[:, 1:][~on].any() and not values[:, 0].any()

    batch.attach(TOPK_INDICES, ids, per="token")
    student = load_causal_lm(student_path, FP32, torch.device("cpu"))
    head = TopKHead("policy", kd_temperature=1.5)
    out, _ = head.hf_outputs(student, batch, False)  # [B, L, 1 + k]
    logits = student(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    label = torch.log_softmax(logits[:, :-1], -1).gather(-1, batch.input_ids[:, 1:, None])
    at_k = torch.log_softmax(logits[:, :-1] / 1.5, -1).gather(-1, ids[:, 1:])
    assert torch.allclose(out[:, 1:, 0][on], label[..., 0][on], atol=1e-6)
    assert torch.allclose(out[:, 1:, 1:][on], at_k[on], atol=1e-6)
    mask = batch.response_mask
    args = dict(divergence="js_divergence", distill_loss_weight=0.7)
    loss, _ = distill_loss(values, out[..., 1:], out[..., 0], mask, **args)
    grad = torch.autograd.grad(loss, student.model.embed_tokens.weight)[0]
    want_loss, _ = distill_loss(values, torch.nn.functional.pad(at_k, (0, 0, 1, 0)),
                                torch.nn.functional.pad(label[..., 0], (1, 0)), mask, **args)
    want = torch.autograd.grad(want_loss, student.model.embed_tokens.weight)[0]
    assert torch.allclose(loss, want_loss, atol=1e-6)
    assert torch.allclose(grad, want, atol=1e-6) and grad.abs().sum() > 0


def topk_of(teacher_path: str, cache, k: int = 4, model=None) -> TeacherTopK:
    positions = [list(range(3, len(r))) for r in ROWS]
    model = model or load_teacher(teacher_path, FP32, torch.device("cpu"))
    return TeacherTopK(model, teacher_path, FP32, ROWS, positions, k, 1.0, 0, 8, cache,
                       chunk_rows=1)


def test_the_cache_is_read_back_and_keyed_by_teacher_and_k(models, tmp_path):
    student_path, teacher_path = models
    first = topk_of(teacher_path, tmp_path)
    computed = first.of([1, 0])
    assert (first.computed_chunks, first.read_chunks) == (2, 0)
    again = topk_of(teacher_path, tmp_path, model=first.model)  # a later run
    read = again.of([0, 1])
    assert (again.computed_chunks, again.read_chunks) == (0, 2)
    for (v, i), (w, j) in zip(read, computed[::-1]):
        assert torch.equal(v, w) and torch.equal(i, j)
    assert torch.equal(read[0][0], topk_of(teacher_path, None).of([0])[0][0])  # on the fly
    other_k = topk_of(teacher_path, tmp_path, k=3)
    other_teacher = topk_of(student_path, tmp_path)  # another model's files
    folders = {t.folder for t in (first, other_k, other_teacher)}
    assert len(folders) == 3 and first.folder == again.folder
    assert json.loads((other_k.folder / "key.json").read_text())["k"] == "3"
    other_k.of([0])
    assert other_k.computed_chunks == 1  # nothing of k=4 read


def write_records(path, n=64):
    path.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "answer": f"{a + b:03d}"})
                            + "\n" for a, b in ((10 + i, 20 + 2 * i) for i in range(n))))
    return str(path)


def run_args(tmp_path, run: str, *extra: str) -> list[str]:
    data = write_records(tmp_path / "records.jsonl")
    return ["run", "--config", "examples/distill_tiny.yaml", "max_steps=8", "eval_steps=8",
            f"output_dir={tmp_path / run}", f"teacher_logits_cache={tmp_path / 'cache'}",
            f"actor_train.data_args.file_name={data}", f"validation.data_args.file_name={data}",
            "val_batch_size=16", "actor_train.training_args.per_device_train_batch_size=16",
            "actor_train.training_args.warmup_steps=0", *extra]


@pytest.mark.slow
def test_a_short_run_moves_the_student_to_the_teacher_and_rereads_the_cache(
        tmp_path, arith_model_path):
    """The shipped example, shrunk: pure forward KL (w = 1) for 8 steps; the student's
    divergence to the teacher falls; a second run reads every teacher value from disk."""
    assert main(run_args(tmp_path, "first", "distill_loss_weight=1.0")) == 0
    rows = [json.loads(x) for x in (tmp_path / "first" / "metrics.jsonl").read_text()
            .splitlines()]
    div = [r["distill/divergence"] for r in rows]
    assert len(div) == 8 and sum(div[-2:]) < 0.7 * sum(div[:2]), div
    assert (tmp_path / "first" / "checkpoint-8" / "config.json").exists()
    assert rows[0]["distill/teacher_chunks_computed"] == 1  # 64 records: one chunk
    assert main(run_args(tmp_path, "second", "distill_loss_weight=1.0", "max_steps=2",
                         "eval_steps=2")) == 0
    again = [json.loads(x) for x in (tmp_path / "second" / "metrics.jsonl").read_text()
             .splitlines()]
    assert [r["distill/teacher_chunks_computed"] for r in again] == [0, 0]
    assert again[0]["distill/teacher_chunks_read"] == 1
    assert again[0]["distill/divergence"] == rows[0]["distill/divergence"]  # same start


def distill_dict(**extra):
    cfg = {"pipeline_type": "distill", "pretrain": "builtin://tiny-qwen2",
           "teacher": {"t": {"model_args": {"model_name_or_path": "builtin://tiny-qwen2"}}},
           "actor_train": {"data_args": {"file_name": "builtin://arithmetic/train"}}}
    return cfg | extra


@pytest.mark.parametrize("extra, key, says", [
    ({"kd_objective": "wasserstein"}, "kd_objective", "forward_kl"),
    ({"logits_topk": 0}, "logits_topk", ""),
    ({"teacher": {}}, "teacher", "one teacher"),
    ({"teacher": {"a": {"model_args": {"model_name_or_path": "x"}},
                  "b": {"model_args": {"model_name_or_path": "y"}}}}, "teacher", "found 2"),
    ({"teacher": {"t": {"model_args": {"model_name_or_path": "x"}, "device_mapping": [1]}}},
     "teacher.t.device_mapping", "in this process"),
    ({"teacher": {"t": {"model_args": {"model_name_or_path": "x"}, "tag_included": ["m"]}}},
     "teacher.t.tag_included", "on-policy"),
    ({"teacher": {"t": {"weights": "student", "context_template": "{prompt}"}}},
     "teacher.t.weights", "own model"),
    ({"opd_gamma": 0.5}, "opd_gamma", "does not read it"),
    ({"actor_train": {"data_args": {"file_name": "f"}, "loss_agg_mode": "token-mean"}},
     "actor_train.loss_agg_mode", ""),
    ({"actor_train": {"data_args": {"file_name": "f"},
                      "strategy_args": {"strategy_name": "deepspeed_train"}}},
     "actor_train.strategy_args.strategy_name", "hf_train"),
])
def test_what_offline_distillation_refuses(extra, key, says):
    with pytest.raises(ConfigError) as e:
        load_config_dict(distill_dict(**extra))
    assert key in str(e.value) and says in str(e.value), str(e.value)


def test_offline_keys_are_refused_on_an_rl_pipeline():
    with pytest.raises(ConfigError, match="kd_objective.*pipeline_type distill"):
        load_config_dict({"pipeline_type": "rlvr", "kd_objective": "reverse_kl"})


def test_the_kd_objective_names_are_the_divergence_catalog():
    from typing import get_args

    from flywheel.algorithms.distill import DIVERGENCE_NAMES
    from flywheel.config.schema.offline_distill import KdObjective

    assert set(get_args(KdObjective)) == set(DIVERGENCE_NAMES)


def test_every_loss_key_reaches_the_objective_and_the_teacher(tmp_path):
    """kd_objective, distill_loss_weight, kd_support, adaptive_kl_alpha, skew_lambda reach
    the objective; logits_topk, the temperature product, the cache and its chunk size the
    teacher; distill_on_prompt the loss positions."""
    from flywheel.algorithms.distill import DivergenceParams
    from flywheel.pipelines.distill.offline_objective import DistillObjective
    from flywheel.pipelines.distill.offline_run import loss_positions, start_teacher
    from flywheel.pipelines.sft.run import EncodedRecords

    cfg = load_config_dict(distill_dict(
        kd_objective="adaptive_kl", distill_loss_weight=0.3, kd_support="renormalized",
        adaptive_kl_alpha=0.2, skew_lambda=0.4, logits_topk=5, kd_temperature=2.0,
        teacher_temperature=1.5, teacher_logits_cache=str(tmp_path),
        teacher_cache_chunk_rows=7))
    assert DistillObjective.of(cfg) == DistillObjective(
        "adaptive_kl", 0.3, "renormalized", DivergenceParams(0.2, 0.4), "token-mean")
    encoded = EncodedRecords([], [[1, 5, 6]], [[7, 2]])
    assert loss_positions(encoded, on_prompt=False) == [[3, 4]]
    assert loss_positions(encoded, on_prompt=True) == [[1, 2, 3, 4]]
    records = type("R", (), {"rows": [[1, 5, 6, 7, 2]], "positions": [[3, 4]]})()
    teacher = start_teacher(cfg, records, 0, "train")
    assert (teacher.k, teacher.temperature, teacher.chunk_rows) == (5, 3.0, 7)
    assert teacher.folder.parent == tmp_path / "train"
