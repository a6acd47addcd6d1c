"""Orchestration: `platform run` (launch.py), `platform ci` (regression.py), and the sample
texts a run shows its trackers (sample_texts.py)."""
