"""A user's own tools, imported by path in the tool tests (the allowlist names this module)."""

from __future__ import annotations

import time


class Reverse:
    """A well-behaved user tool: the name, description and schema a chat template shows."""

    name = "reverse"
    description = "Reverse a string."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}}

    def __init__(self, suffix: str = "") -> None:
        self.suffix = suffix

    def run(self, arguments):
        return str(arguments.get("text", ""))[::-1] + self.suffix


class Hangs:
    name = "hangs"
    description = "Never answers."
    parameters = {"type": "object", "properties": {}}

    def run(self, arguments):
        time.sleep(30)
        return "too late"


class Raises:
    name = "raises"
    description = "Has a bug."
    parameters = {"type": "object", "properties": {}}

    def run(self, arguments):
        raise KeyError("oops")


class ReturnsNumber:
    name = "number"
    description = "Returns an int instead of text."
    parameters = {"type": "object", "properties": {}}

    def run(self, arguments):
        return 42


class NotATool:
    name = "nope"
