# PYTHON_ARGCOMPLETE_OK  (argcomplete reads this marker: `platform` supports tab completion)
"""`platform`: the command line (`platform ...` or `python -m flywheel ...`).

    platform run --config F.yaml [--address ADDR] [key.path=value ...]
    platform run --resume RUN_DIR [key.path=value ...]   continue a run in place, from its
                                             own config.yaml and newest checkpoint
    platform validate --config F.yaml [key.path=value ...]
    platform show-config --config F.yaml [key.path=value ...]
    platform runs [--runs-dir runs]          status, steps, reward, checkpoint, resume command
    platform ui [--runs-dir runs] [--port P] the mlflow UI on 127.0.0.1 for those runs
    platform plot RUN_DIR [RUN_DIR ...] [-o out.png]   one run's plots, or runs overlaid
    platform examples                        the shipped example configs, a line each
    platform export CHECKPOINT_OR_RUN_DIR -o OUT_DIR [--dtype D]
                                             a checkpoint (LoRA: adapter merged) as one HF
                                             model folder for serving or as a `pretrain`
    platform ci configs/ci [--only NAME ...] [--fast] [--set key.path=value ...]
                                             regression configs: runs, pass/fail table

Tab completion of subcommands, options and config key paths (`max_st<TAB>` gives
`max_steps=`) comes from argcomplete: `eval "$(register-python-argcomplete platform)"`
in a bash or zsh profile turns it on.

A user sees one line per problem, never a traceback: a config mistake is `error: <file>:
<key.path>: <message>` and exit status 2 (`validate` prints every mistake of the file, a
line each, then a `note:` naming `platform convert` for a ROLL-shaped file); any other
failure (the pipeline raising at run time, a bug) is `error: <type>: <first line>` and
exit status 1; a run's full traceback (a worker's own included) is in
`<output_dir>/error.log`, which the line names. SIGINT / SIGTERM stop a run after its
current step with a checkpoint and print the resume command (`stopped: ...`, exit status
130: the user's stop is not an error). `FLYWHEEL_DEBUG=1` prints the traceback as well.
Warnings (`warning: ...`) and errors go to stderr, so `show-config` output on stdout is
always loadable YAML.

This module only parses arguments and reports; what `run` does lives in
`flywheel.pipelines.run.launch`, imported when `run` is chosen so that `validate` and
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

import argcomplete
import yaml

from flywheel.cli_completion import config_key_completer
from flywheel.config.derived import started_roles
from flywheel.config.persisted import written_config
from flywheel.interop.roll.pipelines import NAMES as ROLL_PIPELINES
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.config.yaml_source import read_yaml_mapping
from flywheel.platform.stop_signals import RunInterrupted

DEFAULT_RUNS_DIR = "runs"
MLFLOW_DB = "mlruns.db"
EXIT_CONFIG_ERROR = 2
EXIT_FAILURE = 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argcomplete.autocomplete(parser)  # answers a shell's completion request, else nothing
    args = parser.parse_args(argv)
    return _report_errors(args.handler, args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="platform", description="flywheel: YAML-declarative RL post-training.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="validate a config and run its pipeline")
    _add_config_arguments(run, required=False)
    run.add_argument("--resume", default=None, metavar="RUN_DIR", type=Path,
                     help="continue this run directory in place from its newest complete "
                          "checkpoint, with its own config.yaml unless --config is given "
                          "(overrides may change max_steps, logging, eval, timeouts)")
    run.add_argument("--address", default=None,
                     help="join this Ray cluster ('auto' or host:port) instead of starting "
                          "one; default: $RAY_ADDRESS, then ray.address in the config")
    run.set_defaults(handler=cmd_run)

    validate = commands.add_parser("validate", help="check a config; print warnings")
    _add_config_arguments(validate)
    validate.set_defaults(handler=cmd_validate)

    show = commands.add_parser("show-config", help="print the fully resolved config as YAML")
    _add_config_arguments(show)
    show.set_defaults(handler=cmd_show_config)

    runs = commands.add_parser(
        "runs", help="list runs: status, steps, last reward and validation, newest "
                     "checkpoint and the command that resumes it")
    _add_runs_dir(runs)
    runs.set_defaults(handler=cmd_runs)

    ui = commands.add_parser("ui", help="start the mlflow UI on 127.0.0.1 for the runs folder")
    _add_runs_dir(ui)
    ui.add_argument("--port", type=int, default=5000, help="port (default: 5000)")
    ui.set_defaults(handler=cmd_ui)

    plot = commands.add_parser("plot", help="draw a run's metrics, or overlay several runs")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", type=Path)
    plot.add_argument("-o", "--output", type=Path, default=None, metavar="OUT.png",
                      help="picture to write (default: RUN_DIR/plots.png for one run, "
                           "./plots_overlay.png for several)")
    plot.set_defaults(handler=cmd_plot)

    examples = commands.add_parser("examples", help="list the shipped example configs")
    examples.set_defaults(handler=cmd_examples)

    export = commands.add_parser(
        "export", help="write a checkpoint as a Hugging Face model folder (a LoRA adapter "
                       "merged into the run's base model) for serving or as a pretrain")
    export.add_argument("source", type=Path, metavar="CHECKPOINT_OR_RUN_DIR",
                        help="a checkpoint-<step> folder, or a run directory (its newest "
                             "complete checkpoint)")
    export.add_argument("-o", "--output", type=Path, required=True, metavar="OUT_DIR",
                        help="the folder to write (new, or empty)")
    export.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default=None,
                        help="weights' dtype (default: the run's actor_train "
                             "model_args.dtype, the one it served)")
    export.set_defaults(handler=cmd_export)

    convert = commands.add_parser("convert", help="turn a ROLL config into a flywheel config "
                                                  "and report what did not carry over")
    convert.add_argument("--from", dest="source_format", choices=["roll"], required=True,
                         help="the format of FILE (only ROLL's, today)")
    convert.add_argument("file", metavar="FILE.yaml", help="the ROLL config")
    convert.add_argument("-o", "--output", default=None, metavar="OUT.yaml",
                         help="where to write the flywheel config (default: stdout)")
    convert.add_argument("--pipeline", default=None, choices=ROLL_PIPELINES,
                         help="which of ROLL's pipelines the file is for (default: "
                              "recognised from its roles and keys)")
    convert.set_defaults(handler=cmd_convert)

    ci = commands.add_parser("ci", help="run regression configs (configs/ci) and print a "
                                        "pass/fail table; exit 1 on a regression")
    ci.add_argument("folder", type=Path, metavar="FOLDER", help="a folder of regression "
                    "configs (or one file), e.g. configs/ci")
    ci.add_argument("--only", nargs="+", default=[], metavar="NAME",
                    help="run only these (file stems); a ratio's other side runs too")
    ci.add_argument("--fast", action="store_true",
                    help="the short behaviour checks of each config's fast: form")
    ci.add_argument("--set", dest="overrides", action="append", default=[],
                    metavar="key.path=value", help="override a value in every run")
    ci.add_argument("--runs-dir", default=Path(DEFAULT_RUNS_DIR) / "ci", type=Path,
                    help=f"where the runs and ci.json go (default: {DEFAULT_RUNS_DIR}/ci/)")
    ci.set_defaults(handler=cmd_ci)
    return parser


def _add_runs_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR, type=Path,
                        help=f"where runs are written (default: {DEFAULT_RUNS_DIR}/)")


def _add_config_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--config", required=required, metavar="FILE.yaml",
                        help="pipeline config")
    parser.add_argument("overrides", nargs="*", metavar="key.path=value",
                        help="override a config value, e.g. max_steps=20 "
                             "actor_train.training_args.learning_rate=1e-5"
                        ).completer = config_key_completer


def cmd_run(args: argparse.Namespace) -> int:
    overrides = list(args.overrides)
    if args.resume is not None:  # the run's own saved config, continued in its directory
        run_dir = args.resume.as_posix()
        args.config = args.config or f"{run_dir}/config.yaml"
        overrides += [f"resume_from_checkpoint={run_dir}", f"output_dir={run_dir}"]
    elif args.config is None:
        raise ConfigError("", "", "platform run needs --config FILE.yaml or --resume RUN_DIR")
    # Here, not at the top (~1 s, envs included): completion and `platform runs` skip it.
    from flywheel.pipelines.config import check_environment, load_config

    cfg = load_config(args.config, overrides)
    from flywheel.pipelines.data.column_checks import check_data_columns
    from flywheel.pipelines.user_code_checks import check_user_code_isolated

    try:  # user code that cannot import, a column the data lacks: now, not after Ray starts
        check_user_code_isolated(cfg)
        check_data_columns(cfg)
    except ConfigError as error:
        raise error.with_file(args.config) from None
    _print_warnings(check_environment(cfg))
    _show_info_logs()
    from flywheel.pipelines.run.launch import run  # here, not at the top: it imports Ray, torch

    run(cfg, config_path=args.config, address=args.address)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    # Read through the config reader, so a YAML syntax error is the same one-line error.
    top = read_yaml_mapping(args.config) if Path(args.config).is_file() else None
    if isinstance(top, dict) and "expectations" in top:  # a regression config (configs/ci)
        from flywheel.pipelines.run.regression import read_cases

        full = read_cases([Path(args.config)], fast=False, overrides=args.overrides)
        fast = read_cases([Path(args.config)], fast=True, overrides=args.overrides)
        print(f"ok: {args.config} (regression config: {len(full)} run(s), "
              f"{len(fast)} in its fast form)")
        return 0
    from flywheel.pipelines.config import check_environment, config_errors
    from flywheel.pipelines.data.column_checks import check_data_columns
    from flywheel.pipelines.user_code_checks import check_user_code_isolated

    cfg, errors, hint = config_errors(args.config, args.overrides)
    for check in (check_user_code_isolated, check_data_columns) if cfg is not None else ():
        try:
            check(cfg)
        except ConfigError as error:
            errors.append(error.with_file(args.config))
    for error in errors:  # every error of the file, not the first alone
        print(f"error: {error}", file=sys.stderr)
    if errors:
        if hint:
            print(f"note: {hint}", file=sys.stderr)
        if len(errors) > 1:
            print(f"{args.config}: {len(errors)} errors", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    _print_warnings(check_environment(cfg))
    count = len(started_roles(cfg))
    print(f"ok: {args.config} ({cfg.pipeline_type}, {count} role{'s' if count != 1 else ''})")
    return 0


def cmd_show_config(args: argparse.Namespace) -> int:
    from flywheel.pipelines.config import load_config

    cfg = load_config(args.config, args.overrides)
    overrides = "".join(f" {o}" for o in args.overrides)
    print(f"# platform show-config --config {args.config}{overrides}")
    print(yaml.safe_dump(written_config(cfg, args.config), sort_keys=False,
                         default_flow_style=None,
                         width=100, allow_unicode=True), end="")
    from flywheel.config.derived import derived_values

    for key, value in derived_values(cfg).items():
        print(f"# {key}: auto resolves to {value}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from flywheel.pipelines.run.metric_views import REWARD_KEYS, VALIDATION_KEYS
    from flywheel.platform.run_status import find_runs, summarize

    runs_dir: Path = args.runs_dir
    found = find_runs(runs_dir)
    if not found:
        print(f"no runs under {runs_dir.as_posix()}/")
        return 0
    print(f"{'STATUS':<12} {'STEPS':>9} {'REWARD':>7} {'VAL':>7}  {'CHECKPOINT':<16} RUN")
    for run_dir in found:
        s = summarize(run_dir, REWARD_KEYS, VALIDATION_KEYS)
        steps = f"{s.steps}/{s.max_steps}" if s.max_steps else str(s.steps)
        print(f"{s.status:<12} {steps:>9} {_figure(s.reward):>7} {_figure(s.validation):>7}  "
              f"{s.checkpoint.name if s.checkpoint else '-':<16} {run_dir.as_posix()}")
        if s.resume_command() and s.status != "finished":
            print(f"  resume: {s.resume_command()}")
    print(f"mlflow UI: platform ui --runs-dir {runs_dir.as_posix()}")
    return 0


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def cmd_ui(args: argparse.Namespace) -> int:
    store = args.runs_dir / MLFLOW_DB
    if not store.exists():
        raise FileNotFoundError(f"no mlflow store at {store.as_posix()} (runs write it there; "
                                f"pick the folder with --runs-dir)")
    uri = f"sqlite:///{store.resolve().as_posix()}"
    print(f"mlflow UI for {store.as_posix()} at http://127.0.0.1:{args.port} (Ctrl-C stops it)",
          flush=True)
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
               "--host", "127.0.0.1", "--port", str(args.port),
               "--workers", "1"]  # one reader on this machine: 4 processes start slowly
    from flywheel.platform.server_group import run_server_group

    return run_server_group(command, {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION":
                                      "false"}, "mlflow UI")


def cmd_plot(args: argparse.Namespace) -> int:
    from flywheel.pipelines.run.metric_views import PANELS
    from flywheel.platform.plots import PLOT_FILE, draw

    for run_dir in args.run_dirs:
        if not (run_dir / "metrics.jsonl").exists():
            raise FileNotFoundError(f"{run_dir.as_posix()}: no metrics.jsonl (not a run "
                                    f"directory)")
    single = len(args.run_dirs) == 1
    out = args.output or (args.run_dirs[0] / PLOT_FILE if single
                          else Path("plots_overlay.png"))
    print(f"wrote {draw(args.run_dirs, out, PANELS).as_posix()}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from flywheel.pipelines.run.export import export  # imports torch, transformers, peft

    checkpoint = export(args.source, args.output, args.dtype)
    print(f"wrote {args.output.as_posix()} from {checkpoint.as_posix()}")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from flywheel.pipelines.config import convert_file

    convert_file(args.file, args.output, pipeline=args.pipeline)
    return 0


def cmd_ci(args: argparse.Namespace) -> int:
    _show_info_logs()
    from flywheel.pipelines.run.regression import run_suite  # imports Ray, torch

    return run_suite(args.folder, args.only, args.fast, args.overrides, args.runs_dir)


def cmd_examples(args: argparse.Namespace) -> int:
    folder = Path(__file__).resolve().parents[1] / "examples"
    found = sorted(folder.glob("*.yaml"))
    if not found:
        raise FileNotFoundError(f"no examples at {folder} (they ship with the source checkout)")
    width = max(len(p.name) for p in found)
    for path in found:
        print(f"{path.name:<{width}}  {_first_comment(path)}")
    print(f"run one: platform run --config {(folder / found[0].name).as_posix()}")
    return 0


def _first_comment(path: Path) -> str:
    """The first sentence of an example's opening comment: what it runs."""
    words = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        words += line.lstrip("#").split()
    text = " ".join(words)
    end = text.find(". ")
    return text[: end + 1] if end >= 0 else text


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
    except KeyboardInterrupt as error:  # the user's stop: said, not an error
        said = str(error) if isinstance(error, RunInterrupted) else ""
        print(f"stopped{': ' + said if said else ''}", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 (the user gets one line; FLYWHEEL_DEBUG=1 for more)
        if debug:
            traceback.print_exc()
        log = getattr(error, "error_log", None)
        hint = ("" if debug else f" (full traceback: {log})" if log
                else " (FLYWHEEL_DEBUG=1 prints the traceback)")
        print(f"error: {_one_line(error)}{hint}", file=sys.stderr)
        return EXIT_FAILURE


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 500 else text[:497] + "..."
