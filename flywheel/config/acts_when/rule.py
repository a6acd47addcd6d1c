"""One row of the "acts when" table (acts_when/table.py), as acts_when/check.py applies it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass

from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.errors import KeyPath


@dataclass(frozen=True)
class Condition:
    """What a key needs to act, as the error says it ("with pg_variant ppo") and as a test
    on the loaded config; `path` is the written key path (for per-role conditions)."""

    says: str
    holds: Callable[[PipelineConfig, KeyPath], bool]


@dataclass(frozen=True)
class ActsWhen:
    """One row: `key` acts only when `needs` holds, and there it does `does`."""

    key: str  # dotted key path; "*" stands for any one key
    needs: Condition
    does: str  # what the key does where it acts
    # what to write instead: text, or text built from the config (e.g. the variant in use)
    instead: str | Callable[[PipelineConfig], str] = "remove it"
    # a whole block (reference:, critic:, validation:): written as null it declares nothing
    block: bool = False

    @property
    def pattern(self) -> tuple[str, ...]:
        return tuple(self.key.split("."))

    def message(self, cfg: PipelineConfig) -> str:
        instead = self.instead(cfg) if callable(self.instead) else self.instead
        return f"acts only {self.needs.says} ({self.does}); {instead}"


def field_names(cls: type) -> list[str]:
    """A dataclass's field names (for rows derived from a schema block)."""
    assert is_dataclass(cls)
    return [f.name for f in fields(cls)]
