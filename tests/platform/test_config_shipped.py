"""Every YAML the project ships under examples/ and configs/ loads and validates.

A config that rots (a renamed key, a value a new check refuses) fails here, not on a
user's first `platform run`. configs/ci files carry an `expectations:` block beside the
config; the rest of the file is checked like any other."""

from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config_with_section

REPO = Path(__file__).parents[2]
SHIPPED = sorted(p for folder in ("examples", "configs") for p in (REPO / folder).rglob("*.yaml"))


def test_the_shipped_folders_hold_configs():
    assert any(p.parts[-2] == "examples" for p in SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_config_validates(path):
    cfg, _ = load_config_with_section(path, "expectations")
    assert cfg.max_steps > 0
