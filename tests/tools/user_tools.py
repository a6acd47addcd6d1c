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


class Exits:
    """Ends its process in run() (a user tool with a bug of the worst kind)."""

    name = "exits"
    description = "Calls os._exit."
    parameters = {"type": "object", "properties": {}}

    def run(self, arguments):
        import os
        os._exit(7)


class ExitsWhenBuilt:
    """Ends its process in its constructor."""

    name = "exits_when_built"
    description = "Never gets built."
    parameters = {"type": "object", "properties": {}}

    def __init__(self) -> None:
        import os
        os._exit(5)


class Floods:
    """Returns 10 MB of text."""

    name = "floods"
    description = "Prints a lot."
    parameters = {"type": "object", "properties": {}}

    def run(self, arguments):
        return "y" * 10_000_000
