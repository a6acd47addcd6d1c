"""An env tag's tools as its config declares them (`custom_envs.<tag>.tool_use`): built by
the driver once before any env worker starts (so a missing document file or an unusable
sandbox fails the run at once, naming the key) and by each env worker for its envs."""

from __future__ import annotations

from collections.abc import Sequence

from flywheel.envs.base import TextEnv
from flywheel.platform.config.schema import ToolUseConfig
from flywheel.tools.call_parser import CallFormat
from flywheel.tools.registry import build_tool
from flywheel.tools.tool_env import ToolEnv
from flywheel.tools.toolbox import ToolBox


def tool_box(tool_use: ToolUseConfig, allowlist: Sequence[str], key: str) -> ToolBox:
    """The tools of `tool_use`; `key` is its config path (custom_envs.<tag>.tool_use)."""
    tools = [build_tool(t.tool_id, t.tool_args, t.tool_import_path, allowlist,
                        f"{key}.tools[{i}]") for i, t in enumerate(tool_use.tools)]
    return ToolBox(tools, tool_use.tool_timeout_s)


def call_format(tool_use: ToolUseConfig) -> CallFormat:
    return CallFormat(tool_use.call_start, tool_use.call_end)


def with_tools(env: TextEnv, box: ToolBox, tool_use: ToolUseConfig) -> ToolEnv:
    return ToolEnv(env, box, tool_use.max_tool_uses, call_format(tool_use))
