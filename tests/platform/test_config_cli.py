"""`platform` / `python -m flywheel`: one-line errors, exit codes, show-config round trip."""

import logging
import os
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import yaml

from flywheel import cli
from flywheel.pipelines.config import load_config

REPO = Path(__file__).parents[2]
CONFIGS = REPO / "tests" / "data" / "configs"
TINY = CONFIGS / "valid" / "tiny_cpu.yaml"
ROLL_RLVR = CONFIGS / "roll" / "rlvr_config_async.yaml"
MALFORMED = sorted((CONFIGS / "malformed").glob("*.yaml"))


def platform(*args, **env):
    """`platform ARGS` as a user runs it: its own interpreter, the real exit status."""
    environment = {k: v for k, v in os.environ.items() if k != "FLYWHEEL_DEBUG"} | env
    return subprocess.run([sys.executable, "-m", "flywheel", *map(str, args)], check=False,
                          cwd=REPO, env=environment, capture_output=True, text=True, timeout=120)


# Warnings Python shows by default (the others it ignores outside __main__).
SILENT_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


class _Logged(logging.Handler):
    """What Python's last-resort handler prints to a process's stderr (a WARNING or worse
    record, no handler configured): pytest's own logging handlers would swallow it here."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.getMessage()}\n")


def platform_here(monkeypatch, capsys, *args):
    """`platform ARGS` in this process: `cli.main`, which `python -m flywheel` exits with,
    from the repo root without FLYWHEEL_DEBUG; argparse's SystemExit is the exit status,
    and a warning or log record the process would print is a line of stderr. It saves an
    interpreter start a case (seconds under load); the tests that run `platform` itself
    keep the real process."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("FLYWHEEL_DEBUG", raising=False)
    capsys.readouterr()
    logged = _Logged()
    logging.getLogger().addHandler(logged)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            try:
                code = cli.main([str(a) for a in args])
            except SystemExit as stop:
                code = stop.code
    finally:
        logging.getLogger().removeHandler(logged)
    out, err = capsys.readouterr()
    err += "".join(logged.lines) + "".join(
        warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
        for w in caught if not issubclass(w.category, SILENT_WARNINGS))
    return subprocess.CompletedProcess(["platform", *args], code, out, err)


