"""Shared by the documentation tests: the site's generator module (docs_site/generate.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

DOCS_SITE = Path(__file__).parents[2] / "docs_site"


@pytest.fixture(scope="session")
def site_generate():
    """docs_site/generate.py, imported by path (docs_site is not a package)."""
    spec = importlib.util.spec_from_file_location("docs_site_generate",
                                                  DOCS_SITE / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
