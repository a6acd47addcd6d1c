"""Pictures of a run, drawn from its metrics.jsonl: `plots.png` in the run directory.

One figure of six panels: reward, validation, staleness, throughput, idle fractions and
seconds per phase. A run draws it at every checkpoint and at its end
(`refresh_run_plots`, called by `writing_checkpoint` and `launch.run`); `platform plot
RUN_DIR [RUN_DIR ...]` overlays runs on the same panels (one colour per run, one line
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
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PLOT_FILE = "plots.png"
SMOOTH_FROM = 40  # points; shorter curves are drawn as they are


@dataclass(frozen=True)
class Panel:
    title: str
    ylabel: str
    metrics: tuple[str, ...]  # each drawn if the run logged it (RLVR and agentic names)
    points: bool = False  # measured now and then (validation): markers, no smoothing
    ylim: tuple[float, float] | None = None


PANELS = (
    Panel("reward (train batch)", "mean score", ("reward/mean", "env/success")),
    Panel("validation", "accuracy / success", ("val/accuracy", "val/env/success"),
          points=True),
    Panel("staleness", "steps behind", ("staleness/mean", "staleness/max",
                                        "rollout/dropped_stale")),
    Panel("throughput", "samples / s", ("throughput/samples_per_s",)),
    Panel("idle fraction of the step", "fraction", ("idle/actor_infer", "idle/actor_train"),
          ylim=(-0.02, 1.02)),
    Panel("seconds per phase", "s", ("time/step", "time/generate", "time/train",
                                     "time/wait_for_batch", "time/weight_sync",
                                     "time/logprobs")),
)
LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 3)))


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


def draw(run_dirs: list[Path], out: Path, title: str | None = None) -> Path:
    """Draw the panels for one run or an overlay of several, and write `out` atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    runs = [(run_label(d), read_metrics(d)) for d in run_dirs]
    overlay = len(runs) > 1
    fig = Figure(figsize=(15, 8.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3).ravel()
    colors = [f"C{i}" for i in range(10)]
    for ax, panel in zip(axes, PANELS):
        drawn = False
        for r, (label, records) in enumerate(runs):
            present = [m for m in panel.metrics if series(records, m)[0]]
            for m_i, metric in enumerate(present):
                steps, values = series(records, metric)
                color = colors[r % 10] if overlay else colors[m_i % 10]
                style = LINE_STYLES[m_i % len(LINE_STYLES)] if overlay else "-"
                name = f"{label} {metric}" if overlay else metric
                _plot(ax, steps, values, color, style, name, panel.points)
                drawn = True
        ax.set_title(panel.title, fontsize=11)
        ax.set_xlabel("train step")
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3)
        if panel.ylim:
            ax.set_ylim(*panel.ylim)
        if drawn:
            ax.legend(fontsize=7, loc="best")
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center",
                    transform=ax.transAxes, color="gray")
    fig.suptitle(title or (" vs ".join(label for label, _ in runs)), fontsize=12)
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp)
    os.replace(tmp, out)
    return out


def _plot(ax, steps, values, color, style, label, points: bool) -> None:
    if points:
        ax.plot(steps, values, color=color, linestyle=style, marker="o", markersize=4,
                label=label)
        return
    smoothed = smooth(values)
    if smoothed is not values:
        ax.plot(steps, values, color=color, linestyle=style, alpha=0.2, linewidth=0.8)
    ax.plot(steps, smoothed, color=color, linestyle=style, linewidth=1.5, label=label)


def refresh_run_plots(run_dir: Path) -> Path | None:
    """Redraw `plots.png` of a run that has metrics; never fails the run (a warning)."""
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").exists():
        return None
    try:
        return draw([run_dir], run_dir / PLOT_FILE)
    except Exception as error:  # noqa: BLE001 (a picture must not stop training)
        log.warning("could not draw %s: %s", run_dir / PLOT_FILE, error)
        return None
