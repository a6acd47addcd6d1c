"""The latency-only backends (workers/strategies/latency_sim.py) read the tokenizer's size
and eos id without transformers: most of the suite's runs start them, and transformers'
AutoTokenizer would cost each sim inference worker seconds of CPU at every start."""

from __future__ import annotations

import subprocess
import sys

from flywheel.workers.strategies.hf_model import load_tokenizer
from flywheel.workers.strategies.latency_sim import vocabulary

PROBE = """
import sys
from flywheel.config.schema import StrategyArgs, WorkerConfig
import flywheel.workers.infer_worker
from flywheel.workers.strategies.latency_sim import SimInferStrategy
config = WorkerConfig(strategy_args=StrategyArgs(strategy_name="sim_infer"))
SimInferStrategy(sys.argv[1], config, 0)
print("transformers" in sys.modules)
"""


def test_vocabulary_is_the_tokenizers_size_and_eos(tiny_model_path):
    tokenizer = load_tokenizer(tiny_model_path)
    assert vocabulary(tiny_model_path) == (len(tokenizer), tokenizer.eos_token_id)


def test_a_sim_inference_worker_starts_without_transformers(tiny_model_path):
    out = subprocess.run([sys.executable, "-c", PROBE, tiny_model_path], capture_output=True,
                         text=True, check=True, timeout=300).stdout.split()
    assert out == ["False"], out
