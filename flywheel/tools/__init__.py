"""Tools that an agentic episode's model may call: a Python interpreter in the bubblewrap
sandbox, a calculator, a BM25 search over local documents, or a user's own by import path.

    base.py         the Tool protocol (name, description, JSON-schema parameters, run)
    call_parser.py  <tool_call>{"name": ..., "arguments": {...}}</tool_call> in a reply
    toolbox.py      runs one call under a wall clock; every failure becomes text + a kind
    tool_env.py     ToolEnv: wraps a TextEnv, answers calls, counts them, keeps the budget
    registry.py     the catalog of tool_id names (one line per tool)
    calculator.py, python_tool.py, search.py: the built-in tools

How turns are rendered for the model (chat template, tool descriptions, tool messages)
is the env manager's (flywheel/envs/chat_turns.py); building the tools of an env tag from
its config is the env worker's (flywheel/workers/env_worker.py). Imports: tools -> envs
(the TextEnv it wraps), sandbox, platform; nothing imports tools but workers and pipelines.
"""

from flywheel.tools.base import Tool, ToolError, ToolTimeout, function_schema
from flywheel.tools.call_parser import CallFormat, MalformedCall, ToolCall, parse_tool_call
from flywheel.tools.registry import TOOLS, ToolSpec, build_tool
from flywheel.tools.tool_env import TOOL_COUNT_KEYS, ToolEnv
from flywheel.tools.toolbox import ToolBox, ToolOutcome

__all__ = ["TOOLS", "TOOL_COUNT_KEYS", "CallFormat", "MalformedCall", "Tool", "ToolBox",
           "ToolCall", "ToolEnv", "ToolError", "ToolOutcome", "ToolSpec", "ToolTimeout",
           "build_tool", "function_schema", "parse_tool_call"]
