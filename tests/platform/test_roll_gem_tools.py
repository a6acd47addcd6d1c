"""`platform convert --from roll` on ROLL's GEM math and QA tags with their tool blocks
(interop/roll/fit/envs.py, interop/roll/fit/tools.py): the hub datasets become the shipped local
files, the tools are kept (python_code -> python, search -> local BM25, in GEM's call tags), mcp is
refused, and the converted file builds its envs with their tools (fixture:
tests/data/configs/roll/gem/)."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import yaml

from flywheel.pipelines.config import convert_roll, load_config_dict

ROOT = Path(__file__).parents[2]
FIXTURE = ROOT / "tests" / "data" / "configs" / "roll" / "gem"


@pytest.fixture(scope="module")
def converted():
    return convert_roll(FIXTURE / "gem_tools.yaml")


def test_gem_tags_convert_with_their_tools_and_local_data(converted):
    assert converted.missing == []
    cfg = load_config_dict(converted.data)
    math, qa = cfg.custom_envs["MathPython"], cfg.custom_envs["QaSearch"]
    assert "QaMcp" not in cfg.custom_envs  # declared, not played: dropped, not refused
    assert (math.env_type, math.env_config) == ("roll_math",
                                                {"data_file": "examples/data/gem_math.jsonl"})
    assert qa.env_config == {"data_file": "examples/data/gem_qa.jsonl"}
    python, = math.tool_use.tools
    assert (python.tool_id, python.tool_args) == ("python", {"timeout_s": 5.0})
    assert python.call_tags == [["<code>", "</code>"], ["```python", "```"]]
    assert math.tool_use.call_format == "tags" and math.tool_use.max_tool_uses == 2
    assert (math.tool_use.tool_reward, math.tool_use.tool_success_reward) == (0.05, 0.1)
    search, = qa.tool_use.tools
    assert search.tool_args == {"documents": "examples/data/gem_qa_documents.jsonl",
                                "top_k": 2}
    assert search.call_tags == [["<search>", "</search>"]]
    assert qa.tool_use.tool_success_reward == 0.2 and qa.tool_use.max_tool_uses == 1
    assert (ROOT / search.tool_args["documents"]).is_file()
    report = "\n".join(converted.mapped + converted.dropped)
    assert "'open-r1/DAPO-Math-17k-Processed' -> custom_envs.MathPython.env_config.data_file" \
           in report and "the hub dataset is replaced by local data" in report
    assert "search_url: 'http://localhost:8000/retrieve' addresses ROLL's" in report
    assert "sandbox_type: 'none': flywheel runs every program in its bubblewrap" in report


def test_mcp_tool_and_unknown_wrapper_args_are_refused(tmp_path):
    data = yaml.safe_load((FIXTURE / "gem_tools.yaml").read_text())
    data["defaults"] = [f"{FIXTURE / 'traj_envs_gem_tools'}@_here_"]
    played = copy.deepcopy(data)
    for pool in ("train_env_manager", "val_env_manager"):
        played[pool].update(tags=["QaMcp"], num_groups_partition=[2])
    (tmp_path / "mcp.yaml").write_text(yaml.safe_dump(played))
    missing = convert_roll(tmp_path / "mcp.yaml").missing
    assert any(m.startswith("an MCP tool") and "tool_configs[0].tool_id = mcp" in m
               for m in missing)
    fragment = yaml.safe_load((FIXTURE / "traj_envs_gem_tools.yaml").read_text())
    fragment["gem_envs"]["MathPython"]["tool_wrapper"]["wrapper_args"]["verbose"] = True
    (tmp_path / "frag.yaml").write_text(yaml.safe_dump(fragment))
    data["defaults"] = ["frag@_here_"]
    (tmp_path / "extra.yaml").write_text(yaml.safe_dump(data))
    assert any("wrapper_args.verbose" in m for m in convert_roll(tmp_path / "extra.yaml").missing)


def test_converted_file_builds_its_envs_with_their_tools(converted, monkeypatch):
    """roll_check's env check: every played tag's env and tools build and reset (the
    python tool probes its sandbox, the search tool indexes the shipped documents)."""
    spec = importlib.util.spec_from_file_location("roll_check", ROOT / "bench" / "roll_check.py")
    roll_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roll_check)
    monkeypatch.chdir(ROOT)  # the data paths are relative to the checkout
    assert roll_check.env_errors(converted.data) == []
    broken = copy.deepcopy(converted.data)
    broken["custom_envs"]["QaSearch"]["tool_use"]["tools"][0]["tool_args"]["documents"] = "no.jsonl"
    assert roll_check.env_errors(broken) == [
        "QaSearch: [Errno 2] No such file or directory: 'no.jsonl'"]
