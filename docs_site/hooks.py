"""mkdocs hook: adds the generated pages (see generate.py) to the site at build time, so no
generated Markdown is committed and none can go stale."""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File

sys.path.insert(0, str(Path(__file__).parent))
from generate import pages  # noqa: E402


def on_files(files, config):
    for path, markdown in pages().items():
        files.append(File.generated(config, path, content=markdown))
    return files
