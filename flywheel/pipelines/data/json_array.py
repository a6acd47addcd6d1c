"""Rows of a file holding one JSON array of objects, one element in memory at a time.

Why: ROLL's, TRL's and OpenRLHF's example data (DPO pairs, SFT records) are often `.json`
files holding one array (`[{...}, {...}]`, what `datasets.load_dataset("json")` reads
besides JSON lines), not one object a line. Reading such a file with `json.load` would hold
all of it, and a single huge element, in memory; this scanner finds each element's end
(strings and nesting respected, regexes doing the byte work) and parses one element at a
time, so memory is bounded by the largest element read, and an element over
`max_record_bytes` is skipped unparsed, as a JSONL line over it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import BinaryIO

CHUNK = 1 << 20
# Outside a string: the bytes that open, close or separate something.
_STRUCTURE = re.compile(rb'["{}\[\],]')
# Inside a string: the bytes that end it or escape the next one.
_IN_STRING = re.compile(rb'["\\]')
_BLANK = b" \t\r\n"


class ArrayFormatError(ValueError):
    """The file is not one JSON array of values; `where` names the place."""


def starts_an_array(f: BinaryIO) -> bool:
    """Whether the file's first non-blank byte opens an array (the file is left at 0)."""
    head = f.read(4096).lstrip(_BLANK + b"\xef\xbb\xbf")  # a UTF-8 BOM too
    f.seek(0)
    return head[:1] == b"["


def array_elements(f: BinaryIO, limit: int | None) -> Iterator[tuple[int, bytes | int]]:
    """(index, the element's bytes) for each element of the array the file holds; an
    element longer than `limit` bytes is (index, its size) instead, never held whole."""
    scan = _Scanner(f)
    scan.skip_blank()
    if scan.take() != b"[":
        raise ArrayFormatError("expected a JSON array")
    index = 0
    scan.skip_blank()
    if scan.peek() == b"]":
        return
    while True:
        size, element = scan.element(limit, index)
        yield index, (element if element is not None else size)
        index += 1
        scan.skip_blank()
        mark = scan.take()
        if mark == b"]":
            break
        if mark != b",":
            raise ArrayFormatError(f"[{index - 1}]: expected ',' or ']' after this element, "
                                   f"got {mark.decode('utf-8', 'replace')!r}")
        scan.skip_blank()
    scan.skip_blank()
    if scan.peek():
        raise ArrayFormatError("text after the array's closing ']'")


class _Scanner:
    """A read position over the file, with the bytes read but not consumed."""

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.buf, self.pos = f, b"", 0

    def _more(self) -> bool:
        chunk = self.f.read(CHUNK)
        self.buf, self.pos = self.buf[self.pos:] + chunk, 0
        return bool(chunk)

    def peek(self) -> bytes:
        if self.pos >= len(self.buf) and not self._more():
            return b""
        return self.buf[self.pos:self.pos + 1]

    def take(self) -> bytes:
        byte = self.peek()
        self.pos += len(byte)
        return byte

    def skip_blank(self) -> None:
        while self.peek() and self.buf[self.pos] in _BLANK:
            self.pos += 1

    def element(self, limit: int | None, index: int) -> tuple[int, bytes | None]:
        """(size, bytes) of the value starting here, up to its end at nesting depth 0 (the
        enclosing array's ',' or ']', not consumed); bytes None when over `limit`."""
        kept: list[bytes] = []
        size, depth, in_string, escaped = 0, 0, False, False

        def consume(upto: int) -> None:
            nonlocal size
            piece = self.buf[self.pos:upto]
            size += len(piece)
            if limit is None or size <= limit:
                kept.append(piece)
            self.pos = upto

        while True:
            if self.pos >= len(self.buf) and not self._more():
                raise ArrayFormatError(f"[{index}]: the file ends inside this element (no "
                                       f"closing ']')")
            if escaped:  # the byte after a backslash, whatever it is
                consume(self.pos + 1)
                escaped = False
                continue
            hit = (_IN_STRING if in_string else _STRUCTURE).search(self.buf, self.pos)
            if hit is None:
                consume(len(self.buf))
                continue
            mark, at = hit.group(), hit.start()
            if in_string:
                escaped, in_string = mark == b"\\", mark == b"\\"
            elif depth == 0 and mark in b",]":
                consume(at)
                return size, (b"".join(kept) if limit is None or size <= limit else None)
            elif mark == b'"':
                in_string = True
            elif mark in b"{[":
                depth += 1
            elif mark in b"}]":
                depth -= 1
            consume(at + 1)
            if depth < 0:  # a stray close: the element as far as here, for the parser to name
                return size, (b"".join(kept) if limit is None or size <= limit else None)


def parse_element(raw: bytes, where: str) -> object:
    """One element's value; ArrayFormatError naming `where` when it is not JSON."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ArrayFormatError(f"{where}: not UTF-8 text ({e.reason})") from None
    except json.JSONDecodeError as e:
        raise ArrayFormatError(f"{where}: not JSON ({e})") from None
