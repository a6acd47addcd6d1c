"""exp_name is a name, not a path: it becomes one folder, runs/<exp_name>/.

A separator or `..` would put the run outside runs/ (`exp_name=../../../x`), and a name
longer than a file name may be passes validation only to die on `OSError: File name too
long` when the run starts; both are refused here, where the field is read.
"""

from __future__ import annotations

from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.errors import ConfigError

# Room under the usual 255-byte file name limit, and a name a reader can still read.
MAX_NAME_LENGTH = 100
_FORBIDDEN = ("/", "\\", "\0")


def check_exp_name(cfg: PipelineConfig) -> None:
    name = cfg.exp_name
    if not name or name.strip() in (".", "..") or name != name.strip():
        raise ConfigError("", "exp_name", f"is a folder name under runs/: non-empty, not "
                          f"'.' or '..', no leading or trailing spaces; got {name[:40]!r}")
    if any(c in name for c in _FORBIDDEN) or not name.isprintable():
        raise ConfigError("", "exp_name", f"is a name, not a path: no '/', '\\' or control "
                          f"characters (output_dir names a folder elsewhere); got "
                          f"{name[:40]!r}")
    if len(name.encode()) > MAX_NAME_LENGTH:
        raise ConfigError("", "exp_name", f"is at most {MAX_NAME_LENGTH} bytes (it names a "
                          f"folder); got {len(name.encode())}")
