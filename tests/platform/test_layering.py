"""platform/ knows nothing about RL: no module under flywheel/platform imports the run's
config (flywheel.config) or anything above it: envs, algorithms, tools, pipelines, workers,
interop, workshop, the CLI (DESIGN.md: imports flow cli -> pipelines -> workers -> config ->
platform). The ROLL converter (flywheel.interop) is a leaf: only the CLI's path imports it.
Every import statement counts, at module level or inside a function."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PLATFORM = ROOT / "flywheel" / "platform"
FORBIDDEN = ("flywheel.config", "flywheel.envs", "flywheel.algorithms", "flywheel.tools",
             "flywheel.pipelines", "flywheel.workers", "flywheel.interop", "flywheel.workshop",
             "flywheel.sandbox", "flywheel.cli")
# The CLI's path to the ROLL converter: the only modules of flywheel that may import it.
INTEROP_IMPORTERS = frozenset({"flywheel.cli", "flywheel.pipelines.config"})


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in `source`, a module of `package`; relative
    imports resolved, and `from a import b` counted as both `a` and `a.b`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def is_forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_platform_imports_nothing_about_rl():
    modules = sorted(PLATFORM.rglob("*.py"))
    assert len(modules) > 20
    bad = []
    for path in modules:
        relative = path.relative_to(ROOT)
        package = ".".join(relative.with_suffix("").parts[:-1])
        bad += [f"{relative}:{line} imports {name}"
                for line, name in imported_modules(path.read_text(), package)
                if is_forbidden(name)]
    assert not bad, "platform/ must not import the config or anything above it:\n" + \
        "\n".join(bad)


# "package.module:attr" naming a module above platform: what an import by string would load
ABOVE_BY_PATH = re.compile(r"flywheel\.(?:config|envs|algorithms|tools|pipelines|workers|interop"
                           r"|workshop|sandbox|cli)(?:\.\w+)*:\w+")


def test_platform_names_nothing_above_it_by_import_path():
    """An import path in platform's text (a builder named by string) is an import too."""
    bad = [f"{path.relative_to(ROOT)}: {m.group(0)}" for path in sorted(PLATFORM.rglob("*.py"))
           for m in ABOVE_BY_PATH.finditer(path.read_text())]
    assert not bad, "platform/ names modules above it by import path:\n" + "\n".join(bad)
    assert ABOVE_BY_PATH.search('trained=("flywheel.workshop.times_reward_model:recipe_key",')


def test_no_roll_module_under_platform():
    assert not sorted(PLATFORM.rglob("roll_*.py"))


def test_only_the_clis_path_imports_interop():
    graph = import_graph()
    bad = sorted(f"{m} imports {n}" for m, names in graph.items()
                 if not (m == "flywheel.interop" or m.startswith("flywheel.interop."))
                 and m not in INTEROP_IMPORTERS
                 for n in names if n == "flywheel.interop" or n.startswith("flywheel.interop."))
    assert not bad, "only the CLI's path may import flywheel.interop:\n" + "\n".join(bad)
    assert "flywheel.interop.roll.convert" in graph["flywheel.pipelines.config"]  # read as it is


def test_the_check_sees_every_form_of_import():
    package = "flywheel.platform.config"
    for source in ("import flywheel.envs", "from flywheel import pipelines",
                   "from flywheel.config.schema import PipelineConfig",
                   "def f():\n    from ...config import loader", "import flywheel.interop.roll",
                   "from flywheel.workers.batch import TokenBatch",
                   "def f():\n    from ...algorithms import grpo", "from ... import envs"):
        assert any(is_forbidden(n) for _, n in imported_modules(source, package)), source
    assert not any(is_forbidden(n) for _, n in imported_modules(
        "from flywheel.platform.config import errors\nfrom .errors import ConfigError", package))


@functools.cache  # read once for the tests that use it
def import_graph() -> dict[str, set[str]]:
    """flywheel module -> the flywheel modules it imports (any import statement)."""
    modules = {}
    for path in sorted((ROOT / "flywheel").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = name if parts[-1] == "__init__" else name.rpartition(".")[0]
        modules[name] = (path, package)
    return {name: {n for _, n in imported_modules(path.read_text(), package)
                   if n in modules and n != name}
            for name, (path, package) in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = stack[stack.index(node):]
            del stack[stack.index(node):]
            if len(group) > 1:
                found.append(sorted(group))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_circle():
    """A module that needs one that needs it back is one design split in two files."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)
