"""Pictures of a run, drawn from its metrics.jsonl: `plots.png` in the run directory.

One figure of up to six panels, each a few metric names; which ones is the caller's (the
pipelines' are `flywheel/pipelines/run/metric_views.py` PANELS): platform draws what it is
handed and knows no metric name. A run draws it at checkpoints (at most once a minute)
and at its end (`refresh_run_plots`, called by `writing_checkpoint` and `launch.run`);
`platform plot RUN_DIR [RUN_DIR ...]` overlays runs on the same panels (one colour per run, one line
style per metric) to compare, say, a synchronous and an asynchronous run. A panel whose
metrics no run logged says so instead of staying blank.

Long runs are noisy step to step: past 40 points a curve is a centred moving average
over ~1/40 of the run, drawn over the raw values in a lighter shade. Validation is drawn
as points (it is measured every eval_steps). matplotlib's Agg backend through the
object API (no pyplot): no display is needed and nothing global changes, so drawing from
a training process is safe.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PLOT_FILE = "plots.png"
SMOOTH_FROM = 40  # points; shorter curves are drawn as they are


@dataclass(frozen=True)
class Panel:
    title: str
    ylabel: str
    metrics: tuple[str, ...]  # each drawn if the run logged it
    points: bool = False  # measured now and then (validation): markers, no smoothing
    ylim: tuple[float, float] | None = None
    span: tuple[float, float] | None = None  # the y range shown at least (all-zero curves)
    # Drawn as markers on a right-hand axis of their own unit (counts beside step lags,
    # validation seconds beside every step's phases), so they neither flatten nor hide
    # the panel's main curves.
    secondary: tuple[str, ...] = ()
    secondary_label: str = ""
    secondary_counts: bool = False  # whole numbers: integer ticks, at least 0..1


LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 3)))
MARKERS = ("x", "+", "1", "2")


def read_metrics(run_dir: Path) -> list[dict]:
    records = []
    path = Path(run_dir) / "metrics.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill
    return records


def run_label(run_dir: Path) -> str:
    """exp_name/timestamp for the default layout, else the directory name."""
    run_dir = Path(run_dir).resolve()
    return f"{run_dir.parent.name}/{run_dir.name}"


def series(records: list[dict], metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of a metric; the last record of a step wins (a resumed run)."""
    by_step = {}
    for r in records:
        value = r.get(metric)
        if isinstance(value, (int, float)) and value == value:  # not NaN
            by_step[int(r["step"])] = float(value)
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def smooth(values: list[float]) -> list[float]:
    """Centred moving average over ~1/40 of the curve (unchanged below SMOOTH_FROM)."""
    n = len(values)
    if n < SMOOTH_FROM:
        return values
    half = max(1, n // 80)
    out = []
    for i in range(n):
        window = values[max(0, i - half): i + half + 1]
        out.append(sum(window) / len(window))
    return out


def draw(run_dirs: list[Path], out: Path, panels: tuple[Panel, ...],
         title: str | None = None) -> Path:
    """Draw `panels` (at most six) for one run or an overlay of several, and write `out`
    atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    runs = [(run_label(d), read_metrics(d)) for d in run_dirs]
    overlay = len(runs) > 1
    # A run's own figure has fixed margins: constrained layout measures every label at
    # each draw, a third of the time of a figure a run redraws at every checkpoint. An
    # overlay's legend sits outside the panels, which only constrained layout places.
    fig = Figure(figsize=(15, 8.5), dpi=100, layout="constrained" if overlay else None)
    if not overlay:
        fig.subplots_adjust(left=0.05, right=0.95, bottom=0.07, top=0.9, wspace=0.35,
                            hspace=0.3)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3).ravel()
    colors = [f"C{i}" for i in range(10)]
    last_step = max((int(r["step"]) for _, records in runs for r in records), default=0)
    for ax, panel in zip(axes, panels):
        # Legend entries by metric: the curve itself for one run; for an overlay, a grey
        # sample of the metric's line style (the runs' colours are in the figure legend).
        entries: dict[str, object] = {}
        right = ax.twinx() if _logged(runs, panel.secondary) else None
        for r, (_, records) in enumerate(runs):
            for m_i, metric in enumerate(panel.metrics):
                if not series(records, metric)[0]:
                    continue
                color = colors[r % 10] if overlay else colors[m_i % 10]
                style = LINE_STYLES[m_i % len(LINE_STYLES)]  # overlapping curves stay visible
                line = _plot(ax, *series(records, metric), color, style, panel.points)
                entries.setdefault(metric, _grey_like(line) if overlay else line)
            for m_i, metric in enumerate(panel.secondary):
                if not series(records, metric)[0]:
                    continue
                [marks] = right.plot(*series(records, metric), linestyle="none",
                                     color=colors[r % 10] if overlay else "black",
                                     marker=MARKERS[m_i % len(MARKERS)], markersize=6)
                entries.setdefault(metric, _grey_like(marks) if overlay else marks)
        ax.set_title(panel.title, fontsize=11)
        ax.set_xlabel("train step")
        ax.set_ylabel(panel.ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if panel.ylim:
            ax.set_ylim(*panel.ylim)
        if panel.span:
            low, high = ax.get_ylim()
            pad = 0.05 * (panel.span[1] - panel.span[0])
            ax.set_ylim(min(low, panel.span[0] - pad), max(high, panel.span[1] + pad))
        if right is not None:
            right.set_ylabel(panel.secondary_label)
            right.set_ylim(0, max(1.0, right.get_ylim()[1]) if panel.secondary_counts
                           else None)
            if panel.secondary_counts:
                right.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
        if last_step > 0:  # every panel on the same steps, validation's step 0 included
            ax.set_xlim(-0.02 * last_step, last_step * 1.02)
        if entries:
            ax.legend(list(entries.values()), list(entries), fontsize=7, loc="best")
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center",
                    transform=ax.transAxes, color="gray")
    if overlay:  # the runs' colours, above the panels (they are the overlay's title)
        fig.legend([Line2D([], [], color=colors[r % 10], linewidth=3) for r in range(len(runs))],
                   [label for label, _ in runs], loc="outside upper center",
                   ncol=min(len(runs), 4), fontsize=10)
    else:
        fig.suptitle(title or runs[0][0], fontsize=12)
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp)
    os.replace(tmp, out)
    return out


def _logged(runs: list[tuple[str, list[dict]]], metrics: tuple[str, ...]) -> bool:
    return any(series(records, m)[0] for _, records in runs for m in metrics)


def _plot(ax, steps, values, color, style, points: bool):
    """One curve (raw values faint under the smoothed ones); returns the drawn line."""
    if points:
        return ax.plot(steps, values, color=color, linestyle=style, marker="o",
                       markersize=4)[0]
    smoothed = smooth(values)
    if smoothed is not values:
        ax.plot(steps, values, color=color, linestyle=style, alpha=0.2, linewidth=0.8)
    return ax.plot(steps, smoothed, color=color, linestyle=style, linewidth=1.5)[0]


def _grey_like(line):
    """A legend sample of `line`'s style and marker, in grey."""
    from matplotlib.lines import Line2D

    return Line2D([], [], color="dimgray", linestyle=line.get_linestyle(),
                  marker=line.get_marker(), markersize=line.get_markersize())


def refresh_run_plots(run_dir: Path, panels: tuple[Panel, ...],
                      min_age_s: float = 0.0) -> Path | None:
    """Redraw `plots.png` (`panels`) of a run that has metrics, unless it is newer than them
    (the end of a run follows its final checkpoint's drawing) or younger than `min_age_s` (a
    checkpoint every few seconds would spend more time drawing than training: one drawing
    is 1-2 s of CPU); never fails the run (a warning)."""
    run_dir = Path(run_dir)
    metrics, picture = run_dir / "metrics.jsonl", run_dir / PLOT_FILE
    if not metrics.exists():
        return None
    if picture.exists():
        drawn = picture.stat().st_mtime_ns
        if drawn > metrics.stat().st_mtime_ns or time.time_ns() - drawn < min_age_s * 1e9:
            return picture
    try:
        return draw([run_dir], picture, panels)
    except Exception as error:  # noqa: BLE001 (a picture must not stop training)
        log.warning("could not draw %s: %s", run_dir / PLOT_FILE, error)
        return None
