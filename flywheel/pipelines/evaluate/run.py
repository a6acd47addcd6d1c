"""`pipeline_type: evaluate`: score a checkpoint on a dataset, no training (ROLL's
rollout-only evaluation).

The records are read as an RLVR run reads its prompts (`actor_train.data_args`: file,
template, tags, domains), every one of them generated once by `actor_infer` with its
`generating_args` (the model: `pretrain`) and scored by `rewards:` with the limits every
RLVR reward runs under. The numbers are RLVR validation's, computed by the same code
(`RLVRRollout.validate`), logged once at step 0 under `eval/` (`eval/accuracy`: the mean
score, `eval/response_length`, per domain `eval/<tag>/accuracy`) to metrics.jsonl and the
trackers.

The roles start as an RL run's do (`start_roles`): actor_train's worker is started (it
holds the checkpoint and takes no step; starting roles without it is left for later), and
actor_infer generates from the weights it loaded itself from `pretrain` (no weight sync:
an engine told to load dummy weights would evaluate them).
"""

from __future__ import annotations

from pathlib import Path

from flywheel.config.schema import PipelineConfig
from flywheel.pipelines.rlvr.rollout import RLVRRollout, load_prompt_sets
from flywheel.pipelines.roles.roles import actor_train_model, num_slots, start_roles
from flywheel.pipelines.run.launch import close_run
from flywheel.pipelines.run.metric_views import PROGRESS_KEYS
from flywheel.platform.backend_logs import LOG_FOLDER
from flywheel.platform.models.weight_size import weight_bytes
from flywheel.platform.ray_runtime import cluster_address, start_ray
from flywheel.platform.run_status import write_status
from flywheel.platform.tracking import Tracker, default_mlflow_uri


def run_evaluate(cfg: PipelineConfig, output_dir: Path, is_default: bool, model_path: str,
                 tokenizer, config_path: str | None = None) -> Path:
    """The evaluation into `output_dir` (launch.run made it, config.yaml in it)."""
    prompts = load_prompt_sets(cfg, tokenizer)  # refused here, before Ray starts
    write_status(output_dir, "running", max_steps=0, config=config_path)
    owns_ray, roles, tracker, status = False, None, None, "failed"
    try:  # as launch.run starts an RL run's, without the step loop
        log_dir = None if cluster_address(cfg.ray, None) else output_dir / LOG_FOLDER
        owns_ray = start_ray(cfg.ray, num_slots(cfg), None,
                             forward_worker_output=log_dir is None,
                             weight_bytes=weight_bytes(actor_train_model(cfg, model_path),
                                                       cfg.actor_train.model_args.dtype))
        if log_dir is not None:
            log_dir.mkdir(exist_ok=True)
        roles = start_roles(cfg, model_path, total_steps=1, log_dir=log_dir)
        tracker = Tracker.open(output_dir, cfg, output_dir.name, params={},
                               mlflow_uri=default_mlflow_uri(output_dir, is_default),
                               progress_keys=PROGRESS_KEYS)
        rollout = RLVRRollout(cfg, roles, tokenizer, prompts.train, prompts.train,
                              image_encoder=prompts.image_encoder,
                              val_image_encoder=prompts.image_encoder)
        scored = rollout.validate()
        tracker.log(0, {"eval/" + key.removeprefix("val/"): value
                        for key, value in scored.items()})
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        try:
            close_run(tracker, roles, owns_ray, status)
        finally:
            write_status(output_dir, status)
    print(f"done: eval metrics in {output_dir / 'metrics.jsonl'}", flush=True)
    return output_dir
