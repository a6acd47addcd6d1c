"""The tool catalog: `tool_id` names from YAML map to tools here, and only here.

One entry per built-in tool: a `ToolSpec` naming its builder and its settings dataclass by
import path, so the config checks read the catalog (platform/config/catalogs.py
`Catalogs.tools`) without importing the sandbox or the BM25 library. Adding a tool is one
file with a `build(settings)` function and one line in TOOLS. A user's own tool comes by
`tool_import_path` ("package.module:attr", under the import_allowlist): a class or function
called with the tool's `tool_args` as keywords, returning a `Tool` (base.py) whose name is
the tool_id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flywheel.platform.config.catalogs import entry_settings, import_object
from flywheel.platform.user_code import import_user_object
from flywheel.tools.base import Tool


@dataclass(frozen=True)
class ToolSpec:
    build: str  # "module:function" taking the settings (or nothing) and returning a Tool
    settings: str | None = None  # its tool_args dataclass by import path; None: no args


TOOLS: dict[str, ToolSpec] = {
    "calculator": ToolSpec("flywheel.tools.calculator:build"),
    "python": ToolSpec("flywheel.tools.python_tool:build",
                       "flywheel.tools.python_tool:PythonToolSettings"),
    "search": ToolSpec("flywheel.tools.search:build", "flywheel.tools.search:SearchSettings"),
}


def build_tool(tool_id: str, tool_args: dict[str, Any], import_path: str | None,
               allowlist: Sequence[str], key_path: str) -> Tool:
    """The tool a config entry names; ValueError (or the settings' ConfigError) naming
    `key_path` when it cannot be built."""
    if import_path is None:
        if tool_id not in TOOLS:
            raise ValueError(f"{key_path}: unknown tool_id '{tool_id}'; known: "
                             f"{', '.join(TOOLS)} (or give tool_import_path)")
        spec = TOOLS[tool_id]
        settings = entry_settings(spec.settings, tool_args, f"{key_path}.tool_args",
                                  f"tool {tool_id}")
        builder = import_object(spec.build)
        return builder(settings) if spec.settings else builder()
    module = import_path.split(":")[0]
    if not any(module == p or module.startswith(p + ".") for p in allowlist):
        raise ValueError(f"{key_path}.tool_import_path: {import_path} is not under the "
                         f"import_allowlist {list(allowlist)}")
    tool = import_user_object(import_path)(**tool_args)
    if not isinstance(tool, Tool):
        raise ValueError(f"{key_path}.tool_import_path: {import_path} built a "
                         f"{type(tool).__name__}, which lacks name, description, parameters "
                         f"or run(arguments)")
    if tool.name != tool_id:
        raise ValueError(f"{key_path}: the tool from {import_path} is named '{tool.name}', "
                         f"not tool_id '{tool_id}'")
    return tool
