"""RLVR: prompts → groups of sampled responses → verifier rewards (rollout.py), generated in
chunks and scored as they finish (generation.py), in domain order (domain_mix.py)."""
