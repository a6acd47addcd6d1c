"""tensorboard: event files in <output_dir>/tensorboard (or tracker_kwargs.log_dir).

`tensorboard --logdir runs/` shows every run. Metrics are scalars under their flywheel
names; sample texts are a markdown table per logging step under the tag `sample_texts`
(TEXT tab). Written with torch's SummaryWriter, which needs the tensorboard package.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.utils.tensorboard import SummaryWriter

from flywheel.platform.trackers.base import SampleText, TrackerRun


@dataclass
class TensorboardTracker:
    writer: SummaryWriter

    @classmethod
    def open(cls, run: TrackerRun) -> TensorboardTracker:
        # a resumed run: events of steps after its checkpoint are hidden (lost with a kill)
        purge = None if run.resumed_at is None else run.resumed_at + 1
        return cls(SummaryWriter(log_dir=str(run.log_dir("tensorboard")), flush_secs=10,
                                 purge_step=purge))

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, global_step=step)

    def log_texts(self, step: int, samples: list[SampleText]) -> None:
        rows = ["| prompt | response | reward |", "|---|---|---|"]
        rows += [f"| {_cell(s.prompt)} | {_cell(s.response)} | {s.reward:g} |" for s in samples]
        self.writer.add_text("sample_texts", "\n".join(rows), global_step=step)

    def close(self, status: str) -> None:
        self.writer.close()


def _cell(text: str) -> str:
    """Text inside one markdown table cell: pipes escaped, lines joined."""
    return text.replace("|", "\\|").replace("\n", "<br>")
