"""Rules of an env tag's `tool_use` block (custom_envs.<tag>.tool_use), run with the other
agentic checks. Pure: each raises ConfigError with the key path and the fix.

Tool names are checked against the tools catalog (flywheel/tools/registry.py, handed in as
`Catalogs.tools`); a built-in tool's `tool_args` against its settings dataclass, so a
misspelt limit fails at load. A user tool (tool_import_path) is checked for shape and
against the import_allowlist only: importing it and building the tools (the sandbox probe,
the search index) is the run's job, in the driver before any env worker starts
(pipelines/agentic/env_jobs.py check_envs). The tool wall clock must fit inside the env
step's (the pool's step_timeout_s bounds a whole step, a tool call included), and the
python tool's own sandbox clock inside the tool wall clock, so each limit is reached by the
layer that reports it best.
"""

from __future__ import annotations

from flywheel.config.catalogs import ToolEntry
from flywheel.config.checks.import_allowlist import check_allowed_import
from flywheel.config.schema import PipelineConfig, ToolUseConfig
from flywheel.platform.config.catalogs import Catalog, entry_settings
from flywheel.platform.config.errors import ConfigError, did_you_mean


def check_tool_use(key: str, tool_use: ToolUseConfig, cfg: PipelineConfig,
                   catalog: Catalog[ToolEntry]) -> None:
    key = f"{key}.tool_use"
    if not tool_use.tools:
        raise ConfigError("", f"{key}.tools", "lists no tool; name at least one (calculator, "
                                              "python, search) or remove tool_use")
    seen: set[str] = set()
    for i, tool in enumerate(tool_use.tools):
        at = f"{key}.tools[{i}]"
        if not tool.tool_id:
            raise ConfigError("", f"{at}.tool_id", "is required: the name the model calls")
        if tool.tool_id in seen:
            raise ConfigError("", f"{at}.tool_id", f"'{tool.tool_id}' is listed twice")
        seen.add(tool.tool_id)
        if tool.tool_import_path is not None:
            if tool.tool_id in catalog:
                raise ConfigError("", f"{at}.tool_id", f"'{tool.tool_id}' is a built-in tool; "
                                                      f"give the imported tool a name of its own")
            check_allowed_import(f"{at}.tool_import_path", tool.tool_import_path, cfg)
            continue
        if tool.tool_id not in catalog:
            raise ConfigError("", f"{at}.tool_id",
                              f"unknown tool '{tool.tool_id}'"
                              f"{did_you_mean(tool.tool_id, catalog.names())}; known: "
                              f"{', '.join(catalog.names())} (or give tool_import_path)")
        settings = entry_settings(catalog.get(tool.tool_id, f"{at}.tool_id").settings,
                                  tool.tool_args, f"{at}.tool_args", f"tool {tool.tool_id}")
        if tool.tool_id == "python" and settings.timeout_s >= tool_use.tool_timeout_s:
            raise ConfigError("", f"{at}.tool_args.timeout_s",
                              f"{settings.timeout_s}s must be below tool_use.tool_timeout_s="
                              f"{tool_use.tool_timeout_s} (the sandbox kills the program "
                              f"first, and the call is reported as its timeout)")
    if tool_use.max_tool_uses < 1:
        raise ConfigError("", f"{key}.max_tool_uses",
                          f"must be at least 1, got {tool_use.max_tool_uses} (remove "
                          f"tool_use for episodes without tools)")
    if tool_use.max_tool_output_tokens < 0:
        raise ConfigError("", f"{key}.max_tool_output_tokens",
                          f"must be >= 0 (0: no limit), got {tool_use.max_tool_output_tokens}")
    if tool_use.max_tool_output_chars < 1:
        raise ConfigError("", f"{key}.max_tool_output_chars",
                          f"must be >= 1, got {tool_use.max_tool_output_chars}")
    if not tool_use.call_start or not tool_use.call_end or \
            tool_use.call_start == tool_use.call_end:
        raise ConfigError("", f"{key}.call_start",
                          "call_start and call_end must be two different non-empty tags")
    _check_call_format(key, tool_use)
    for pool in ("train_env_manager", "val_env_manager"):
        step_s = getattr(cfg, pool).step_timeout_s
        if not 0 < tool_use.tool_timeout_s < step_s:
            raise ConfigError("", f"{key}.tool_timeout_s",
                              f"{tool_use.tool_timeout_s}s must be > 0 and below "
                              f"{pool}.step_timeout_s={step_s} (a step includes its call)")


def _check_call_format(key: str, tool_use: ToolUseConfig) -> None:
    """call_start/call_end act with json calls only, call_tags with tags only."""
    defaults = ToolUseConfig()
    if tool_use.call_format == "tags":
        for name in ("call_start", "call_end"):
            if getattr(tool_use, name) != getattr(defaults, name):
                raise ConfigError("", f"{key}.{name}", "acts only with call_format: json; "
                                  "with tags each tool's call_tags say how it is called")
    for i, tool in enumerate(tool_use.tools):
        at = f"{key}.tools[{i}].call_tags"
        if tool.call_tags and tool_use.call_format != "tags":
            raise ConfigError("", at, "acts only with tool_use.call_format: tags; remove it "
                                      "or set call_format: tags")
        for pair in tool.call_tags:
            if not (isinstance(pair, list) and len(pair) == 2 and all(
                    isinstance(t, str) and t for t in pair) and pair[0] != pair[1]):
                raise ConfigError("", at, f"each entry is [start, end], two different "
                                          f"non-empty tags; got {pair!r}")
