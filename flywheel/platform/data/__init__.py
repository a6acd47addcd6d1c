"""Built-in datasets that need no network: generated locally and deterministically.

Each dataset is one module producing JSONL records `{"id", "prompt", "answer"}` that the
pipelines read like any user dataset. A new dataset is one new file here.
"""
