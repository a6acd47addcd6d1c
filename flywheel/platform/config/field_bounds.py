"""Numeric bounds declared beside a schema field, checked when the config is converted.

A value outside what its consumer accepts used to validate and fail later, far from the
key: `seed=99999999999999999999` at worker start ("Overflow when unpacking long long"),
`temperature=-1` inside transformers at step 1. A field declared with `bounded(default,
...)` carries its range in the dataclass field's metadata; `conversion.normalize` checks
it for every value written (file, `defaults:` or override), so the error names the key
path and the range where the field is read.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from flywheel.platform.config.errors import ConfigError


@dataclass(frozen=True)
class Bounds:
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself is outside the range
    why: str = ""  # what the bound protects, for the message

    def refuses(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return True
        return self.high is not None and value > self.high

    def describe(self) -> str:
        low, high = _number(self.low), _number(self.high)
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {low}"
        if self.low is None:
            return f"<= {high}"
        return f"in {'(' if self.low_open else '['}{low}, {high}]"


def _number(value: float | None) -> str:
    return str(value) if value is None or isinstance(value, int) else f"{value:g}"


def bounded(default: Any, low: float | None = None, high: float | None = None, *,
            low_open: bool = False, why: str = "") -> Any:
    """A dataclass field with `default` whose values must lie in the given range."""
    return dataclasses.field(default=default,
                             metadata={"bounds": Bounds(low, high, low_open, why)})


@functools.cache
def _field_bounds(cls: type) -> dict[str, Bounds]:
    return {f.name: f.metadata["bounds"] for f in dataclasses.fields(cls)
            if "bounds" in f.metadata}


def check_bounds(cls: type, name: str, value: Any, key_path: str) -> None:
    """ConfigError when field `name` of `cls` declares bounds that `value` is outside."""
    bounds = _field_bounds(cls).get(name)
    if bounds is None or not isinstance(value, int | float) or isinstance(value, bool):
        return
    if bounds.refuses(value):
        why = f" ({bounds.why})" if bounds.why else ""
        shown = value if len(str(value)) <= 40 else f"{str(value)[:37]}..."
        raise ConfigError("", key_path, f"must be {bounds.describe()}{why}, got {shown}")
