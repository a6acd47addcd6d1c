"""What `platform convert` makes of one ROLL file: the converted data and the report's
lists (kept apart from convert.py, which builds it, and defaults.py, which adds to
it, so neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flywheel.config.catalogs import Catalogs


@dataclass
class Conversion:
    """The converted data (valid when `missing` and `typos` are empty) and what the report
    says."""

    source: str
    catalogs: Catalogs = field(repr=False, compare=False)  # the names flywheel has
    pipeline_type: str = "rlvr"  # flywheel's; ROLL's pipeline is roll_pipeline
    roll_pipeline: str = "rlvr"  # interop/roll/pipelines: which of ROLL's pipelines reads it
    recognised_by: str = ""  # the rule that chose roll_pipeline, or "--pipeline"
    vl: bool = False  # ROLL runs it with its VL pipeline (roll_vl.is_vl, as first read)
    data: dict[str, Any] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)  # keys ROLL ignores too
    # keys the file's ROLL pipeline reads, of a pipeline flywheel does not run yet
    needs_pipeline: list[str] = field(default_factory=list)
    typos: list[str] = field(default_factory=list)  # unknown to ROLL, near a key it reads
    helpers: list[str] = field(default_factory=list)  # referenced by ${...}, then dropped
    mapped: list[str] = field(default_factory=list)  # "roll.key -> flywheel.key (note)"
    dropped: list[str] = field(default_factory=list)  # "key: why it makes no difference"
    missing: list[str] = field(default_factory=list)  # "feature (key = value)"
