"""Keys that act only under a condition: `table.py` lists each with why, `rule.py` is the
shape of a row, `check.py` refuses a written key whose condition is off."""
