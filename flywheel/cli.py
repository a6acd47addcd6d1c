"""`platform`: the command line (`platform ...` or `python -m flywheel ...`).

    platform run --config F.yaml [--address ADDR] [key.path=value ...]
    platform validate --config F.yaml [key.path=value ...]
    platform show-config --config F.yaml [key.path=value ...]
    platform runs [--runs-dir runs]

A user sees one line per problem, never a traceback: a config mistake is
`error: <file>: <key.path>: <message>` and exit status 2; any other failure (the pipeline
raising at run time, a bug) is `error: <type>: <first line>` and exit status 1.
`FLYWHEEL_DEBUG=1` prints the traceback as well. Warnings (`warning: ...`) and errors go to
stderr, so `show-config` output on stdout is always loadable YAML.

This module only parses arguments and reports; what `run` does lives in
`flywheel.pipelines.launch`, imported when `run` is chosen so that `validate` and
`show-config` start fast and work without Ray or torch being importable.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from flywheel.platform.config import (
    ConfigError,
    PipelineConfig,
    check_environment,
    config_to_dict,
    load_config,
)
from flywheel.platform.config.checks import roles

DEFAULT_RUNS_DIR = "runs"
MLFLOW_DB = "mlruns.db"
EXIT_CONFIG_ERROR = 2
EXIT_FAILURE = 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _report_errors(args.handler, args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="platform", description="flywheel: YAML-declarative RL post-training.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="validate a config and run its pipeline")
    _add_config_arguments(run)
    run.add_argument("--address", default=None,
                     help="join this Ray cluster ('auto' or host:port) instead of starting one")
    run.set_defaults(handler=cmd_run)

    validate = commands.add_parser("validate", help="check a config; print warnings")
    _add_config_arguments(validate)
    validate.set_defaults(handler=cmd_validate)

    show = commands.add_parser("show-config", help="print the fully resolved config as YAML")
    _add_config_arguments(show)
    show.set_defaults(handler=cmd_show_config)

    runs = commands.add_parser("runs", help="list runs and how to open the mlflow UI")
    runs.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR,
                      help=f"where runs are written (default: {DEFAULT_RUNS_DIR}/)")
    runs.set_defaults(handler=cmd_runs)
    return parser


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE.yaml", help="pipeline config")
    parser.add_argument("overrides", nargs="*", metavar="key.path=value",
                        help="override a config value, e.g. max_steps=20 "
                             "actor_train.training_args.learning_rate=1e-5")


def cmd_run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.overrides)
    _print_warnings(check_environment(cfg))
    _show_info_logs()
    from flywheel.pipelines.launch import run  # here, not at the top: it imports Ray, torch

    run(cfg, config_path=args.config, address=args.address)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.overrides)
    _print_warnings(check_environment(cfg))
    print(f"ok: {args.config} ({cfg.pipeline_type}, {_count_roles(cfg)} roles)")
    return 0


def cmd_show_config(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.overrides)
    overrides = "".join(f" {o}" for o in args.overrides)
    print(f"# platform show-config --config {args.config}{overrides}")
    print(yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=None,
                         width=100, allow_unicode=True), end="")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    runs_dir = Path(args.runs_dir)
    print("open the mlflow UI with:")
    print(f"  mlflow ui --backend-store-uri sqlite:///{runs_dir.as_posix()}/{MLFLOW_DB} "
          f"--host 127.0.0.1 --port 5000")
    found = sorted(p.parent for p in runs_dir.rglob("metrics.jsonl")) if runs_dir.is_dir() else []
    if not found:
        print(f"no runs with metrics.jsonl under {runs_dir}/")
        return 0
    print(f"runs with metrics.jsonl under {runs_dir}/:")
    for run_dir in found:
        print(f"  {run_dir.as_posix()}")
    return 0


def _count_roles(cfg: PipelineConfig) -> int:
    return sum(1 for _ in roles(cfg))


def _show_info_logs() -> None:
    """flywheel's own INFO lines on stderr: building a built-in model takes minutes on first
    use and logs step, loss, rate and ETA. Other libraries' loggers keep their levels.
    One handler however often `main` runs in a process (else every line repeats)."""
    logger = logging.getLogger("flywheel")
    if not any(isinstance(h, _CurrentStderrHandler) for h in logger.handlers):
        handler = _CurrentStderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to sys.stderr as it is at each record, not as it was when the handler was made
    (an embedding program or a test may swap it, and close the old one)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ assigns it; sys.stderr wins
        pass


def _print_warnings(warnings: list[str]) -> None:
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


def _report_errors(handler: Callable[[argparse.Namespace], int],
                   args: argparse.Namespace) -> int:
    """Run a command; turn any exception into one `error:` line and an exit status."""
    debug = os.environ.get("FLYWHEEL_DEBUG", "") not in ("", "0")
    try:
        return handler(args)
    except ConfigError as error:
        if debug:
            traceback.print_exc()
        print(f"error: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 (the user gets one line; FLYWHEEL_DEBUG=1 for more)
        if debug:
            traceback.print_exc()
        hint = "" if debug else " (FLYWHEEL_DEBUG=1 prints the traceback)"
        print(f"error: {_one_line(error)}{hint}", file=sys.stderr)
        return EXIT_FAILURE


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 500 else text[:497] + "..."
