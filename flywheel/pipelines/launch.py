"""`platform run`: from a validated config to a finished run, and a clean shutdown.

Order matters: the output directory and resolved config are written first (so a failed
run still says what it was), built-in models are built in the driver before any worker
starts (so workers never race to build them), then Ray, roles, tracking, the loop.
Whatever happens, roles, Ray and the trackers are closed on the way out, and the run
leaves `status.json` (finished / failed / interrupted, and where each role ran) and its
plots (`plots.png`, also redrawn at every checkpoint) for `platform runs` and a reader.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import yaml

from flywheel.pipelines.agentic import AgenticPipeline
from flywheel.pipelines.agentic_rollout import start_env_workers
from flywheel.pipelines.env_catalog import ENV_CATALOG
from flywheel.pipelines.prompt_data import load_prompts
from flywheel.pipelines.rlvr import RLVRPipeline
from flywheel.pipelines.roles import Roles, num_slots, start_roles
from flywheel.pipelines.sample_texts import SampleTextLog
from flywheel.platform.checkpoint import resolve_checkpoint
from flywheel.platform.config import config_to_dict
from flywheel.platform.config.agentic_checks import check_env_names
from flywheel.platform.config.schema import PipelineConfig
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.platform.plots import refresh_run_plots
from flywheel.platform.ray_runtime import start_ray, stop_ray
from flywheel.platform.run_status import write_status
from flywheel.platform.tracking import Tracker, default_mlflow_uri
from flywheel.workers.strategies.hf_model import load_tokenizer

log = logging.getLogger(__name__)


def output_dir_for(cfg: PipelineConfig) -> tuple[Path, bool]:
    """(directory, whether it is the default runs/<exp_name>/<timestamp> layout)."""
    if cfg.output_dir:
        return Path(cfg.output_dir), False
    return Path("runs") / cfg.exp_name / time.strftime("%Y%m%d-%H%M%S"), True


def run(cfg: PipelineConfig, config_path: str | None = None,
        address: str | None = None) -> Path:
    check_env_names(cfg, ENV_CATALOG)  # a loader without the env registry skipped them
    output_dir, is_default = output_dir_for(cfg)
    output_dir.mkdir(parents=True, exist_ok=True)
    config_dict = config_to_dict(cfg)
    (output_dir / "config.yaml").write_text(yaml.safe_dump(config_dict, sort_keys=False))
    print(f"run directory: {output_dir}", flush=True)

    model_path = resolve_pretrain(cfg.pretrain)
    tokenizer = load_tokenizer(model_path)
    rlvr = cfg.pipeline_type == "rlvr"  # agentic runs play envs instead of reading prompts
    train_args = cfg.actor_train.data_args
    train_records = (load_prompts(train_args, "actor_train", tokenizer, cfg.prompt_length).records
                     if rlvr else [])
    val_records = []
    if rlvr and cfg.validation and cfg.eval_steps:  # encoded as actor_train's prompts are
        val_args = dataclasses.replace(
            cfg.validation.data_args, template=train_args.template,
            system_prompt=train_args.system_prompt,
            chat_template_kwargs=train_args.chat_template_kwargs)
        val_records = load_prompts(val_args, "validation", tokenizer, cfg.prompt_length).records

    write_status(output_dir, "running", max_steps=cfg.max_steps, config=config_path)
    owns_ray, roles, tracker = False, None, None
    status = "failed"
    try:
        owns_ray = start_ray(cfg.ray, num_slots(cfg), address)
        roles = start_roles(cfg, model_path, total_steps=cfg.max_steps)
        write_status(output_dir, "running", nodes=role_nodes(roles))
        tracker = Tracker.open(output_dir, cfg, output_dir.name, params=config_dict,
                               mlflow_uri=default_mlflow_uri(output_dir, is_default))
        if rlvr:
            pipeline = RLVRPipeline(cfg, roles, tokenizer, train_records, val_records, tracker,
                                    output_dir)
        else:
            env_workers = start_env_workers(cfg, model_path, roles.actor_infer)
            roles.all.append(env_workers)  # shut down with the roles
            pipeline = AgenticPipeline.create(cfg, roles, tokenizer, tracker, output_dir,
                                              env_workers)
        pipeline.ledger.on_trained = SampleTextLog(tracker, tokenizer).trained
        if cfg.resume_from_checkpoint:
            checkpoint = resolve_checkpoint(cfg.resume_from_checkpoint)
            pipeline.load_checkpoint(checkpoint)
            print(f"resumed from {checkpoint} at step {pipeline.step}", flush=True)
        pipeline.run()
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        try:
            if tracker is not None:
                tracker.close(MLFLOW_STATUS[status])
            if roles is not None:
                roles.shutdown()
            if owns_ray:
                stop_ray()
        finally:
            write_status(output_dir, status)
            refresh_run_plots(output_dir)
    print(f"done: metrics in {output_dir / 'metrics.jsonl'}, plots in "
          f"{output_dir / 'plots.png'}", flush=True)
    return output_dir


# How a run's end is named in status.json, and in mlflow.
MLFLOW_STATUS = {"finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


def role_nodes(roles: Roles) -> dict[str, list[str]]:
    """Ray node id of each role's workers, by rank (devices map to placement bundles)."""
    nodes = roles.placement.device_nodes()
    return {cluster.role: [nodes.get(cluster.devices.worker_device(rank), "")
                           for rank in range(cluster.world_size)]
            for cluster in (roles.actor_train, roles.actor_infer, roles.reference,
                            roles.critic) if cluster is not None}
