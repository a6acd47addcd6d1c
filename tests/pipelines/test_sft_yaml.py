"""`pipeline_type: sft` from a YAML: examples/sft_tiny.yaml runs through `platform run`'s
launch, its loss falls, validation reports loss and greedy accuracy, and the checkpoint is
an HF folder an RL config can start from; chat-message data trains; RL keys are refused."""

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from flywheel.pipelines.config import load_config, load_config_dict
from flywheel.pipelines.run.launch import run
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.models.builtin import resolve_pretrain

EXAMPLE = Path(__file__).parents[2] / "examples" / "sft_tiny.yaml"


def metrics_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_example_runs_loss_falls_and_checkpoint_starts_rl(tmp_path, capsys):
    cfg = load_config(EXAMPLE, [f"output_dir={tmp_path}", "max_steps=20", "eval_steps=10",
                                "val_batch_size=20", "save_steps=15", "save_total_limit=1",
                                "actor_train.training_args.per_device_train_batch_size=16",
                                "actor_train.training_args.warmup_steps=5"])
    run_dir = run(cfg, str(EXAMPLE))
    rows = metrics_of(run_dir)
    assert [r["step"] for r in rows] == list(range(1, 21))
    losses = [r["sft/loss"] for r in rows]
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5
    assert [r["step"] for r in rows if "val/loss" in r] == [10, 20]
    assert rows[-1]["val/loss"] < rows[9]["val/loss"] and 0 <= rows[-1]["val/accuracy"] <= 1
    assert "step 20/20 | sft/loss" in capsys.readouterr().out
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"
    # save_steps 15 then the end, save_total_limit 1: only the last is kept
    assert sorted(p.name for p in run_dir.glob("checkpoint-*")) == ["checkpoint-20"]
    checkpoint = run_dir / "checkpoint-20"
    AutoModelForCausalLM.from_pretrained(checkpoint)
    AutoTokenizer.from_pretrained(checkpoint)
    rl = load_config_dict({"pipeline_type": "rlvr", "pretrain": str(checkpoint)})
    assert resolve_pretrain(rl.pretrain) == str(checkpoint)


def test_chat_messages_train_on_the_reply(tmp_path):
    model = tmp_path / "chat-model"
    shutil.copytree(resolve_pretrain("builtin://tiny-qwen2"), model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.chat_template = ("{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n"
                               "{% endfor %}{% if add_generation_prompt %}a:{% endif %}")
    tokenizer.save_pretrained(model)
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": f"{a}+{a}="},
        {"role": "assistant", "content": str(2 * a)}]}) + "\n" for a in range(10)))
    cfg = load_config_dict({
        "pipeline_type": "sft", "pretrain": str(model), "output_dir": str(tmp_path / "run"),
        "max_steps": 6, "prompt_length": 16, "response_length": 4, "eval_steps": 6,
        "tracking": {"backends": ["jsonl"]},
        "actor_train": {"training_args": {"learning_rate": 5e-3,
                                          "per_device_train_batch_size": 10},
                        "data_args": {"file_name": str(data), "messages": "messages",
                                      "template": "chat"}},
        "validation": {"data_args": {"file_name": str(data), "messages": "messages"}}})
    rows = metrics_of(run(cfg))
    assert rows[-1]["sft/loss"] < 0.7 * rows[0]["sft/loss"]
    assert rows[-1]["sft/response_tokens"] == 10 + 15  # replies + eos


SFT = {"pipeline_type": "sft", "actor_train": {"data_args": {"file_name": "x.jsonl"}}}


@pytest.mark.parametrize(("extra", "key", "says"), [
    ({"actor_infer": {"generating_args": {"temperature": 0.7}}}, "actor_infer",
     "SFT does not use"),
    ({"rewards": {"math_rule": {"tag_included": ["math"]}}}, "rewards", "SFT does not use"),
    ({"async_generation_ratio": 1}, "async_generation_ratio", "SFT does not use"),
    ({"rollout_batch_size": 64}, "rollout_batch_size", "SFT does not use"),
    ({"actor_train": {"pg_variant": "tis"}}, "actor_train.pg_variant", "SFT does not use"),
    ({"actor_train": {"strategy_args": {"strategy_name": "megatron_train"}}},
     "actor_train.strategy_args.strategy_name", "hf_train (in process, one device) or "
                                                "deepspeed_train"),
    ({"actor_train": {"device_mapping": [0, 1]}}, "actor_train.device_mapping",
     "one device in process"),
    ({"ray": {"num_cpus": 2}}, "ray", "SFT runs in this process, without Ray"),
    ({"actor_train": {"strategy_args": {"strategy_name": "deepspeed_train"},
                      "model_args": {"lora_target": "q_proj"}}},
     "actor_train.model_args.lora_target", "SFT with LoRA trains on hf_train"),
    ({"max_steps": 10, "actor_train": {"training_args": {"num_train_epochs": 1}}},
     "max_steps", "num_train_epochs"),
    ({"eval_steps": 10}, "eval_steps", "no validation"),
    ({"validation": {"data_args": {"file_name": "v.jsonl"}}}, "validation", "eval_steps is 0"),
    ({"eval_steps": 5, "validation": {"data_args": {"file_name": "v.jsonl"},
                                      "generating_args": {"do_sample": True}}},
     "validation.generating_args", "greedily"),
])
def test_config_errors(extra, key, says):
    data = {**SFT, **extra}
    if "actor_train" in extra:
        data["actor_train"] = {**SFT["actor_train"], **extra["actor_train"]}
    with pytest.raises(ConfigError) as error:
        load_config_dict(data)
    assert error.value.key_path == key and says in str(error.value)


def test_batch_size_is_not_checked_against_a_rollout_batch():
    cfg = load_config_dict({**SFT, "actor_train": {
        **SFT["actor_train"], "training_args": {"per_device_train_batch_size": 48}}})
    assert cfg.pipeline_type == "sft"


def test_the_progress_line_counts_the_steps_num_train_epochs_makes(tmp_path, capsys):
    from flywheel.config.schema import PipelineConfig

    default_steps = PipelineConfig().max_steps
    cfg = load_config(EXAMPLE, [f"output_dir={tmp_path}", f"max_steps={default_steps}",
                                "eval_steps=0", "validation=null",
                                "actor_train.training_args.num_train_epochs=0.04"])
    rows = metrics_of(run(cfg, str(EXAMPLE)))
    steps = rows[-1]["step"]
    assert steps == len(rows) and 1 < steps < default_steps
    out = capsys.readouterr().out
    assert f"step {steps}/{steps} |" in out and f"/{default_steps} |" not in out
