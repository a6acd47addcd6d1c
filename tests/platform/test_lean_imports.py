"""Worker processes import transformers' models without scikit-learn (flywheel/lean_imports.py)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import flywheel
from transformers import AutoModelForCausalLM
from transformers.generation import candidate_generator
skipped = "sklearn" not in sys.modules and "pandas" not in sys.modules
import sklearn.metrics  # user code may still use it
print(skipped, candidate_generator.is_sklearn_available())
"""


def test_transformers_loads_without_sklearn_and_sklearn_still_imports():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True, timeout=300).stdout.split()
    assert out == ["True", "False"], out
