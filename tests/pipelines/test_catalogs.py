"""The catalogs the config checks read (platform/config/catalogs.py): every entry names an
implementation that exists, reading them imports no torch, Ray or backend package, and the
checks cannot run without them."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys

import pytest

from flywheel.algorithms import get_policy_loss
from flywheel.config import loader
from flywheel.config.checks import config as checks
from flywheel.config.checks import environment as environment_checks
from flywheel.pipelines.config import CATALOGS, load_config_dict
from flywheel.platform.config.catalogs import Catalog, import_object
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.rewards.registry import REWARDS
from flywheel.workers.strategies.registry import STRATEGIES


def test_every_entry_names_an_implementation_that_exists():
    for name, spec in STRATEGIES.items():  # located, not imported (vllm takes seconds)
        assert importlib.util.find_spec(spec.module) is not None, name
    for name, spec in REWARDS.items():
        assert callable(import_object(spec.build)), name
    for name in CATALOGS.losses:
        assert callable(get_policy_loss(name)), name


def test_loading_and_checking_a_config_imports_no_torch_ray_or_backend():
    code = ("import sys\n"
            "from flywheel.pipelines.config import check_environment, load_config\n"
            "cfg = load_config('examples/rlvr_sync.yaml')\n"
            "heavy = {'torch', 'ray', 'transformers', 'vllm', 'sglang', 'deepspeed', 'megatron'}\n"
            "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_the_checks_take_the_catalogs_as_a_required_argument():
    """No rule can be skipped because some module was not imported first."""
    for function in (loader.load_config, loader.load_config_dict, checks.check_config,
                     environment_checks.check_environment):
        parameter = inspect.signature(function).parameters["catalogs"]
        assert parameter.default is inspect.Parameter.empty, function.__name__


def test_a_catalog_is_a_view_of_its_owner_and_names_what_it_knows():
    owned = {"alpha": 1}
    catalog = Catalog("widget", owned)
    owned["beta"] = 2  # registered after the view was made
    assert catalog.names() == ["alpha", "beta"] and catalog.get("beta", "w") == 2
    with pytest.raises(ConfigError) as info:
        catalog.get("alpah", "x.widget", hint=" (or write your own)")
    assert str(info.value) == ("x.widget: unknown widget 'alpah' (did you mean 'alpha'?); "
                               "known: alpha, beta (or write your own)")


def test_template_and_env_names_come_from_their_catalogs():
    with pytest.raises(ConfigError, match="unknown template 'qwen4' .*known: native, none"):
        load_config_dict({"actor_train": {"data_args": {"template": "qwen4"}}})
    with pytest.raises(ConfigError, match="unknown env_type 'frozen_lak' .*'frozen_lake'"):
        load_config_dict({"pipeline_type": "agentic", "custom_envs": {
            "FrozenLake": {"env_type": "frozen_lak"}}})
