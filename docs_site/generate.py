"""The documentation site's generated pages: the configuration reference and the metrics.

Both are built from the source of truth when the site builds (`hooks.py` calls `pages()`),
so they cannot drift from the code: the configuration page from the comments beside each
field in `flywheel/config/schema/` (`flywheel.config.reference`), the
metrics page from `metrics.yaml` beside this file, the registry of every metric name a run
logs. Tests (tests/docs/) hold both: a config field without a comment, or a logged metric
that no registry entry matches, fails them.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from flywheel.config.reference import render_markdown

REGISTRY = Path(__file__).with_name("metrics.yaml")
CONFIG_PAGE = "reference/configuration.md"
METRICS_PAGE = "reference/metrics.md"


def metric_registry() -> list[dict]:
    """The namespaces of metrics.yaml, each with its metrics (name, unit, when, meaning)."""
    return yaml.safe_load(REGISTRY.read_text(encoding="utf-8"))["namespaces"]


def _pattern(name: str) -> re.Pattern:
    # <tag>, <info>: one path segment each
    return re.compile("".join("[^/]+" if part.startswith("<") else re.escape(part)
                              for part in re.split(r"(<[a-z]+>)", name)) + "$")


def explained(metric: str, registry: list[dict] | None = None) -> dict | None:
    """The registry entry that explains a logged metric name, or None. An exact name wins
    over a pattern (`env/success` over `env/<info>`)."""
    entries = [m for ns in (registry or metric_registry()) for m in ns["metrics"]]
    exact = next((m for m in entries if m["name"] == metric), None)
    return exact or next((m for m in entries if _pattern(m["name"]).match(metric)), None)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def metrics_markdown(registry: list[dict] | None = None) -> str:
    registry = registry or metric_registry()
    out = [
        "# Metrics",
        "",
        "Every name a run logs, grouped by namespace. A run writes one JSON object per step "
        "to `metrics.jsonl` in its run directory (step 0 holds the validation before "
        "training) and the same names to mlflow. Train-side numbers (`pg/`, `kl/`, "
        "`entropy/`, `actor/`, `vf/`, `critic/`) are means over the step's micro-batches "
        "and over the role's ranks. **when** says which settings log a metric; a blank "
        "means every step of both pipelines.",
        "",
        "In a name, `<tag>` is an env tag (a `custom_envs` key such as `FrozenLake`) or, in "
        "RLVR, a record's tag (`math`, `code`), and `<info>` an env metric name.",
        "",
        "Generated from `docs_site/metrics.yaml`; a test fails when a run logs a name this "
        "page does not explain.",
        "",
        "| namespace | metrics |",
        "|---|---|",
    ]
    for ns in registry:
        out.append(f"| [`{ns['namespace']}/`](#{ns['namespace']}) | {len(ns['metrics'])} |")
    out.append("")
    for ns in registry:
        out += [f"## `{ns['namespace']}/` {{#{ns['namespace']}}}", ""]
        if ns.get("about"):
            out += [_cell(ns["about"]), ""]
        out += ["| name | unit | when | meaning |", "|---|---|---|---|"]
        for m in ns["metrics"]:
            out.append(f"| `{_cell(m['name'])}` | {_cell(m['unit'])} | "
                       f"{_cell(m.get('when', ''))} | {_cell(m['meaning'])} |")
        out.append("")
    return "\n".join(out)


def pages() -> dict[str, str]:
    """Generated page path (under docs/) -> Markdown."""
    return {CONFIG_PAGE: render_markdown(), METRICS_PAGE: metrics_markdown()}
