"""Pipelines: RLVR and agentic loops, and the rollout machinery they share."""