def expected_message(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: '"
    return first.removeprefix("# expect: ")


def test_there_are_many_malformed_examples():
    assert len(MALFORMED) >= 15


def assert_one_error_line_and_exit_2(result, path: Path) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert expected_message(path) in lines[0]


@pytest.mark.parametrize("path", MALFORMED, ids=[p.stem for p in MALFORMED])
def test_malformed_config_gives_one_line_and_exit_2(monkeypatch, capsys, path):
    result = platform_here(monkeypatch, capsys, "validate", "--config", path.relative_to(REPO))
    assert_one_error_line_and_exit_2(result, path)


# One of each stage that refuses a file: the YAML reader, the interpolation, the schema, a
# check across keys; each in its own `platform` process.
IN_A_PROCESS = ["yaml_syntax", "interpolation_env_unset", "unknown_top_key",
                "async_shared_devices"]


@pytest.mark.parametrize("name", IN_A_PROCESS)
def test_malformed_config_in_a_real_process_gives_one_line_and_exit_2(name):
    path = CONFIGS / "malformed" / f"{name}.yaml"
    assert_one_error_line_and_exit_2(
        platform("validate", "--config", path.relative_to(REPO)), path)


def test_validate_ok():
    result = platform("validate", "--config", TINY.relative_to(REPO))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok: tests/data/configs/valid/tiny_cpu.yaml (rlvr, 3 roles)\n"
    assert result.stderr == ""


@pytest.mark.parametrize("example, shown", [
    ("sft_tiny.yaml", "(sft, 1 role)"),  # the default actor_infer and rewards never start
    ("agent_tiny_sums.yaml", "(agent, 2 roles)"),
])
def test_validate_counts_the_roles_the_kind_starts(capsys, example, shown):
    assert cli.main(["validate", "--config", str(REPO / "examples" / example)]) == 0
    assert capsys.readouterr().out.rstrip().endswith(shown)


# What the seed's backends would refuse at start, validate refuses (test_config_roll.py);
# with these it validates.
ROLL_RLVR_FITS = ["actor_infer.generating_args.top_k=-1", "actor_infer.generating_args.top_p=1.0"]


# `validate`, `show-config` and `convert` a user runs before anything else; torch,
# transformers, Ray and vLLM are seconds to import (a `platform validate` took 9 s under
# load), so none is imported. Counting GPUs imports torch where a GPU driver is, by design:
# the probe hides the driver.
FAST_COMMANDS_PROBE = """
import sys
from flywheel import cli
from flywheel.config.checks import environment
environment.GPU_DRIVER_PATHS = ()
codes = [cli.main(["validate", "--config", "tests/data/configs/valid/tiny_cpu.yaml"]),
         cli.main(["validate", "--config", "tests/data/configs/roll/rlvr_config_async.yaml",
                   *sys.argv[2:]]),
         cli.main(["show-config", "--config", "tests/data/configs/valid/tiny_cpu.yaml"]),
         cli.main(["convert", "--from", "roll", "tests/data/configs/roll/rlvr_config_async.yaml",
                   "-o", sys.argv[1]])]
heavy = [m for m in ("torch", "transformers", "ray", "vllm") if m in sys.modules]
print("RESULT", codes, heavy, file=sys.stderr)
"""


def test_validate_show_config_and_convert_import_no_torch(tmp_path):
    result = subprocess.run([sys.executable, "-c", FAST_COMMANDS_PROBE, tmp_path / "out.yaml",
                             *ROLL_RLVR_FITS], cwd=REPO, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == "RESULT [0, 0, 0, 0] []", result.stderr


def test_validate_roll_seed_prints_warnings_then_ok(monkeypatch, capsys):
    result = platform_here(monkeypatch, capsys, "validate", "--config", ROLL_RLVR, *ROLL_RLVR_FITS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: ") and "(rlvr, 3 roles)" in result.stdout
    warnings = result.stderr.splitlines()
    assert warnings and all(w.startswith("warning: ") for w in warnings)
    assert any("Qwen2.5-7B" in w for w in warnings)


def test_override_errors_name_the_command_line(monkeypatch, capsys):
    result = platform_here(monkeypatch, capsys, "validate", "--config", TINY, "max_steps=abc")
    assert result.returncode == 2
    assert result.stderr == "error: command line: max_steps: expected int, got str 'abc'\n"


def test_override_with_unknown_key_suggests(monkeypatch, capsys):
    result = platform_here(monkeypatch, capsys, "validate",
                           "--config", TINY, "actor_train.training_args.learnig_rate=1e-5")
    assert result.returncode == 2
    assert "did you mean 'learning_rate'" in result.stderr


def test_missing_file():
    result = platform("validate", "--config", "no/such.yaml")
    assert (result.returncode, result.stderr) == (2, "error: no/such.yaml: file not found\n")


def test_debug_shows_the_traceback():
    result = platform("validate", "--config", "no/such.yaml", FLYWHEEL_DEBUG="1")
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert result.stderr.rstrip().endswith("error: no/such.yaml: file not found")


@pytest.mark.parametrize("config, overrides", [
    (TINY, ["max_steps=7", "actor_train.training_args.learning_rate=3e-5"]),
    (ROLL_RLVR, ROLL_RLVR_FITS),
])
def test_show_config_round_trips(tmp_path, config, overrides):
    result = platform("show-config", "--config", config, *overrides)
    assert result.returncode == 0, result.stderr
    shown = tmp_path / "shown.yaml"
    shown.write_text(result.stdout)
    assert yaml.safe_load(result.stdout)["pipeline_type"] == "rlvr"  # Literals as plain text
    assert load_config(shown) == load_config(config, overrides)


def test_run_with_a_malformed_config_stops_before_the_pipeline():
    result = platform("run", "--config", CONFIGS / "malformed" / "unknown_top_key.yaml")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_missing_config_argument_is_a_usage_error():
    result = platform("validate")
    assert result.returncode == 2
    assert "--config" in result.stderr


def test_runs_lists_runs_with_metrics(tmp_path, capsys):
    for name in ("exp/20250101-000000", "exp/20250102-000000"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "exp/20250101-000000/metrics.jsonl").write_text("{}\n")
    assert cli.main(["runs", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # the mlflow hint is now `platform ui` (tests/platform/test_cli_runs.py covers the table)
    assert f"mlflow UI: platform ui --runs-dir {tmp_path.as_posix()}" in out
    assert "exp/20250101-000000" in out and "exp/20250102-000000" not in out


def test_runs_default_dir_command(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["runs"]) == 0
    out = capsys.readouterr().out
    assert "no runs under runs/" in out


def fake_launcher(monkeypatch, run):
    module = types.ModuleType("flywheel.pipelines.run.launch")
    module.run = run
    monkeypatch.setitem(sys.modules, "flywheel.pipelines.run.launch", module)


def test_run_calls_the_launcher(monkeypatch):
    calls = []
    fake_launcher(monkeypatch, lambda cfg, config_path, address: calls.append(
        (cfg, config_path, address)))
    assert cli.main(["run", "--config", str(TINY), "--address", "auto", "max_steps=3"]) == 0
    (cfg, config_path, address), = calls
    assert (cfg.max_steps, config_path, address) == (3, str(TINY), "auto")


def test_run_logs_flywheel_info_once_however_often_main_runs(monkeypatch, capsys):
    import logging

    fake_launcher(monkeypatch, lambda cfg, config_path, address: logging.getLogger(
        "flywheel.platform.models.builtin").info("building built-in model x"))
    for _ in range(2):
        assert cli.main(["run", "--config", str(TINY)]) == 0
        assert capsys.readouterr().err.count("building built-in model x") == 1


def test_run_time_failure_is_one_line_exit_1(monkeypatch, capsys):
    def explode(cfg, config_path, address):
        raise RuntimeError("worker actor_train died\nlong remote traceback")

    monkeypatch.delenv("FLYWHEEL_DEBUG", raising=False)
    fake_launcher(monkeypatch, explode)
    assert cli.main(["run", "--config", str(TINY)]) == 1
    err = capsys.readouterr().err
    assert err == ("error: RuntimeError: worker actor_train died "
                   "(FLYWHEEL_DEBUG=1 prints the traceback)\n")
