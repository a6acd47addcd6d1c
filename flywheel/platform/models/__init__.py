"""Built-in models that need no hub: a tiny Qwen2 with a char-level tokenizer, built locally.

`builtin.resolve_pretrain("builtin://NAME")` is the entry point the workers call on a config's
`pretrain`; it returns a local HF checkpoint directory (built once, cached). The pieces:
`char_tokenizer.py` (vocabulary), `tiny_qwen2.py` (architecture, deterministic init),
`catalog.py` (the names), `builtin.py` (the cache; the warm-started models ship as
`shipped/<name>/`, each with a warm_start.json saying how it was made), `sources.py` (GGUF
and packaged models).
A new built-in model is one entry in `catalog.BUILTIN_MODELS`, or from above platform one
`register_builtin_model` call.
"""
