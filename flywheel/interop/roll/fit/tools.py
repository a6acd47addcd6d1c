"""ROLL's tool block (`custom_envs.<tag>.tool_wrapper`) as flywheel's `tool_use`.

ROLL wraps a GEM env with `tool_wrapper: {wrapper_args, tool_configs}`
(roll/pipeline/agentic/tools/tool_env_wrapper.py): wrapper_args are GEM's ToolEnvWrapper's
(max_tool_uses, default 10; tool_reward and tool_success_reward, paid per call), and each
tool_configs entry builds a tool of ROLL's registry by tool_id:

- python_code: GEM's Python tool, called as `<code>...</code>` or a ```python block ->
  flywheel's python tool in its bubblewrap sandbox, with those two tag pairs;
- search: GEM's search tool, `<search>query</search>`, which posts the query to a retrieval
  server (ROLL's start_retrieval_server.sh, a Wikipedia index) -> flywheel's BM25 search over
  the local documents of the local QA data (LOCAL_DOCUMENTS), with the same tags;
- mcp: a client of an MCP server -> refused (no MCP client here, no server reachable).

Calls keep GEM's format (`tool_use.call_format: tags`), so ROLL's stop strings
(`</code>`, `</search>`) and agent templates mean what they meant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flywheel.interop.roll.typos import unknown_key

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

GEM_MAX_TOOL_USES = 10  # gem.tools.tool_env_wrapper.ToolEnvWrapper's default
LOCAL_DOCUMENTS = "examples/data/gem_qa_documents.jsonl"  # examples/data/gem_local_data.py
MISSING_TOOLS = {"mcp": "an MCP tool (tool_id mcp calls the tools of an MCP server at "
                        "tool_args.server_url; flywheel has no MCP client and reaches no "
                        "server)"}
PYTHON_TAGS = [["<code>", "</code>"], ["```python", "```"]]  # ROLL's python_code patterns
SEARCH_TAGS = [["<search>", "</search>"]]  # GEM's search tool


def fit_tool_wrapper(value: Any, where: str, max_steps: Any, out: Conversion
                     ) -> dict[str, Any] | None:
    """The tag's tool_use for ROLL's tool_wrapper at `where`, said; None when a tool or a
    key cannot be carried over (then in out.missing)."""
    value = value or {}
    for key in value:
        if key not in ("wrapper_args", "tool_configs"):
            unknown_key(f"{where}.{key}", key, ("wrapper_args", "tool_configs"), out)
    tool_use: dict[str, Any] = {"call_format": "tags"}
    ok = _wrapper_args(value.get("wrapper_args") or {}, f"{where}.wrapper_args", max_steps,
                       tool_use, out)
    tools = []
    for i, config in enumerate(value.get("tool_configs") or []):
        at = f"{where}.tool_configs[{i}]"
        tool_id, args = config.get("tool_id"), dict(config.get("tool_args") or {})
        if tool_id == "python_code":
            tool = _python(args, at, tool_use, out)
        elif tool_id == "search":
            tool = _search(args, at, out)
        else:
            out.missing.append(MISSING_TOOLS.get(tool_id, f"the ROLL tool {tool_id}")
                               + f" ({at}.tool_id = {tool_id})")
            tool = None
        ok = ok and tool is not None
        tools.append(tool)
    if not tools:
        out.missing.append(f"a tool block without tools ({where}.tool_configs)")
        return None
    tool_use["tools"] = tools
    if tool_use.get("tool_success_reward") and any(t["tool_id"] == "python" for t in tools):
        out.mapped.append(f"{where}.wrapper_args.tool_success_reward: GEM pays it for a "
                          f"program that printed something; flywheel's python tool also "
                          f"counts one that printed nothing as a success (it answers "
                          f"'no output: print the result')")
    return tool_use if ok else None


def _wrapper_args(args: dict[str, Any], where: str, max_steps: Any, tool_use: dict[str, Any],
                  out: Conversion) -> bool:
    ok = True
    for key, item in args.items():
        if key in ("tool_reward", "tool_success_reward"):
            tool_use[key] = float(item or 0)
            out.mapped.append(f"{where}.{key} -> tool_use.{key} (paid per call, as GEM's "
                              f"ToolEnvWrapper)")
        elif key != "max_tool_uses":
            out.missing.append(f"a tool wrapper argument GEM's ToolEnvWrapper does not take "
                               f"({where}.{key})")
            ok = False
    uses = args.get("max_tool_uses", GEM_MAX_TOOL_USES)
    if uses is None:  # GEM: no limit; the turn limit bounds the calls
        uses = max_steps if isinstance(max_steps, int) else GEM_MAX_TOOL_USES
        out.mapped.append(f"{where}.max_tool_uses: null (no limit in GEM) -> {uses}, the "
                          f"tag's turn limit, which bounds the calls anyway")
    elif "max_tool_uses" not in args:
        out.mapped.append(f"{where}.max_tool_uses: unset -> {uses} (GEM's default)")
    else:
        out.mapped.append(f"{where}.max_tool_uses -> tool_use.max_tool_uses")
    tool_use["max_tool_uses"] = uses
    return ok


def _python(args: dict[str, Any], at: str, tool_use: dict[str, Any],
            out: Conversion) -> dict[str, Any] | None:
    settings: dict[str, Any] = {}
    ok = True
    for key, item in args.items():
        if key == "timeout":
            settings["timeout_s"] = float(item)
            if float(item) >= 30.0:  # ToolUseConfig.tool_timeout_s's default must exceed it
                tool_use["tool_timeout_s"] = float(item) + 5.0
        elif key == "sandbox_type":
            out.dropped.append(f"{at}.tool_args.sandbox_type: {item!r}: flywheel runs every "
                               f"program in its bubblewrap sandbox (no network, read-only "
                               f"system, CPU/memory limits); ROLL's 'none' runs it bare")
        elif key == "keep_error_last_line":
            out.dropped.append(f"{at}.tool_args.keep_error_last_line: {item!r}: flywheel's "
                               f"python tool answers a failed program with the last lines of "
                               f"its stderr")
        else:  # tool_instruction, patterns: ROLL's own wording and regexes
            out.missing.append(f"python_code's {key} ({at}.tool_args.{key}; flywheel writes "
                               f"its own tool instruction and calls by literal tags)")
            ok = False
    out.mapped.append(f"{at}: python_code -> tool python (the bubblewrap sandbox), called as "
                      f"ROLL's: <code>...</code> or a ```python block (call_format: tags)")
    return {"tool_id": "python", "tool_args": settings, "call_tags": PYTHON_TAGS} if ok else None


def _search(args: dict[str, Any], at: str, out: Conversion) -> dict[str, Any]:
    settings: dict[str, Any] = {"documents": LOCAL_DOCUMENTS}
    for key, item in args.items():
        if key == "topk":
            settings["top_k"] = int(item)
        elif key == "search_url":
            out.dropped.append(f"{at}.tool_args.search_url: {item!r} addresses ROLL's "
                               f"retrieval server; flywheel searches local documents")
        elif key == "timeout":
            out.dropped.append(f"{at}.tool_args.timeout: the retrieval server's HTTP timeout; "
                               f"tool_use.tool_timeout_s bounds the local search")
        else:  # num_workers: GEM's thread pool
            out.dropped.append(f"{at}.tool_args.{key}: {item!r}: the search tool's own "
                               f"plumbing (GEM's threads), nothing the local search needs")
    out.mapped.append(f"{at}: search (ROLL's retrieval server) -> tool search, BM25 over the "
                      f"local documents {LOCAL_DOCUMENTS} (the hub is unreachable; made by "
                      f"examples/data/gem_local_data.py with the local QA data), called as "
                      f"GEM's <search>...</search>")
    return {"tool_id": "search", "tool_args": settings, "call_tags": SEARCH_TAGS}
