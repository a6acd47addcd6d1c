"""One of ROLL's pipelines as `platform convert` knows it (interop/roll/pipelines/__init__.py
says how a file is matched to one, and each module there holds one)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion


@dataclass(frozen=True)
class RollPipeline:
    name: str  # as `--pipeline` takes it
    title: str  # what the report calls it
    launcher: str  # ROLL's entry script
    roles: tuple[str, ...]  # the role blocks only this pipeline reads
    keys: dict[str, Any] = field(default_factory=dict)  # its own top-level keys: defaults
    runs_as: str | None = None  # flywheel's pipeline_type for it; None: not built yet
    # the file's resolved data -> the data the shared walk converts (roles renamed, its own
    # keys consumed into flywheel's), reporting into the Conversion
    fit: Callable[[dict[str, Any], Conversion], dict[str, Any]] | None = None
    # once the shared walk is done, before packing and defaults (defaults.finish): the
    # roles' backends onto ones that run this pipeline
    fit_backends: Callable[[Conversion], None] | None = None
    # ROLL's shared top-level keys this pipeline never reads, and its data_args keys as
    # "data_args.<key>": their defaults are not written
    unread: frozenset[str] = frozenset()
    generates: bool = True  # it samples (actor_infer's generating_args defaults apply)

    def reads(self, key: str) -> bool:
        return key in self.keys or key in self.roles
