"""What a run prints at start that is not the user's business (issue 44 item 7): Ray's
token-authentication warning is gone and token authentication stays on."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.platform.local_ray_probe import probe_local_ray

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_local_ray_starts_with_token_auth_on_and_without_its_warning():
    result = probe_local_ray()  # shared with test_ray_loopback.py: one Ray start for both
    assert result.returncode == 0, result.stderr[-2000:]
    assert "auth mode token" in result.stdout
    assert "Token authentication" not in result.stdout + result.stderr, result.stderr


def test_only_rays_token_auth_on_warning_is_quieted(caplog):
    from ray._private.authentication import authentication_token_setup as setup

    from flywheel.platform.ray_runtime import quiet_token_auth_enabled

    quiet_token_auth_enabled()
    quiet_token_auth_enabled()  # once is enough: no second filter
    with caplog.at_level(logging.WARNING, logger=setup.logger.name):
        setup._warn_token_auth_enabled()
        assert caplog.records == []
        setup._warn_token_auth_disabled()  # that one is the user's business
    assert [r.getMessage()[:40] for r in caplog.records] == [
        "Token authentication is disabled for thi"]
    assert len(setup.logger.filters) == 1


def test_a_ray_that_fails_to_start_is_the_error_reported(tmp_path, monkeypatch):
    """The start-up warning digest no longer hides the failure (UnboundLocalError)."""
    from flywheel.pipelines.config import load_config
    from flywheel.pipelines.run import launch

    def fail(*args, **kwargs):
        raise RuntimeError("ray could not start")

    monkeypatch.setattr(launch, "start_ray", fail)
    cfg = load_config(REPO / "examples" / "rlvr_async.yaml",
                      [f"output_dir={tmp_path / 'run'}", "max_steps=1"])
    with pytest.raises(RuntimeError, match="ray could not start"):
        launch.run(cfg)
