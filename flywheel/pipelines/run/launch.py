"""`platform run`: from a validated config to a finished run, and a clean shutdown.

Order matters: the output directory and resolved config are written first (so a failed
run still says what it was), built-in models are built in the driver before any worker
starts (so workers never race to build them), then Ray, roles, tracking, the loop.
Whatever happens, roles, Ray and the trackers are closed on the way out, and the run
leaves `status.json` (finished / failed / interrupted, and where each role ran) and its
plots (`plots.png`, also redrawn at every checkpoint) for `platform runs` and a reader.
"""

from __future__ import annotations

import logging
import time
import traceback
from pathlib import Path
from typing import Any, Protocol

import torch
import yaml

from flywheel.config.derived import loads_model, started_roles
from flywheel.config.kinds import PipelineKind, kind_of
from flywheel.config.length_defaults import loadable_config_data
from flywheel.config.persisted import written_config
from flywheel.config.schema import PipelineConfig, RewardConfig
from flywheel.pipelines.loop.rollout_mock import recorded_for
from flywheel.pipelines.loop.sample_ledger import cut_back as ledger_cut_back
from flywheel.pipelines.loop.seams import Rollout
from flywheel.pipelines.loop.step_loop import StepLoop
from flywheel.pipelines.roles.roles import Roles, actor_train_model, num_slots, start_roles
from flywheel.pipelines.run.metric_views import PANELS, PROGRESS_KEYS
from flywheel.pipelines.run.resume_rules import SAFE_KEYS, schedule_steps
from flywheel.pipelines.run.sample_texts import SampleTextLog
from flywheel.platform.backend_logs import LOG_FOLDER, WarningDigest
from flywheel.platform.checkpoint import checkpoint_step
from flywheel.platform.config.catalogs import import_object
from flywheel.platform.cpu_dtypes import emulated_dtype_lines
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.platform.models.weight_size import weight_bytes
from flywheel.platform.plots import refresh_run_plots
from flywheel.platform.ray_runtime import cluster_address, start_ray, stop_ray
from flywheel.platform.resume import check_changes, cut_back, find_checkpoint
from flywheel.platform.run_folder import check_fresh_folder, unused_folder
from flywheel.platform.run_status import write_status
from flywheel.platform.stop_signals import RunInterrupted, StopRequest, stop_on_signals
from flywheel.platform.tracking import Tracker, default_mlflow_uri
from flywheel.workers.strategies.hf_model import load_tokenizer

log = logging.getLogger(__name__)


class StartRollout(Protocol):
    """Once the roles run: the rollout over `data` (what `prepare` returned), with any
    workers of its own started (on `model_path`, logging to `log_dir`) and added to
    `roles.all`, so they are shut down with the roles."""

    def __call__(self, cfg: PipelineConfig, roles: Roles, tokenizer: object, data: Any,
                 model_path: str, log_dir: Path | None) -> Rollout: ...


class PrepareRollout(Protocol):
    """Before Ray starts: what the rollout reads (prompts), loaded and checked."""

    def __call__(self, cfg: PipelineConfig, tokenizer: object) -> Any: ...


class OwnLoop(Protocol):
    """A kind with a loop of its own (SFT: the update loop over fixed data): the whole run
    into `output_dir`, which `run` made with config.yaml in it; returns the run directory."""

    def __call__(self, cfg: PipelineConfig, output_dir: Path, is_default: bool,
                 model_path: str, tokenizer: object, config_path: str | None) -> Path: ...


# A kind names these by import path in its catalog entry (flywheel/config/kinds.py): a new
# pipeline kind is one folder under pipelines/ and one line there, nothing here.
def own_loop(kind: PipelineKind) -> OwnLoop:
    return import_object(kind.run)


def rollout_parts(kind: PipelineKind) -> tuple[PrepareRollout, StartRollout]:
    return import_object(kind.prepare), import_object(kind.rollout)


