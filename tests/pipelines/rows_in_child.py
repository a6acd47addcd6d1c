"""Read a data file's rows in a child process and report how much its peak RSS grew: the
bounded-memory checks of the data readers (a 64 MB line or JSON element read past) need a
fresh process, since this one's peak RSS is already whatever the suite reached."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = ("import json, resource, sys\nfrom pathlib import Path\n"
          "from flywheel.pipelines.data.data_files import OversizeRow, read_rows\n"
          "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
          "rows = [(w, r.size_bytes if isinstance(r, OversizeRow) else r)\n"
          "        for w, r in read_rows(Path(sys.argv[1]), int(sys.argv[2]))]\n"
          "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
          "print(json.dumps({'rows': rows, 'grew_mb': (peak - before) / 1024}))\n")


def read_rows_in_child(path: Path, limit_bytes: int = 1 << 20) -> dict:
    """{'rows': [(where, row or an oversize row's size in bytes)], 'grew_mb': peak RSS growth}"""
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(path), str(limit_bytes)],
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)
