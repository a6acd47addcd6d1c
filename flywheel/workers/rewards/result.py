"""What every reward returns: a score and per-sample metadata.

Metadata keys the pipeline counts (all optional, booleans or counts): `parsed` (an answer
was found: the parse rate), `timed_out` (the hard per-sample limit killed the scoring),
`crashed` (the scoring process died), and per-reward detail such as code_sandbox's
`passed` / `failed` / `timed_out_tests` / `crashed_tests`. Metadata must be JSON: it
crosses a process boundary (time_limit.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RewardResult:
    score: float
    metadata: dict = field(default_factory=dict)
