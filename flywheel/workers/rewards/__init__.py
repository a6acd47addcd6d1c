"""Rewards: `score(prompt, response, reference) -> RewardResult`, chosen by `reward_type`.

Rule rewards run inside the reward worker; anything that executes model output (code
sandboxes) must run in a subprocess, never in the worker's own process. To add a reward:
one file here with a function of that signature, one line in `REWARDS` (registry.py).
"""
