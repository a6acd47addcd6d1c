"""wandb, offline: run files in <output_dir>/wandb/offline-run-*/ (or tracker_kwargs.log_dir).

Nothing is sent anywhere while training; `wandb sync <that folder>` uploads a run later.
The project is tracker_kwargs.project, else tracking.experiment_name, else exp_name; the
run's name, notes and tags come from tracker_kwargs as in ROLL. Sample texts are a
`wandb.Table` logged under `sample_texts`. System-metric sampling and console capture
are off: flywheel logs its own timings, and wrapping stdout would duplicate every line.
"""

from __future__ import annotations

from dataclasses import dataclass

import wandb

from flywheel.platform.trackers.base import SampleText, TrackerRun


@dataclass
class WandbTracker:
    run: object  # wandb.Run

    @classmethod
    def open(cls, run: TrackerRun) -> WandbTracker:
        log_dir = run.log_dir("")  # wandb adds its own wandb/ folder
        log_dir.mkdir(parents=True, exist_ok=True)
        tags = run.options.get("tags")
        active = wandb.init(
            mode="offline", dir=str(log_dir),
            project=run.options.get("project") or run.experiment,
            name=run.options.get("name") or run.run_name,
            notes=run.options.get("notes"),
            tags=[tags] if isinstance(tags, str) else tags,
            config=run.params, reinit="create_new",
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
        )
        return cls(run=active)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_texts(self, step: int, samples: list[SampleText]) -> None:
        table = wandb.Table(columns=["step", "prompt", "response", "reward"],
                            data=[[step, s.prompt, s.response, s.reward] for s in samples])
        self.run.log({"sample_texts": table}, step=step)

    def close(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "FINISHED" else 1)
