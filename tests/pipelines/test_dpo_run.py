"""`pipeline_type: dpo` (pipelines/dpo/run.py): steps raise the reward margin and leave the
reference's weights bit-identical (a frozen copy; with LoRA, the base the adapter rides
on); a short run from a YAML logs the DPO metrics and writes a checkpoint; the config's
refusals name their keys. Tiny model, in process, fp32.
"""

from __future__ import annotations

import json

import pytest
import torch

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.dpo.run import (
    Reference,
    load,
    objective,
    pair_worker_config,
    train_loop,
)
from flywheel.pipelines.run.launch import run
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.workers.strategies.hf_model import load_tokenizer
from flywheel.workers.strategies.hf_train import HFTrainStrategy


def write_pairs(path, n=8):
    path.write_text("".join(json.dumps({"prompt": f"{a}*3=", "chosen": str(3 * a),
                                        "rejected": str(3 * a + 1)}) + "\n"
                            for a in range(2, 2 + n)))
    return str(path)


def dpo_config(tmp_path, **extra):
    data = write_pairs(tmp_path / "pairs.jsonl")
    actor = extra.pop("actor_train", {})
    return load_config_dict({
        "pipeline_type": "dpo", "pretrain": "builtin://tiny-qwen2", "seed": 0,
        "output_dir": str(tmp_path / "run"), "sequence_length": 16, "max_steps": 4,
        "beta": 0.5, "tracking": {"backends": ["jsonl"]},
        "actor_train": {"training_args": {"learning_rate": 1e-2,
                                          "per_device_train_batch_size": 4},
                        "data_args": {"file_name": data}, **actor}, **extra})


def margins_and_reference(cfg, steps=4):
    """The reward margin of each step, and the reference's weights before and after."""
    path = resolve_pretrain(cfg.pretrain)
    tokenizer = load_tokenizer(path)
    pairs = load(cfg, "actor_train", tokenizer)
    policy = HFTrainStrategy(path, pair_worker_config(cfg), cfg.seed, total_steps=steps)
    reference = Reference(cfg, path, policy)
    held = reference.frozen.model if reference.frozen is not None else policy.model
    frozen = {k: v.clone() for k, v in held.named_parameters() if "lora_" not in k}
    batch = pairs.batch(list(range(4)), tokenizer.pad_token_id)
    margins = []
    for _ in range(steps):
        batch.ref_log_probs = reference.log_probs(batch)
        margins.append(policy.train_step(batch, objective(cfg))["dpo/reward_margin"])
    after = {k: v for k, v in held.named_parameters() if "lora_" not in k}
    return margins, frozen, after


@pytest.mark.parametrize("lora", [False, True], ids=["frozen_copy", "lora_base"])
def test_steps_raise_the_margin_and_the_reference_stays_bit_identical(tmp_path, lora):
    actor = {"model_args": {"lora_target": "q_proj,v_proj"}} if lora else {}
    margins, before, after = margins_and_reference(dpo_config(tmp_path, actor_train=actor))
    assert margins[0] == 0.0  # the policy starts as the reference: h = 0
    assert margins[-1] > margins[1] > 0
    assert before.keys() == after.keys() and len(before) > 10
    for name, tensor in before.items():
        assert torch.equal(after[name], tensor), name


class Logged:
    """The one tracker call a DPO loop makes (`log`): every row, in order."""

    def __init__(self):
        self.rows = []

    def log(self, step, metrics):
        self.rows.append({"step": step, **metrics})


def test_validation_runs_before_the_first_step_as_the_baseline(tmp_path):
    """Step 0 is the untrained policy's validation (as RLVR's and ROLL's DPO pipelines
    validate at step 0): the policy is the reference there, so h = 0 on every held-out
    pair, the margin exactly 0 and the loss log 2."""
    val = write_pairs(tmp_path / "val.jsonl", n=4)
    cfg = dpo_config(tmp_path, max_steps=1, eval_steps=1, response_length=3,
                     validation={"data_args": {"file_name": val}})
    path = resolve_pretrain(cfg.pretrain)
    tokenizer = load_tokenizer(path)
    logged = Logged()
    train_loop(cfg, path, tokenizer, load(cfg, "actor_train", tokenizer),
               load(cfg, "validation", tokenizer), logged, tmp_path / "run")
    assert [r["step"] for r in logged.rows] == [0, 1]
    baseline, after = logged.rows
    assert {k for k in baseline if k != "step"} == {k for k in after if k.startswith("val/")}
    assert baseline["val/dpo/reward_margin"] == 0.0
    assert baseline["val/dpo/loss"] == pytest.approx(0.693147, abs=1e-6)
    assert 0 <= baseline["val/accuracy"] <= 1
    assert after["val/dpo/reward_margin"] != 0.0  # step 1 moved the policy


