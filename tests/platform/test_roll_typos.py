"""`platform convert --from roll` tells a typo from one of ROLL's dead keys, reports what it
did truly, and `platform validate` checks the data's columns (issue 44 item 4)."""

from __future__ import annotations

import json

from flywheel import cli
from flywheel.pipelines.config import convert_roll

# A hand-written ROLL file, as a newcomer writes one: two typos of keys ROLL reads, a dead
# key (no near key: ROLL ignores it, so does the converter), a near backend name, a list
# file_name, no rewards block.
HAND_WRITTEN = """\
exp_name: mine
track_with: tensorboard
system_envs: {USE_MODELSCOPE: '1'}
pretrain: builtin://tiny-qwen2-arith
rollout_batch_size: 8
num_return_sequences_in_group: 4
prompt_length: 16
response_length: 4
adv_estimator: grpo
my_notes: keep this
actor_train:
  training_args:
    learning_rate: 1.0e-4
    per_device_train_batch_size: 8
    gradient_accumulation_step: 4
  data_args:
    file_name: [DATA]
  strategy_args: {strategy_name: hf_train}
actor_infer:
  generating_args: {temprature: 0.7, max_new_tokens: 4}
  strategy_args: {strategy_name: BACKEND}
"""


def roll_file(tmp_path, backend="hf_infer", typos=True, data="builtin://arithmetic/train"):
    text = HAND_WRITTEN.replace("BACKEND", backend).replace("DATA", data)
    if not typos:
        text = text.replace("gradient_accumulation_step:", "gradient_accumulation_steps:")
        text = text.replace("temprature", "temperature")
    path = tmp_path / "roll.yaml"
    path.write_text(text)
    return path


def test_a_key_unknown_to_roll_too_near_one_it_reads_is_a_typo(tmp_path, capsys):
    path = roll_file(tmp_path)
    conversion = convert_roll(path)
    assert sorted(t.split(":")[0] for t in conversion.typos) == [
        "actor_infer.generating_args.temprature",
        "actor_train.training_args.gradient_accumulation_step"]
    assert "did you mean 'temperature'?" in " ".join(conversion.typos)
    assert "did you mean 'gradient_accumulation_steps'?" in " ".join(conversion.typos)
    assert conversion.ignored == ["my_notes"]  # dead, near nothing ROLL reads
    out = tmp_path / "out.yaml"
    assert cli.main(["convert", "--from", "roll", str(path), "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert "typos: keys ROLL does not read either" in captured.out
    assert "not converted: 2 key(s) ROLL does not read either look like typos" in captured.err
    assert not out.exists()


def test_a_near_backend_name_gets_a_did_you_mean(tmp_path):
    conversion = convert_roll(roll_file(tmp_path, backend="hf_infr", typos=False))
    assert conversion.typos == ["actor_infer.strategy_args.strategy_name: hf_infr is no "
                                "backend of ROLL's or flywheel's; did you mean 'hf_infer'?"]
    assert not any("hf_infr" in m for m in conversion.missing)


def test_the_report_says_what_it_did_to_a_list_and_to_a_missing_rewards_block(tmp_path):
    conversion = convert_roll(roll_file(tmp_path, typos=False))
    assert conversion.typos == [] and conversion.missing == []
    file_name = [m for m in conversion.mapped if m.startswith("actor_train.data_args.file_name")]
    assert file_name == ["actor_train.data_args.file_name -> actor_train.data_args.file_name"]
    assert any(m.startswith("rewards: none in the file") and "math_rule" in m
               for m in conversion.mapped)


def test_validate_refuses_a_column_the_data_does_not_have(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "answer": "2", "tag": "arithmetic"}) + "\n")
    path = roll_file(tmp_path, typos=False, data=str(data))
    path.write_text(path.read_text().replace("    file_name:", "    prompt: prompt\n"
                                                              "    file_name:"))
    out = tmp_path / "out.yaml"
    assert cli.main(["convert", "--from", "roll", str(path), "-o", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["validate", "--config", str(out)]) == 2  # ROLL's default: solution
    err = capsys.readouterr().err
    assert (f"actor_train.data_args.response: the answer column 'solution' is not in {data} "
            f"(its first record has prompt, answer, tag)") in err
    out.write_text(out.read_text().replace("response: solution", "response: answer"))
    assert cli.main(["validate", "--config", str(out)]) == 0, capsys.readouterr().err
