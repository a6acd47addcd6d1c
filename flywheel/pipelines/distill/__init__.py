"""Distillation pipelines: on-policy distillation (teachers scoring an RLVR run's sampled
tokens: teachers.py, teacher_scoring.py) on the step loop."""
