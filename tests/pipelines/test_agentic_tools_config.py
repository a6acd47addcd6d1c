"""`custom_envs.<tag>.tool_use` and `chat_template` in the config: mistakes are config
errors naming the key (at load, without importing a tool), and what only a built tool or
the model's tokenizer can tell is refused before any worker starts (check_envs)."""

from __future__ import annotations

import copy

import pytest

from flywheel.pipelines.agentic.env_jobs import check_envs
from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.errors import ConfigError

BASE = {
    "pipeline_type": "agentic", "pretrain": "builtin://tiny-qwen2", "rollout_batch_size": 8,
    "train_env_manager": {"num_env_groups": 1, "group_size": 4, "tags": ["M"]},
    "val_env_manager": {"num_env_groups": 1, "group_size": 1, "tags": ["M"],
                        "step_timeout_s": 20},
    "custom_envs": {"M": {"env_type": "multiply", "tool_use": {
        "tools": [{"tool_id": "calculator"}, {"tool_id": "python",
                                              "tool_args": {"timeout_s": 3}}],
        "tool_timeout_s": 10}}},
}


def with_tool_use(**changes) -> dict:
    raw = copy.deepcopy(BASE)
    raw["custom_envs"]["M"]["tool_use"].update(changes)
    return raw


def test_a_tool_use_block_loads():
    cfg = load_config_dict(copy.deepcopy(BASE))
    tool_use = cfg.custom_envs["M"].tool_use
    assert [t.tool_id for t in tool_use.tools] == ["calculator", "python"]
    assert tool_use.max_tool_uses == 5 and tool_use.call_start == "<tool_call>"


@pytest.mark.parametrize("changes, key, says", [
    ({"tools": []}, "tool_use.tools", "lists no tool"),
    ({"tools": [{"tool_id": "calculater"}]}, "tools[0].tool_id",
     "unknown tool 'calculater' (did you mean 'calculator'?)"),
    ({"tools": [{"tool_id": "calculator"}, {"tool_id": "calculator"}]}, "tools[1].tool_id",
     "listed twice"),
    ({"tools": [{"tool_id": "calculator", "tool_args": {"digits": 3}}]},
     "tools[0].tool_args", "declares no settings"),
    ({"tools": [{"tool_id": "python", "tool_args": {"timeout": 3}}]},
     "tools[0].tool_args.timeout", "did you mean 'timeout_s'"),
    ({"tools": [{"tool_id": "python", "tool_args": {"timeout_s": 12}}]},
     "tools[0].tool_args.timeout_s", "below tool_use.tool_timeout_s=10"),
    ({"tools": [{"tool_id": "search"}]}, "tools[0].tool_args", "documents"),
    ({"tools": [{"tool_id": "mine", "tool_import_path": "evil.mod:Tool"}]},
     "tools[0].tool_import_path", "not under a prefix of import_allowlist"),
    ({"tools": [{"tool_id": "python", "tool_import_path": "evil.mod:Tool"}]},
     "tools[0].tool_id", "is a built-in tool"),
    ({"max_tool_uses": 0}, "tool_use.max_tool_uses", "at least 1"),
    ({"max_tool_output_tokens": -1}, "tool_use.max_tool_output_tokens", ">= 0"),
    ({"call_end": "<tool_call>"}, "tool_use.call_start", "two different"),
    ({"tool_timeout_s": 30}, "tool_use.tool_timeout_s", "val_env_manager.step_timeout_s=20"),
])
def test_tool_use_mistakes_name_the_key(changes, key, says):
    with pytest.raises(ConfigError) as info:
        load_config_dict(with_tool_use(**changes))
    assert info.value.key_path.startswith("custom_envs.M.") and \
        info.value.key_path.endswith(key), info.value.key_path
    assert says in str(info.value)


def test_tool_use_outside_an_agentic_config_is_refused():
    raw = {"pipeline_type": "rlvr", "custom_envs": copy.deepcopy(BASE["custom_envs"])}
    with pytest.raises(ConfigError, match="custom_envs.*acts only with pipeline_type agentic"):
        load_config_dict(raw)


def test_what_only_the_built_tools_and_tokenizer_tell_is_refused_before_workers_start(
        tmp_path, tiny_model_path):
    raw = with_tool_use(tools=[{"tool_id": "search",
                                "tool_args": {"documents": str(tmp_path / "none.jsonl")}}])
    with pytest.raises(ValueError, match="custom_envs.M: .*none.jsonl"):
        check_envs(load_config_dict(raw), tiny_model_path)
    raw = copy.deepcopy(BASE)
    raw["custom_envs"]["M"]["chat_template"] = True
    with pytest.raises(ValueError, match="custom_envs.M: chat_template: true, but the model's "
                                         "tokenizer has no chat template"):
        check_envs(load_config_dict(raw), tiny_model_path)
    (tmp_path / "docs.txt").write_text("one document\n")
    raw = with_tool_use(tools=[{"tool_id": "search",
                                "tool_args": {"documents": str(tmp_path / "docs.txt")}}])
    check_envs(load_config_dict(raw), tiny_model_path)
