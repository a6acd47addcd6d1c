"""`device_mapping`: which device indices a role owns, parsed by a grammar, never evaluated.

ROLL writes device maps as Python expressions (`list(range(0,16))`,
`list(range(0,2))+list(range(14,16))`, `"[1]"`) and `eval`s them, so a config can run any
code. We accept exactly those shapes and nothing else, with a tokenizer and a recursive-
descent parser over this grammar:

    mapping := term ("+" term)*
    term    := list
             | "list" "(" (range | list) ")"
             | range
    list    := "[" [INT ("," INT)* [","]] "]"
    range   := "range" "(" INT ["," INT ["," INT]] ")"      # Python's range; step >= 1

INT is a run of decimal digits: no sign, no decimal point, no underscores. `+` concatenates,
so `[1]+[2]` and `[0]+list(range(4,8))` are fine. The only names are `list` and `range`; a
call to anything else, an attribute, a string or an operator other than `+` is rejected at
the character where it starts. A YAML list of ints is the plain form and is checked the same
way. The result must be non-empty, without duplicates, and below `MAX_DEVICES` (checked
before a range is expanded, so `range(0, 10**9)` cannot exhaust memory: it does not even
tokenize, and `range(0, 999999999)` is refused by size).

On a machine without GPUs an index is a logical device slot (see DESIGN.md).
"""

from __future__ import annotations

import re
from typing import Any

from flywheel.platform.config.errors import ConfigError, describe_value

# Upper bound on a device index (and so on a map's length): far beyond any cluster.
MAX_DEVICES = 65536

ACCEPTED = ("expected a list of device indices like [0, 1, 2], or a string of "
            "list(range(a, b[, step])), range(...) and [i, j, ...] terms joined with '+', "
            "e.g. 'list(range(0,2))+list(range(14,16))'")

_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<name>[A-Za-z_]\w*)|(?P<punct>[()\[\],+]))")


def parse_device_mapping(value: Any, key_path: str) -> list[int]:
    """Device indices from a YAML list of ints or a ROLL-style string; ConfigError otherwise."""
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise ConfigError("", f"{key_path}[{index}]",
                                  f"a device index is an int >= 0, got {describe_value(item)}; "
                                  f"{ACCEPTED}")
            _check_index(item, key_path)
        devices = list(value)
    elif isinstance(value, str):
        devices = _Parser(value, key_path).parse()
    elif isinstance(value, int) and not isinstance(value, bool):
        raise ConfigError("", key_path, f"got a single int {value}: write [{value}] for device "
                                        f"{value}, or list(range(0,{value})) for {value} devices")
    else:
        raise ConfigError("", key_path, f"{ACCEPTED}; got {describe_value(value)}")
    if not devices:
        raise ConfigError("", key_path, f"selects no devices; {ACCEPTED}")
    seen: set[int] = set()
    for device in devices:
        if device in seen:
            raise ConfigError("", key_path, f"device {device} appears more than once in {value!r}")
        seen.add(device)
    return devices


def _check_index(index: int, key_path: str) -> None:
    if index >= MAX_DEVICES:
        raise ConfigError("", key_path, f"device index {index} is too large (max "
                                        f"{MAX_DEVICES - 1})")


class _Parser:
    """Recursive descent over the tokens of one device_mapping string."""

    def __init__(self, text: str, key_path: str) -> None:
        self.text = text
        self.key_path = key_path
        self.tokens = self._tokenize()
        self.pos = 0

    def _fail(self, message: str, at: int | None = None) -> ConfigError:
        where = f" at position {at}" if at is not None else ""
        return ConfigError("", self.key_path,
                           f"cannot parse {self.text!r}: {message}{where}; {ACCEPTED}")

    def _tokenize(self) -> list[tuple[str, str, int]]:
        tokens, pos = [], 0
        while pos < len(self.text):
            if not self.text[pos:].strip():
                break
            match = _TOKEN.match(self.text, pos)
            if match is None:  # reported when the parser reaches it, so `map(` says `map`
                at = len(self.text) - len(self.text[pos:].lstrip())
                tokens.append(("bad", self.text[at], at))
                break
            kind = match.lastgroup
            tokens.append((kind, match.group(kind), match.start(kind)))
            pos = match.end()
        return tokens

    def _peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self, text: str) -> None:
        token = self._peek()
        if token is None or token[1] != text:
            raise self._unexpected(f"expected {text!r}")
        self.pos += 1

    def _unexpected(self, expected: str) -> ConfigError:
        token = self._peek()
        if token is None:
            return self._fail(f"{expected}, got end of text")
        if token[0] == "bad":
            return self._fail(f"unexpected character {token[1]!r}", token[2])
        return self._fail(f"{expected}, got {token[1]!r}", token[2])

    def _int(self) -> int:
        token = self._peek()
        if token is None or token[0] != "int":
            raise self._unexpected("expected a non-negative integer")
        if len(token[1]) > len(str(MAX_DEVICES)):
            raise self._fail(f"device index {token[1]} is too large", token[2])
        self.pos += 1
        return int(token[1])

    def parse(self) -> list[int]:
        devices = self._term()
        while self._peek() is not None:
            self._take("+")
            devices += self._term()
        return devices

    def _term(self) -> list[int]:
        token = self._peek()
        if token is not None and token[1] == "[":
            return self._bracket_list()
        if token is not None and token[1] == "list":
            self.pos += 1
            self._take("(")
            inner = self._peek()
            if inner is not None and inner[1] == "[":  # list([0, 1, 8]), as ROLL writes too
                devices = self._bracket_list()
            else:
                self._check_name("range")
                devices = self._range()
            self._take(")")
            return devices
        self._check_name("range")
        if token is not None and token[1] == "range":
            return self._range()
        raise self._unexpected("expected '[', 'list(' or 'range('")

    def _check_name(self, expected: str) -> None:
        """A name other than `expected` is reported as the name it is (`map`, `__import__`)."""
        token = self._peek()
        if token is not None and token[0] == "name" and token[1] != expected:
            raise self._fail(f"unknown name {token[1]!r} (only list and range are allowed)",
                             token[2])

    def _bracket_list(self) -> list[int]:
        self._take("[")
        devices: list[int] = []
        while (token := self._peek()) is None or token[1] != "]":
            devices.append(self._int())
            _check_index(devices[-1], self.key_path)
            if (token := self._peek()) is not None and token[1] == ",":
                self.pos += 1
            elif token is None or token[1] != "]":
                raise self._unexpected("expected ',' or ']'")
        self._take("]")
        return devices

    def _range(self) -> list[int]:
        start_token = self._peek()
        self._take("range")
        self._take("(")
        args = [self._int()]
        while (token := self._peek()) is not None and token[1] == "," and len(args) < 3:
            self.pos += 1
            args.append(self._int())
        self._take(")")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (args + [1])[:3]
        if step == 0:
            raise self._fail("range step must be >= 1", start_token[2])
        if start >= stop:
            raise self._fail(f"range({', '.join(map(str, args))}) is empty", start_token[2])
        _check_index(stop - 1, self.key_path)
        return list(range(start, stop, step))
