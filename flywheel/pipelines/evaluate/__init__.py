"""Rollout-only evaluation (`pipeline_type: evaluate`): generate and score a dataset with a
checkpoint, no training (run.py). Added through the pipeline-kinds catalog
(flywheel/config/kinds.py): this folder and one catalog entry."""
