"""Test doubles for the env tests, handed out as fixtures (test files import nothing from
here): a char-level tokenizer, a scripted policy and a tiny env that echoes its seed.

The tokenizer has one multi-character token (EOS = "<eos>") that `encode` never produces,
so a response ending in EOS cannot survive a decode/encode round trip: if the env manager
re-tokenised model output, the EOS id would vanish and the tests would see it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from flywheel.envs import TextEnv, registry

EOS = 1_000_000


class CharTokenizer:
    EOS = EOS

    def encode(self, text: str) -> list[int]:
        return [ord(ch) for ch in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join("<eos>" if i == EOS else chr(i) for i in ids)


def logprob_of(position: int, token: int) -> float:
    """A distinct, deterministic fake logprob per generated token."""
    return -((token % 13) + 1) / 10 - position / 1000


class ScriptedPolicy:
    """generate_fn double: `reply(prompt_text)` decides the text; the ids are the char ids
    plus EOS, the logprobs `logprob_of`. Records every call."""

    logprob_of = staticmethod(logprob_of)

    def __init__(self, reply: Callable[[str], str], tokenizer: CharTokenizer) -> None:
        self.reply = reply
        self.tokenizer = tokenizer
        self.calls: list[tuple[list[list[int]], int]] = []

    def __call__(
        self, prompts: list[list[int]], max_tokens: int
    ) -> list[tuple[list[int], list[float]]]:
        self.calls.append(([list(p) for p in prompts], max_tokens))
        outputs = []
        for prompt in prompts:
            ids = self.tokenizer.encode(self.reply(self.tokenizer.decode(prompt))) + [EOS]
            ids = ids[:max_tokens]
            outputs.append((ids, [logprob_of(i, t) for i, t in enumerate(ids)]))
        return outputs


class SeedEchoEnv(TextEnv):
    """Observation names the seed; 'win' terminates with success, 'go' earns 0.5."""

    def __init__(self, *, win_reward: float = 1.0) -> None:
        self.win_reward = win_reward
        self.seed_seen: int | None = None

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        self.seed_seen = seed
        return f"seed={seed}", {}

    def step(self, action_text: str):
        if "win" in action_text:
            return "won", self.win_reward, True, False, {"action_is_valid": True, "success": True}
        valid = "go" in action_text
        return (
            "again",
            0.5 if valid else -0.1,
            False,
            False,
            {
                "action_is_valid": valid,
                "success": False,
            },
        )


@pytest.fixture
def tokenizer() -> CharTokenizer:
    return CharTokenizer()


@pytest.fixture
def make_policy(tokenizer: CharTokenizer) -> Callable[[Callable[[str], str]], ScriptedPolicy]:
    return lambda reply: ScriptedPolicy(reply, tokenizer)


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A copy of the registry, so tests can register names without leaking them."""
    copy = dict(registry._REGISTRY)
    monkeypatch.setattr(registry, "_REGISTRY", copy)
    return copy


@pytest.fixture
def seed_echo_env(isolated_registry: dict) -> str:
    """Registers SeedEchoEnv as "seed_echo" (in the isolated registry); returns the name."""
    registry.register("seed_echo", SeedEchoEnv)
    return "seed_echo"
