"""A key ROLL does not read: one of ROLL's dead keys, or a typo of one it reads.

ROLL's dacite drops a key its dataclass lacks without a word, so a ROLL file may carry keys
that never did anything (reported as "ROLL ignores these keys too", and left out). But a
key close to one ROLL reads (`temprature`, `gradient_accumulation_step`) is a typo: ROLL
ran that file on the default of the key the author meant, and so would the converted one.
Such a key is a typo here: the conversion is refused, naming the near key, so the author
fixes the file rather than trains on a silent default. The same for a backend name close
to one ROLL or flywheel has (`hf_infr`). "Close" is difflib's ratio of at least CUTOFF.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

# difflib ratio a typo reaches: one letter dropped, doubled or swapped in a key of 8+
# letters is >= 0.9; ROLL's dead keys in its own examples are further from any live key.
CUTOFF = 0.85


def near(name: Any, known: Iterable[Any]) -> str | None:
    """The known name `name` is most likely a typo of, or None."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=CUTOFF)
    return close[0] if close else None


def unknown_key(where: str, key: Any, known: Iterable[Any], out: Conversion) -> None:
    """`key` (at `where`) is not one of `known`, the keys ROLL reads there: a typo when it
    is near one of them, else a key ROLL ignores too."""
    close = near(key, known)
    if close is None:
        out.ignored.append(where)
    else:
        out.typos.append(f"{where}: ROLL does not read this key either (it would run on the "
                         f"default of the key meant); did you mean '{close}'?")
