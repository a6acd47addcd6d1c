"""Registry: names, did-you-mean errors, unknown config keys, and import-path registration
with its allow-list."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from flywheel.envs import (
    FrozenLakeEnv,
    GuessNumberEnv,
    SokobanEnv,
    TextEnv,
    make,
    register,
    register_from_import_path,
    registered_envs,
)


def test_builtin_envs_are_registered_and_built_with_config() -> None:
    assert {"frozen_lake", "sokoban", "guess_number"} <= set(registered_envs())
    env = make("frozen_lake", size=5, is_slippery=True)
    assert isinstance(env, FrozenLakeEnv) and env.size == 5 and env.is_slippery
    assert isinstance(make("sokoban", num_boxes=2), SokobanEnv)
    assert isinstance(make("guess_number", high=7), GuessNumberEnv)


def test_unknown_env_type_suggests_close_names_and_lists_known() -> None:
    with pytest.raises(ValueError) as err:
        make("frozenlake")
    message = str(err.value)
    assert "Did you mean 'frozen_lake'" in message
    assert all(name in message for name in ("frozen_lake", "guess_number", "sokoban", "multiply",
                                            "game:GuessTheNumber-v0"))
    with pytest.raises(ValueError, match="Known env types") as err:
        make("chess")
    assert "Did you mean" not in str(err.value)


def test_unknown_config_key_is_named_with_suggestion() -> None:
    with pytest.raises(TypeError, match=r"'is_slipery'.*'frozen_lake'.*Did you mean 'is_slippery'"):
        make("frozen_lake", is_slipery=True)
    with pytest.raises(TypeError, match="'colour'"):
        make("sokoban", colour="red")


def test_register_rejects_taken_names_and_kwargs_factories(isolated_registry: dict) -> None:
    register("frozen_lake", FrozenLakeEnv)  # same factory again: a no-op
    with pytest.raises(ValueError, match="already registered"):
        register("frozen_lake", SokobanEnv)

    def swallowing_factory(**kwargs) -> TextEnv:
        return FrozenLakeEnv()

    with pytest.raises(TypeError, match=r"\*\*kwargs"):
        register("swallow", swallowing_factory)
    with pytest.raises(ValueError, match="non-empty"):
        register("", FrozenLakeEnv)


def test_factory_must_return_a_text_env(isolated_registry: dict) -> None:
    register("not_an_env", lambda: object())
    with pytest.raises(TypeError, match="not a TextEnv"):
        make("not_an_env")


def test_registered_function_factory_gets_its_keys_checked(isolated_registry: dict) -> None:
    def small_lake(*, size: int = 3) -> TextEnv:
        return FrozenLakeEnv(size=size)

    register("small_lake", small_lake)
    assert make("small_lake", size=2).size == 2
    with pytest.raises(TypeError, match="'p'.*Accepted keys: size"):
        make("small_lake", p=0.5)


USER_MODULE = """
from flywheel.envs import TextEnv


class CoinEnv(TextEnv):
    def __init__(self, *, sides: int = 2) -> None:
        self.sides = sides

    def reset(self, seed=None, options=None):
        return "flip", {}

    def step(self, action_text):
        return "done", 1.0, True, False, {"action_is_valid": True, "success": True}


class NotAnEnv:
    def reset(self, seed=None):
        return "x", {}

    def step(self, action_text):
        return "x", 0.0, True, False, {}
"""


@pytest.fixture
def user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A package `fw_user_envs` with module `games` on sys.path; returns the package name."""
    package = tmp_path / "fw_user_envs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "games.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fw_user_envs"
    for name in [m for m in sys.modules if m.startswith("fw_user_envs")]:
        del sys.modules[name]


def test_import_path_registration_allowed(user_package: str, isolated_registry: dict) -> None:
    cls = register_from_import_path("coin", f"{user_package}.games:CoinEnv", [user_package])
    assert cls.__name__ == "CoinEnv"
    env = make("coin", sides=6)
    assert env.sides == 6 and env.reset(0) == ("flip", {})
    with pytest.raises(TypeError, match="'faces'"):
        make("coin", faces=3)


@pytest.mark.parametrize(
    ("import_path", "allowed", "error", "match"),
    [
        ("os:system", ["fw_user_envs"], ValueError, "not allowed"),
        ("fw_user_envs_evil.games:CoinEnv", ["fw_user_envs"], ValueError, "not allowed"),
        ("fw_user_envs.games:CoinEnv", [], ValueError, "none allowed"),
        ("fw_user_envs.games.CoinEnv", ["fw_user_envs"], ValueError, "package.module:ClassName"),
        ("__import__('os').system('x')", ["fw_user_envs"], ValueError, "package.module"),
        ("fw_user_envs.missing:CoinEnv", ["fw_user_envs"], ImportError, "cannot import"),
        ("fw_user_envs.games:Nope", ["fw_user_envs"], ImportError, "no attribute 'Nope'"),
        ("fw_user_envs.games:NotAnEnv", ["fw_user_envs"], TypeError, "subclass"),
    ],
)
def test_import_path_registration_rejected(
    user_package: str,
    isolated_registry: dict,
    import_path: str,
    allowed: list[str],
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match):
        register_from_import_path("user_env", import_path, allowed)
    assert "user_env" not in registered_envs()


def test_rejected_prefix_is_never_imported(user_package: str, isolated_registry: dict) -> None:
    with pytest.raises(ValueError, match="not allowed"):
        register_from_import_path("x", f"{user_package}.games:CoinEnv", ["fw_other"])
    assert f"{user_package}.games" not in sys.modules


def test_allowed_prefixes_must_not_be_a_bare_string(isolated_registry: dict) -> None:
    with pytest.raises(TypeError, match="sequence"):
        register_from_import_path("x", "fw_user_envs.games:CoinEnv", "fw_user_envs")
