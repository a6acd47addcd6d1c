"""An env tag's tools as its config declares them (`custom_envs.<tag>.tool_use`): built in
each env's own process (workers/env_process.py), never in the driver or an env worker;
the run's start-up check builds one set in a child process before any worker starts (so a
missing document file, an unusable sandbox or a tool the call format cannot call fails the
run at once, naming the key)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flywheel.config.schema import ToolUseConfig
from flywheel.envs.base import TextEnv
from flywheel.tools.call_parser import CallFormat
from flywheel.tools.registry import build_tool
from flywheel.tools.tagged_calls import TaggedFormat, instructions, tagged_format
from flywheel.tools.tool_env import ToolEnv
from flywheel.tools.toolbox import ToolBox


def tool_box(tool_use: ToolUseConfig, allowlist: Sequence[str], key: str) -> ToolBox:
    """The tools of `tool_use`; `key` is its config path (custom_envs.<tag>.tool_use)."""
    tools = [build_tool(t.tool_id, t.tool_args, t.tool_import_path, allowlist,
                        f"{key}.tools[{i}]") for i, t in enumerate(tool_use.tools)]
    box = ToolBox(tools, tool_use.tool_timeout_s, tool_use.max_tool_output_chars)
    try:
        call_format(tool_use, box)
    except ValueError as error:
        raise ValueError(f"{key}.call_format: {error}") from None
    return box


def call_format(tool_use: ToolUseConfig, box: ToolBox) -> CallFormat | TaggedFormat:
    if tool_use.call_format == "tags":
        return tagged_format(list(box.tools.values()), [t.call_tags for t in tool_use.tools])
    return CallFormat(tool_use.call_start, tool_use.call_end)


def template_tools(box: ToolBox | None, tool_use: ToolUseConfig | None) -> list[dict[str, Any]]:
    """The tools the chat template (or the system message) describes: none with tags,
    whose instructions follow the first observation instead."""
    if box is None or tool_use is None or tool_use.call_format == "tags":
        return []
    return box.schemas()


def with_tools(env: TextEnv, box: ToolBox, tool_use: ToolUseConfig) -> ToolEnv:
    fmt = call_format(tool_use, box)
    notes = instructions(list(box.tools.values()), fmt) if isinstance(fmt, TaggedFormat) else ""
    return ToolEnv(env, box, tool_use.max_tool_uses, fmt, tool_use.tool_reward,
                   tool_use.tool_success_reward, notes)
