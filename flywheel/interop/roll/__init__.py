"""`platform convert --from roll`: a ROLL config as a strict flywheel config plus a report.

    keys.py        what ROLL reads: its blocks' keys and defaults (the key tables)
    rules.py       how each key ROLL reads becomes flywheel's, one rule per key
    convert.py     the conversion: read with ROLL's leniency, map, finish, check
    conversion.py  what a conversion holds (the data and the report's lists)
    defaults.py    what a converted file must add or leave out to run as ROLL ran it
    fit/           per-topic fitting (backends, LoRA, losses, Megatron, VL, envs, tools, ...)
    report.py      what the command prints and writes

ROLL's name tables and comparisons stay in here; nothing outside the CLI's path imports it.
"""
