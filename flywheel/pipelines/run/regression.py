"""`platform ci`: regression configs run as a set, checked against their expectations.

A regression config (configs/ci/*.yaml) is a normal flywheel config plus one top-level
`expectations:` block, which the strict loader never sees (`load_config_with_section`):

    expectations:
      checks:                      # the full run (`platform ci configs/ci`)
        - {metric: val/accuracy, at: last, min: 0.45}
        - {metric: staleness/max, at: max, max: 1}
        - {metric: throughput/samples_per_s, at: median, ratio_to: rlvr_sync, min: 1.05}
      fast:                        # optional: a short form for `--fast` (run by make test)
        overrides: [max_steps=4]
        checks: [...]
      sweep:                       # optional: one run per value, named NAME[key=value]
        actor_train.pg_variant: [ppo, tis, cispo]

A check reduces one metric of the run's metrics.jsonl over the steps that logged it:
first, last, min, max, mean, median, or gain (last - first: with validation logged at
step 0, what training added). `ratio_to: OTHER` divides that by the same figure of config
OTHER (a file stem, run in the same set, so both see the same machine and the same load):
speed is only ever judged as such a ratio, never as an absolute time. `min` / `max` bound
the value (inclusive). A run that fails, or a metric that was never logged, fails its
checks with the reason in the table.

The set runs on one Ray started here (each run joins it), one run at a time; every run
writes its usual directory under `runs_dir/<timestamp>/<name>`, and the table plus the
measured values go to `ci.json` beside them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.config import load_config_with_section
from flywheel.platform.config.errors import ConfigError

SECTION = "expectations"
REDUCTIONS = ("first", "last", "min", "max", "mean", "median", "gain")
CHECK_KEYS = ("metric", "at", "min", "max", "ratio_to")
PASS, FAIL = "pass", "FAIL"


@dataclasses.dataclass(frozen=True)
class Check:
    metric: str
    at: str = "last"
    min: float | None = None
    max: float | None = None
    ratio_to: str | None = None

    def label(self) -> str:
        text = f"{self.metric} ({self.at})"
        return f"{text} / {self.ratio_to}" if self.ratio_to else text

    def bounds(self) -> str:
        parts = ([f">= {_number(self.min)}"] if self.min is not None else []) + \
                ([f"<= {_number(self.max)}"] if self.max is not None else [])
        return ", ".join(parts)


@dataclasses.dataclass
class Case:
    """One run of the set: a config file, the overrides that make it this run, its checks."""
    name: str
    stem: str
    path: Path
    overrides: list[str]
    checks: list[Check]
    config: PipelineConfig | None = None


@dataclasses.dataclass
class Row:
    case: str
    check: str
    measured: str
    expected: str
    result: str
    value: float | None = None


@dataclasses.dataclass
class Outcome:
    """What one run left: its metrics by step, or the error that ended it."""
    run_dir: Path | None
    records: list[dict[str, Any]]
    seconds: float
    error: str | None = None


# -- reading the configs ------------------------------------------------------------------

def find_configs(folder: Path) -> list[Path]:
    paths = sorted(folder.glob("*.yaml")) if folder.is_dir() else [folder]
    if not paths:
        raise FileNotFoundError(f"no regression configs (*.yaml) in {folder}")
    return paths


def read_cases(paths: Sequence[Path], fast: bool, overrides: Sequence[str] = ()) -> list[Case]:
    """Every run the files declare (one per sweep value), in the fast or the full form;
    each config is loaded and checked here, so a broken file fails before anything runs."""
    cases = []
    for path in paths:
        _, raw = load_config_with_section(path, SECTION)
        expect = parse_expectations(raw, str(path), fast)
        if expect is None:
            continue
        base, checks, sweep = expect
        for suffix, sweep_overrides in _sweep_points(sweep, str(path)):
            case = Case(path.stem + suffix, path.stem, path,
                        base + sweep_overrides + list(overrides), checks)
            case.config, _ = load_config_with_section(path, SECTION, case.overrides)
            cases.append(case)
    return cases


def parse_expectations(raw: Any, source: str, fast: bool
                       ) -> tuple[list[str], list[Check], dict[str, list]] | None:
    """(overrides, checks, sweep) of an expectations block, for the chosen form; None when
    the file has no fast form and `fast` is asked for."""
    where = SECTION
    if not isinstance(raw, dict):
        raise ConfigError(source, where, "a regression config needs an expectations: block "
                                         "(a mapping with checks:)")
    _only_keys(raw, ("checks", "fast", "sweep"), source, where)
    sweep = raw.get("sweep") or {}
    if not isinstance(sweep, dict) or not all(isinstance(v, list) and v
                                              for v in sweep.values()):
        raise ConfigError(source, f"{where}.sweep", "expected a mapping of key path to a "
                                                    "non-empty list of values")
    if not fast:
        return [], _parse_checks(raw.get("checks"), source, f"{where}.checks"), sweep
    form = raw.get("fast")
    if form is None:
        return None
    if not isinstance(form, dict):
        raise ConfigError(source, f"{where}.fast", "expected a mapping with overrides: and "
                                                   "checks:")
    _only_keys(form, ("overrides", "checks"), source, f"{where}.fast")
    overrides = form.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError(source, f"{where}.fast.overrides", "expected a list of "
                                                             "key.path=value strings")
    return overrides, _parse_checks(form.get("checks"), source, f"{where}.fast.checks"), sweep


def _parse_checks(raw: Any, source: str, where: str) -> list[Check]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(source, where, "expected a non-empty list of checks "
                                         "({metric: ..., at: ..., min: ... / max: ...})")
    checks = []
    for i, item in enumerate(raw):
        here = f"{where}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("metric"), str):
            raise ConfigError(source, here, "expected a mapping with metric: NAME")
        _only_keys(item, CHECK_KEYS, source, here)
        at = item.get("at", "last")
        if at not in REDUCTIONS:
            raise ConfigError(source, f"{here}.at", f"expected one of {', '.join(REDUCTIONS)}, "
                                                    f"got {at!r}")
        for bound in ("min", "max"):
            value = item.get(bound)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, int | float)):
                raise ConfigError(source, f"{here}.{bound}", f"expected a number, got {value!r}")
        if item.get("min") is None and item.get("max") is None:
            raise ConfigError(source, here, "a check needs min:, max: or both")
        checks.append(Check(**{k: item[k] for k in CHECK_KEYS if k in item}))
    return checks


def _only_keys(raw: dict, allowed: Sequence[str], source: str, where: str) -> None:
    for key in raw:
        if key not in allowed:
            raise ConfigError(source, f"{where}.{key}", f"unknown key '{key}'; valid keys: "
                                                        f"{', '.join(allowed)}")


def _sweep_points(sweep: dict[str, list], source: str) -> list[tuple[str, list[str]]]:
    """[("", [])] without a sweep; else ("[pg_variant=tis]", ["actor_train.pg_variant=tis"])
    for each value."""
    if not sweep:
        return [("", [])]
    if len(sweep) > 1:
        raise ConfigError(source, SECTION + ".sweep", "one key path per sweep (a sweep over "
                                                      "several keys is several files)")
    ((key, values),) = sweep.items()
    return [(f"[{key.rsplit('.', 1)[-1]}={v}]", [f"{key}={_yaml_scalar(v)}"]) for v in values]


def _yaml_scalar(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def select(cases: list[Case], only: Sequence[str]) -> list[Case]:
    """Cases named by `only` (a file stem or a full sweep name), plus every config a ratio
    check compares against, so that both sides are measured in the same set."""
    chosen = [c for c in cases if not only or c.stem in only or c.name in only]
    unknown = set(only) - {c.stem for c in cases} - {c.name for c in cases}
    if unknown:
        raise ConfigError("--only", "", f"no regression config named {', '.join(sorted(unknown))}"
                                        f" (have: {', '.join(sorted({c.stem for c in cases}))})")
    names = {c.name for c in chosen}
    for case in list(chosen):
        for check in case.checks:
            if check.ratio_to and check.ratio_to not in names:
                extra = [c for c in cases if c.name == check.ratio_to]
                if not extra:
                    raise ConfigError(str(case.path), SECTION, f"ratio_to: no config named "
                                                               f"{check.ratio_to} in this set")
                chosen = [*extra, *chosen]
                names.add(check.ratio_to)
    return chosen


# -- running and judging ------------------------------------------------------------------

def run_cases(cases: list[Case], out_dir: Path) -> dict[str, Outcome]:
    """Run each case in turn on one Ray; a failed run is recorded, the set goes on."""
    from flywheel.pipelines.roles.roles import num_slots
    from flywheel.pipelines.run.launch import run
    from flywheel.platform.ray_runtime import start_ray, stop_ray

    configs = [c.config for c in cases if c.config is not None]
    owns_ray = start_ray(configs[0].ray, max(num_slots(c) for c in configs))
    outcomes = {}
    try:
        for case in cases:
            run_dir = out_dir / case.name.replace("[", "-").replace("]", "").replace("=", "-")
            cfg, _ = load_config_with_section(case.path, SECTION,
                                              [*case.overrides, f"output_dir={run_dir}"])
            print(f"ci: {case.name}: running ({cfg.max_steps} steps) -> {run_dir}", flush=True)
            start = time.monotonic()
            try:
                run(cfg, config_path=str(case.path))
                outcomes[case.name] = Outcome(run_dir, read_metrics(run_dir),
                                              time.monotonic() - start)
            except Exception as error:  # noqa: BLE001 (recorded in the table; the set goes on)
                outcomes[case.name] = Outcome(run_dir, [], time.monotonic() - start,
                                              error=_one_line(error))
            print(f"ci: {case.name}: {outcomes[case.name].error or 'done'} in "
                  f"{outcomes[case.name].seconds:.0f} s", flush=True)
    finally:
        if owns_ray:
            stop_ray()
    return outcomes


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def reduce(records: Iterable[dict[str, Any]], metric: str, at: str) -> float | None:
    """One figure of `metric` over the steps that logged it (None: never logged)."""
    values = [float(r[metric]) for r in records if metric in r]
    if not values:
        return None
    if at == "first":
        return values[0]
    if at == "last":
        return values[-1]
    if at == "gain":
        return values[-1] - values[0]
    return {"min": min, "max": max, "mean": statistics.fmean,
            "median": statistics.median}[at](values)


def judge(cases: list[Case], outcomes: dict[str, Outcome]) -> list[Row]:
    rows = []
    for case in cases:
        outcome = outcomes[case.name]
        for check in case.checks:
            rows.append(_judge_one(case, check, outcome, outcomes))
    return rows


def _judge_one(case: Case, check: Check, outcome: Outcome,
               outcomes: dict[str, Outcome]) -> Row:
    def failed(reason: str) -> Row:
        return Row(case.name, check.label(), reason, check.bounds(), FAIL)

    if outcome.error:
        return failed(f"run failed: {outcome.error}")
    value = reduce(outcome.records, check.metric, check.at)
    if value is None:
        return failed(f"{check.metric} never logged")
    measured = _number(value)
    if check.ratio_to:
        other = outcomes[check.ratio_to]
        if other.error:
            return failed(f"{check.ratio_to} failed: {other.error}")
        base = reduce(other.records, check.metric, check.at)
        if not base:
            return failed(f"{check.ratio_to}: {check.metric} never logged or 0")
        measured = f"{_number(value / base)} ({_number(value)} / {_number(base)})"
        value = value / base
    ok = math.isfinite(value) and (check.min is None or value >= check.min) and \
        (check.max is None or value <= check.max)
    return Row(case.name, check.label(), measured, check.bounds(), PASS if ok else FAIL, value)


# -- reporting ----------------------------------------------------------------------------

def format_table(rows: list[Row]) -> str:
    header = Row("CONFIG", "CHECK", "MEASURED", "EXPECTED", "RESULT")
    widths = [max(len(getattr(r, f)) for r in [header, *rows])
              for f in ("case", "check", "measured", "expected")]
    lines = []
    for r in [header, *rows]:
        cells = (r.case, r.check, r.measured, r.expected)
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  " + r.result)
    failed = [r for r in rows if r.result != PASS]
    summary = f"{len(rows)} checks: {len(rows) - len(failed)} passed, {len(failed)} failed"
    if failed:
        summary += " (" + "; ".join(f"{r.case}: {r.check}" for r in failed) + ")"
    return "\n".join(lines + [summary])


def run_suite(folder: Path, only: Sequence[str] = (), fast: bool = False,
              overrides: Sequence[str] = (), runs_dir: Path = Path("runs/ci")) -> int:
    """Run the set, print the table, write ci.json; 0 when every check passed, else 1."""
    cases = select(read_cases(find_configs(folder), fast, overrides), only)
    if not cases:
        raise ConfigError(str(folder), SECTION, "no config in this set has a fast: form"
                          if fast else "no regression configs selected")
    out_dir = runs_dir / time.strftime("%Y%m%d-%H%M%S")
    start = time.monotonic()
    outcomes = run_cases(cases, out_dir)
    rows = judge(cases, outcomes)
    table = format_table(rows)
    runs = f"{len(cases)} run{'s' if len(cases) != 1 else ''}"
    print(f"\nplatform ci {'--fast ' if fast else ''}{folder} "
          f"({runs}, {time.monotonic() - start:.0f} s; runs in {out_dir})")
    print(table, flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ci.json").write_text(json.dumps({
        "fast": fast, "overrides": list(overrides),
        "runs": {n: {"run_dir": str(o.run_dir), "seconds": round(o.seconds, 1),
                     "error": o.error} for n, o in outcomes.items()},
        "checks": [dataclasses.asdict(r) for r in rows]}, indent=2))
    return 0 if all(r.result == PASS for r in rows) else 1


def _number(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 200 else text[:197] + "..."
