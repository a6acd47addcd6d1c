"""Data a run reads: prompt files and their encoding (prompt_data.py), chat templates by
name (prompt_templates.py), the built-in arithmetic task (arithmetic_data.py)."""