def output_dir_for(cfg: PipelineConfig, checkpoint: Path | None = None) -> tuple[Path, bool]:
    """(directory, whether it is the default runs/<exp_name>/<timestamp> layout); a resumed
    run continues in its checkpoint's run directory unless output_dir names another."""
    if cfg.output_dir:
        return Path(cfg.output_dir), False
    if checkpoint is not None:
        return checkpoint.parent, True
    return Path("runs") / cfg.exp_name / time.strftime("%Y%m%d-%H%M%S"), True


def prepare_resume(cfg: PipelineConfig, config_path: str | None) -> tuple[Path | None, Path]:
    """(checkpoint or None, run directory); a resumed run's directory is checked against
    its saved config and cut back to the checkpoint (resume.py) before anything is written."""
    checkpoint = (find_checkpoint(cfg.resume_from_checkpoint, cfg.output_dir, cfg.exp_name)
                  if cfg.resume_from_checkpoint else None)
    output_dir, _ = output_dir_for(cfg, checkpoint)
    saved = output_dir / "config.yaml"
    if checkpoint is None or not saved.exists():
        return checkpoint, output_dir
    # both sides as written (a saved config.yaml from before loadable_config_data too)
    for line in check_changes(saved_as_today(saved),
                              loadable_config_data(written_config(cfg, config_path)),
                              config_path or str(saved), SAFE_KEYS, output_dir):
        print(f"resume: changed {line}", flush=True)
    step = checkpoint_step(checkpoint)
    cut_back(output_dir, step)
    ledger_cut_back(output_dir, step)
    return checkpoint, output_dir


def saved_as_today(saved: Path) -> dict[str, Any]:
    """The run's saved config.yaml as today's schema writes it: a key added since the run
    started has its default there, as on the resuming side, so a checkpoint from an older
    flywheel resumes unless a value it trained with really differs. A saved key today's
    schema no longer takes is refused by the loader, in one line naming it."""
    from flywheel.pipelines.config import load_config  # the catalogs: not at import time

    return loadable_config_data(written_config(load_config(saved), saved))


def started_dtypes(cfg: PipelineConfig) -> dict[str, str]:
    """The model dtype of each role the run starts that loads a model."""
    return {r.key_path: r.worker.model_args.dtype for r in started_roles(cfg)
            if not isinstance(r.worker, RewardConfig) or loads_model(r.worker)}


