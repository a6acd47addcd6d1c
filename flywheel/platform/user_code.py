"""Where a config's user code (rewards, envs, tools named by "package.module:attr") is
imported from: the same folders in every process of a run.

Why one rule here: a reward's scoring process is started with `python -m`, which puts its
working folder on sys.path, while the driver (the `platform` console script) and Ray's
workers (started by Ray's own `default_worker.py`) do not; so a reward module in the working
folder imported and an env module beside it did not ("No module named 'my_envs'"). Every
import path now goes through `import_user_object`, which first puts the run's user-code
folder on sys.path: the driver's working folder when the run started (`platform run` records
it in FLYWHEEL_USER_CODE_DIR, which local Ray workers inherit and a joined cluster's workers
get through the job's runtime env, ray_runtime.py), then PYTHONPATH as Python reads it.

The folder is appended, not prepended, so a file of the working folder never shadows an
installed package (a `json.py` beside a config stays the user's problem, not the run's).
What may be imported is the import_allowlist's business (config/import_allowlist.py), not
this module's.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from flywheel.platform.config.catalogs import import_object

USER_CODE_DIR_ENV = "FLYWHEEL_USER_CODE_DIR"


def user_code_dir() -> str:
    """The folder user modules are imported from: the one recorded for this run, else the
    working folder."""
    return os.path.abspath(os.environ.get(USER_CODE_DIR_ENV) or os.getcwd())


def record_user_code_dir() -> str:
    """Fix the run's user-code folder (the driver's working folder now) for its workers."""
    os.environ[USER_CODE_DIR_ENV] = user_code_dir()
    return os.environ[USER_CODE_DIR_ENV]


def make_user_code_importable() -> None:
    """Put `user_code_dir()` on sys.path (last) unless it is there already."""
    folder = user_code_dir()
    if folder not in (os.path.abspath(p or os.curdir) for p in sys.path):
        sys.path.append(folder)


def import_user_object(path: str) -> Any:
    """The object "package.module:attr" names, imported as every extension point does."""
    make_user_code_importable()
    return import_object(path)