@pytest.mark.long  # a whole `platform run` (~10 s idle); the steps' own tests above stay
def test_a_yaml_run_logs_the_pair_metrics_and_a_checkpoint(tmp_path):
    val = write_pairs(tmp_path / "val.jsonl", n=4)
    cfg = dpo_config(tmp_path, max_steps=3, eval_steps=3, response_length=3,
                     validation={"data_args": {"file_name": val}})
    rows = [json.loads(x) for x in (run(cfg) / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # step 0: the baseline validation
    for key in ("dpo/loss", "dpo/reward_margin", "dpo/reward_accuracy", "dpo/chosen_logps",
                "dpo/rejected_logps", "actor/grad_norm"):
        assert key in rows[-1], key
    assert "val/accuracy" in rows[0] and rows[1]["dpo/pairs_dropped_overlong"] == 0.0
    assert "val/dpo/reward_accuracy" in rows[-1] and 0 <= rows[-1]["val/accuracy"] <= 1
    assert (tmp_path / "run" / "checkpoint-3" / "config.json").exists()


DPO = {"pipeline_type": "dpo", "actor_train": {"data_args": {"file_name": "x.jsonl"}}}


@pytest.mark.parametrize(("extra", "key", "says"), [
    ({"pipeline_type": "rlvr", "beta": 0.2}, "beta",
     "acts in pipeline_type dpo or online_dpo only"),
    ({"pipeline_type": "rlvr", "chosen_key": "good"}, "chosen_key",
     "acts in pipeline_type dpo or reward_model only"),
    ({"pipeline_type": "sft", "chosen_key": "good"}, "chosen_key", "SFT does not use it"),
    ({"rollout_batch_size": 64}, "rollout_batch_size", "DPO does not use"),
    ({"actor_train": {"pg_variant": "tis"}}, "actor_train.pg_variant", "DPO does not use"),
    ({"ipo": True, "dpo_loss_type": "simpo"}, "ipo", "write one"),
    ({"ipo": True, "label_smoothing": 0.1}, "label_smoothing", "no label smoothing"),
    ({"simpo_gamma": 1.0}, "simpo_gamma", "SimPO's margin"),
    ({"dpo_loss_type": "simpo", "reference": {}}, "reference", "uses no reference"),
    ({"reference": {"infer_batch_size": 4}}, "reference.infer_batch_size", "only its "),
    ({"reference": {"model_args": {"dtype": "bf16"}}}, "reference.model_args.dtype",
     "only model_name_or_path acts"),
    ({"reference": {"model_args": {"model_name_or_path": "other"}},
      "actor_train": {"model_args": {"lora_target": "q_proj"}}},
     "reference.model_args.model_name_or_path", "adapter disabled"),
    ({"actor_train": {"training_args": {"dynamic_batching": True}}},
     "actor_train.training_args.dynamic_batching", "split a pair"),
    ({"actor_train": {"strategy_args": {"strategy_name": "megatron_train"}}},
     "actor_train.strategy_args.strategy_name", "or deepspeed_train (ranks on device_mapping"),
    ({"actor_train": {"strategy_args": {"strategy_name": "deepspeed_train"},
                      "model_args": {"lora_target": "q_proj"}}},
     "actor_train.model_args.lora_target", "writes whole models"),
    ({"actor_train": {"device_mapping": [0, 1]}}, "actor_train.device_mapping",
     "or use deepspeed_train for several ranks"),
    ({"pipeline_type": "reward_model",
      "actor_train": {"strategy_args": {"strategy_name": "deepspeed_train"}}},
     "actor_train.strategy_args.strategy_name", "(in process, one device), not deepspeed"),
    ({"ray": {"num_cpus": 2}}, "ray", "DPO runs in this process"),
    ({"eval_steps": 10}, "eval_steps", "no validation"),
    ({"label_smoothing": 0.7}, "label_smoothing", "[0, 0.5]"),
])
def test_config_errors(extra, key, says):
    data = {**DPO, **extra}
    if "actor_train" in extra:
        data["actor_train"] = {**DPO["actor_train"], **extra["actor_train"]}
    with pytest.raises(ConfigError) as error:
        load_config_dict(data)
    assert error.value.key_path == key and says in str(error.value), str(error.value)


def test_roll_spelling_of_ipo_is_the_ipo_loss():
    cfg = load_config_dict({**DPO, "ipo": True, "beta": 0.2})
    assert objective(cfg).loss_type == "ipo" and objective(cfg).args.beta == 0.2
