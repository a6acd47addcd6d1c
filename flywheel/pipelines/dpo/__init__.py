"""Preference learning pipelines: offline DPO on pairs (and the pieces they share)."""
