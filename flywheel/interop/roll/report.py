"""What `platform convert --from roll` prints and writes.

The report is short on purpose: first what the user most needs to know (features flywheel
lacks, then keys their config carried that ROLL ignored too, so those never did anything),
then what was mapped or dropped and why. The converted config is written only when nothing
is missing, with a header naming its source, and is loadable by `platform validate` as is.
"""

from __future__ import annotations

import os
import sys

import yaml

from flywheel.config.catalogs import Catalogs
from flywheel.interop.roll.convert import Conversion, convert_roll
from flywheel.platform.config.errors import ConfigError

SECTIONS = (
    ("typos", "typos: keys ROLL does not read either, each near one it reads (fix them; "
              "the config is not converted)"),
    ("missing", "flywheel does not have (the config needs it, so it is not converted)"),
    ("needs_pipeline", "needs a pipeline flywheel does not run yet (ROLL's pipeline for this "
                       "file reads these keys)"),
    ("ignored", "ROLL ignores these keys too (they never did anything)"),
    ("helpers", "helper variables (resolved into the keys that reference them, then dropped)"),
    ("mapped", "mapped"),
    ("dropped", "dropped (no effect on what is learned in flywheel)"),
)


def format_report(conversion: Conversion) -> str:
    why = ("as --pipeline says" if conversion.recognised_by == "--pipeline"
           else f"recognised: {conversion.recognised_by}" if conversion.recognised_by else "")
    lines = [f"{conversion.source}: ROLL {conversion.roll_pipeline} config"
             + (f" ({why})" if why else "")]
    for attr, title in SECTIONS:
        items = getattr(conversion, attr)
        if items:
            lines.append(f"{title}: {len(items)}")
            lines.extend(f"  {item}" for item in items)
    return "\n".join(lines)


def converted_yaml(conversion: Conversion) -> str:
    header = (f"# Converted from {conversion.source} by `platform convert --from roll`.\n"
              f"# Keys ROLL ignored, helper variables and settings flywheel does not need are "
              f"left out;\n# the command's report lists each one.\n")
    return header + yaml.safe_dump(conversion.data, sort_keys=False, width=100,
                                   allow_unicode=True)


def convert_file(source: str | os.PathLike, output: str | os.PathLike | None,
                 catalogs: Catalogs, pipeline: str | None = None) -> Conversion:
    """Convert, print the report, write `output` (stdout when None) if nothing is missing;
    raise ConfigError (one line, exit 2 from the CLI) when something is. `pipeline`: ROLL's
    pipeline by name (`--pipeline`), else recognised from the file."""
    conversion = convert_roll(source, catalogs, pipeline)
    report = format_report(conversion)
    if conversion.typos:
        print(report)
        raise ConfigError(os.fspath(source), "",
                          f"not converted: {len(conversion.typos)} key(s) ROLL does not read "
                          f"either look like typos (listed above, each with the near key)")
    if conversion.missing:
        print(report)
        raise ConfigError(os.fspath(source), "",
                          f"not converted: needs {len(conversion.missing)} feature(s) flywheel "
                          f"does not have (listed above)")
    text = converted_yaml(conversion)
    if output is None:
        print(text, end="")
        print(report, file=sys.stderr)
        return conversion
    with open(output, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(report)
    print(f"wrote {os.fspath(output)}")
    return conversion
