"""User code by import path (rewards, envs, tools) imports from the run's working folder in
every process, and `platform validate` imports an env and checks its env_config (issue 44
item 1); a user tool configured by import path alone is accepted (issue 54 item 7)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from flywheel import cli
from flywheel.envs import registry
from flywheel.pipelines.config import load_config_dict
from flywheel.platform import user_code

REPO = Path(__file__).resolve().parents[2]

COUNT_ENV = textwrap.dedent('''
    from flywheel.envs import TextEnv

    class CountTo(TextEnv):
        def __init__(self, *, target: int = 3) -> None:
            self.target, self.n = target, 0

        def reset(self, seed=None, options=None):
            self.n = 0
            return f"Count to {self.target}.", {}

        def step(self, action_text):
            self.n += 1
            won = self.n == self.target
            return "ok", float(won), won, False, {"action_is_valid": True, "success": won}
''')
REVERSE_TOOL = textwrap.dedent('''
    class Reverse:
        name = "reverse"
        description = "reverses text"
        parameters = {"type": "object", "properties": {"text": {"type": "string"}}}

        def run(self, arguments):
            return str(arguments.get("text", ""))[::-1]
''')
AGENTIC = {
    "pipeline_type": "agentic", "pretrain": "builtin://tiny-qwen2", "rollout_batch_size": 8,
    "import_allowlist": ["my_envs"],
    "train_env_manager": {"num_env_groups": 1, "group_size": 8, "tags": ["Count"]},
    "val_env_manager": {"num_env_groups": 1, "group_size": 1, "tags": ["Count"]},
    "custom_envs": {"Count": {"env_type": "count_to", "env_import_path": "my_envs.count:CountTo",
                              "max_steps": 3, "env_config": {"target": 3}}},
}


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """A working folder holding my_envs/ (an env and a tool), entered the way the
    `platform` console script runs: the folder is not on sys.path."""
    (tmp_path / "my_envs").mkdir()
    (tmp_path / "my_envs" / "__init__.py").write_text("")
    (tmp_path / "my_envs" / "count.py").write_text(COUNT_ENV)
    (tmp_path / "my_envs" / "tools.py").write_text(REVERSE_TOOL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(user_code.USER_CODE_DIR_ENV, raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path
                                      if p and os.path.abspath(p) != str(tmp_path)])
    for name in [m for m in sys.modules if m == "my_envs" or m.startswith("my_envs.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    return tmp_path


def test_an_env_in_the_working_folder_imports_where_the_console_script_runs(user_folder):
    cls = registry.register_from_import_path("count_to", "my_envs.count:CountTo", ["my_envs"])
    assert cls.__name__ == "CountTo" and registry.make("count_to", target=2).target == 2


def test_a_worker_started_elsewhere_imports_from_the_drivers_folder(user_folder, tmp_path):
    """A Ray worker's process does not start in the driver's folder or with it on sys.path:
    the folder the driver recorded (start_ray does) is where user code comes from."""
    assert user_code.record_user_code_dir() == str(user_folder)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("from flywheel.platform.user_code import import_user_object as i; "
            "print(i('my_envs.tools:Reverse')().run({'text': 'abc'}))")
    result = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, capture_output=True,
                            text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "cba"


def test_validate_imports_the_env_and_names_a_misspelt_env_config_key(user_folder, capsys):
    raw = copy.deepcopy(AGENTIC)
    raw["custom_envs"]["Count"]["env_config"] = {"targte": 3}
    (user_folder / "count.yaml").write_text(yaml.safe_dump(raw))
    assert cli.main(["validate", "--config", "count.yaml"]) == 2
    err = capsys.readouterr().err
    assert "count.yaml: custom_envs.Count.env_config: unknown env_config key 'targte'" in err
    assert "Did you mean 'target'?" in err


def test_validate_names_an_env_module_that_does_not_import(user_folder, capsys):
    raw = copy.deepcopy(AGENTIC)
    raw["custom_envs"]["Count"]["env_import_path"] = "my_envs.cuont:CountTo"
    (user_folder / "count.yaml").write_text(yaml.safe_dump(raw))
    assert cli.main(["validate", "--config", "count.yaml"]) == 2
    assert ("custom_envs.Count.env_import_path: cannot be imported" in
            capsys.readouterr().err)


def test_validate_survives_an_env_module_that_exits_on_import(user_folder, capsys):
    """The imports run in a child process: a module that ends its process is one line
    naming the key, and validate itself goes on to report it."""
    (user_folder / "my_envs" / "exits.py").write_text("import os\nos._exit(3)\n")
    raw = copy.deepcopy(AGENTIC)
    raw["custom_envs"]["Count"]["env_import_path"] = "my_envs.exits:CountTo"
    (user_folder / "count.yaml").write_text(yaml.safe_dump(raw))
    assert cli.main(["validate", "--config", "count.yaml"]) == 2
    assert ("count.yaml: custom_envs.Count.env_import_path: importing it ended the process "
            "(exit code 3)" in capsys.readouterr().err)


def test_validate_passes_the_env_of_the_docs(user_folder, capsys):
    (user_folder / "count.yaml").write_text(yaml.safe_dump(AGENTIC))
    assert cli.main(["validate", "--config", "count.yaml"]) == 0, capsys.readouterr().err


def test_a_user_tool_by_import_path_alone_is_configurable(user_folder):
    raw = copy.deepcopy(AGENTIC)
    env = raw["custom_envs"]["Count"]
    env.update(env_type="multiply", env_config={})
    del env["env_import_path"]
    env["tool_use"] = {"tools": [{"tool_id": "reverse",
                                  "tool_import_path": "my_envs.tools:Reverse"}]}
    cfg = load_config_dict(raw)  # import_allowlist acts: the tool is user code
    assert cfg.custom_envs["Count"].tool_use.tools[0].tool_import_path == (
        "my_envs.tools:Reverse")
    from flywheel.tools.registry import build_tool

    tool = build_tool("reverse", {}, "my_envs.tools:Reverse", cfg.import_allowlist, "t")
    assert tool.run({"text": "ab"}) == "ba"


@pytest.mark.long
def test_platform_run_plays_an_env_of_the_working_folder(user_folder):
    """The docs' walk: `platform run` from the folder that holds my_envs/ (it failed ~45 s
    in with "No module named 'my_envs'"); one step on the tiny model, real Ray workers."""
    raw = copy.deepcopy(AGENTIC)
    raw.update(max_steps=1, eval_steps=0, tracking={"mlflow": False},
               output_dir=str(user_folder / "run"))
    raw["actor_train"] = {"training_args": {"per_device_train_batch_size": 8}}
    (user_folder / "count.yaml").write_text(yaml.safe_dump(raw))
    platform = Path(sys.executable).with_name("platform")
    result = subprocess.run([str(platform), "run", "--config", "count.yaml"], cwd=user_folder,
                            capture_output=True, text=True, timeout=900,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    rows = [json.loads(line) for line in (user_folder / "run" / "metrics.jsonl").open()]
    assert rows[-1]["step"] == 1 and "env/success" in rows[-1]