def run(cfg: PipelineConfig, config_path: str | None = None,
        address: str | None = None) -> Path:
    checkpoint, _ = prepare_resume(cfg, config_path)
    horizon = schedule_steps(cfg, checkpoint)  # refused here, before anything starts
    output_dir, is_default = output_dir_for(cfg, checkpoint)
    if checkpoint is None:  # a fresh run never writes into another run's folder
        if is_default:
            output_dir = unused_folder(output_dir)
        else:
            check_fresh_folder(output_dir, config_path)
    output_dir.mkdir(parents=True, exist_ok=True)
    config_dict = written_config(cfg, config_path)  # no secret, no environment's value
    (output_dir / "config.yaml").write_text(  # as `platform run --resume` loads it back
        yaml.safe_dump(loadable_config_data(config_dict), sort_keys=False))
    print(f"run directory: {output_dir}", flush=True)

    model_path = resolve_pretrain(cfg.pretrain)
    tokenizer = load_tokenizer(model_path)
    kind = kind_of(cfg)
    if not torch.cuda.is_available():  # a CPU run: half dtypes may be emulated
        for line in emulated_dtype_lines(started_dtypes(cfg)):
            print(line, flush=True)
    if kind.loop == "own":  # SFT: actor_train's hf_train here, no Ray, no roles
        return own_loop(kind)(cfg, output_dir, is_default, model_path, tokenizer, config_path)
    prepare, start_rollout = rollout_parts(kind)
    data = prepare(cfg, tokenizer)
    recorded = recorded_for(cfg)  # rollout_mock: the dump is read before workers start

    write_status(output_dir, "running", max_steps=cfg.max_steps, config=config_path)
    owns_ray, roles, tracker, log_dir, digest = False, None, None, None, None
    status = "failed"
    stop = StopRequest()
    try:
        # Workers write their output to files in the run directory unless the run joins
        # a cluster, whose other nodes cannot write here (platform/backend_logs.py).
        log_dir = None if cluster_address(cfg.ray, address) else output_dir / LOG_FOLDER
        train_model = actor_train_model(cfg, model_path)
        # before Ray starts: the report at the end must not hide a failure to start it
        digest = WarningDigest(log_dir) if log_dir is not None else None
        owns_ray = start_ray(cfg.ray, num_slots(cfg), address,
                             forward_worker_output=log_dir is None,
                             weight_bytes=weight_bytes(train_model,
                                                       cfg.actor_train.model_args.dtype))
        if log_dir is not None:
            log_dir.mkdir(exist_ok=True)
        roles = start_roles(cfg, model_path, total_steps=horizon,
                            log_dir=log_dir)
        if digest is not None:
            _print_report(digest.report("at start-up"))
        write_status(output_dir, "running", nodes=role_nodes(roles))
        tracker = Tracker.open(output_dir, cfg, output_dir.name, params=config_dict,
                               mlflow_uri=default_mlflow_uri(output_dir, is_default),
                               resumed_at=checkpoint_step(checkpoint) if checkpoint else None,
                               progress_keys=PROGRESS_KEYS)
        rollout = start_rollout(cfg, roles, tokenizer, data, model_path, log_dir)
        pipeline = StepLoop(cfg, roles, rollout, tracker, output_dir, recorded=recorded)
        pipeline.ledger.on_trained = SampleTextLog(tracker, tokenizer).trained
        if checkpoint is not None:
            pipeline.load_checkpoint(checkpoint)
            print(f"resumed from {checkpoint} at step {pipeline.step}", flush=True)
        pipeline.stop_requested = lambda: stop.requested
        with stop_on_signals(stop):
            stop.armed = True
            pipeline.run()
        if stop.requested and not pipeline.step:
            raise RunInterrupted(f"{stop.signal_name} before the first step finished: no "
                                 f"checkpoint, nothing to resume")
        if stop.requested:
            raise RunInterrupted(f"{stop.signal_name} at step {pipeline.step}, checkpoint "
                                 f"written; resume: platform run --resume {output_dir}")
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except Exception as error:  # the CLI's one line names the log with the full traceback
        error.error_log = write_error_log(output_dir, error)
        raise
    finally:
        try:
            close_run(tracker, roles, owns_ray, status)
        finally:
            write_status(output_dir, status)
            refresh_run_plots(output_dir, PANELS)
            if digest is not None and digest.log_dir.is_dir():
                _print_report(digest.report("during the run"))
    print(f"done: metrics in {output_dir / 'metrics.jsonl'}, plots in "
          f"{output_dir / 'plots.png'}", flush=True)
    return output_dir


def close_run(tracker: Tracker | None, roles: Roles | None, owns_ray: bool,
              status: str) -> None:
    """The trackers (marked as the run ended), the roles, and Ray if this run started it."""
    if tracker is not None:
        tracker.close(MLFLOW_STATUS[status])
    if roles is not None:
        roles.shutdown()
    if owns_ray:
        stop_ray()


def _print_report(report: str | None) -> None:
    if report:
        print(report, flush=True)


def write_error_log(output_dir: Path, error: BaseException) -> str:
    """The driver's traceback and, for a worker's error, the worker's own (error.log)."""
    path = output_dir / "error.log"
    text = "".join(traceback.format_exception(error))
    remote = getattr(error, "remote_traceback", None)
    if remote:
        text += f"\n--- traceback in the worker ---\n{remote}\n"
    path.write_text(text)
    return str(path)


# How a run's end is named in status.json, and in mlflow.
MLFLOW_STATUS = {"finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


def role_nodes(roles: Roles) -> dict[str, list[str]]:
    """Ray node id of each role's workers, by rank (devices map to placement bundles)."""
    nodes = roles.placement.device_nodes()
    return {cluster.role: [nodes.get(cluster.devices.worker_device(rank), "")
                           for rank in range(cluster.world_size)]
            for cluster in (roles.actor_train, roles.actor_infer, roles.reference,
                            roles.critic) if cluster is not None}
