"""Per-topic fitting of a converted ROLL file: one module per topic, each called by
`convert.py` or `defaults.py`, each reporting what it changed in the `Conversion`."""
