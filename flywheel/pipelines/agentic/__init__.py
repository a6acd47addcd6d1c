"""Agentic RL: env workers play multi-turn episodes (env_jobs.py) that become trajectories
or per-turn samples (batch.py); rollout.py is what the step loop holds."""
