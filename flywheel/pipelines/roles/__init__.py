"""The roles a run starts (roles.py) and the typed handles the loop calls (handles.py)."""
