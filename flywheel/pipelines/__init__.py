"""Pipelines, one folder a concern:

loop/     the RL step loop, written once, and what it drives: the prefetch generator, the
          replay buffer, the async window, weight sync, the phase switch, the ledger
rlvr/     the RLVR rollout (prompts → responses → verifier rewards)
agentic/  the agentic rollout (env workers → episodes)
sft/      supervised fine-tuning, its own loop on the shared update path
data/     prompt files, chat templates, the built-in arithmetic task
roles/    starting the roles, and the typed handles the loop calls
run/      `platform run` (launch.py, which picks a rollout from its table) and `platform ci`
config.py configs as the project loads them, every catalog handed to the checks
"""
