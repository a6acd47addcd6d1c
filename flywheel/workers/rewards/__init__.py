"""Rewards: `score(prompt, response, reference) -> RewardResult`, chosen by `reward_type`.

All three are strings: `prompt` is the text the policy saw (its prompt ids after the chat
template, decoded with special tokens skipped; pipelines/data/prompt_data.py `reward_prompt`
says why), also when the record's prompt is a list of chat messages.

Rule rewards run inside the reward worker; anything that executes model output (code
sandboxes) must run in a subprocess, never in the worker's own process. To add a reward:
one file here with a function of that signature, one line in `REWARDS` (registry.py).
"""
