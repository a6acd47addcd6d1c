"""Supervised fine-tuning: its own loop (train.py) on the update path every train backend
shares, run by `platform run` for `pipeline_type: sft` (run.py)."""
