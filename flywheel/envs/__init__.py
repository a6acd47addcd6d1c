"""Text environments on the gymnasium API, and the env manager that turns multi-turn
episodes into token sequences for training.

No Ray and no imports from the rest of flywheel: pipelines and workers import this package,
never the other way round.

Adding an env: write one file with a `TextEnv` subclass (base.py states the contract:
text observations, action parsing, `format_penalty`, info keys `action_is_valid` and
`success`), then add one `register(...)` line below. A user's own env, outside this
package, is declared in YAML by import path and registered with
`register_from_import_path(name, "package.module:ClassName", allowed_prefixes)`.
"""

from flywheel.envs.base import (
    DEFAULT_ACTION_PATTERN,
    DEFAULT_FORMAT_PENALTY,
    StepResult,
    TextEnv,
    compile_action_pattern,
    extract_action,
    parse_action,
)
from flywheel.envs.chat_turns import ChatTurns
from flywheel.envs.env_manager import (
    EnvManager,
    EnvManagerConfig,
    GenerateFn,
    Tokenizer,
    group_seed,
)
from flywheel.envs.frozen_lake import FrozenLakeEnv
from flywheel.envs.gem_adapter import GEM_ENVS, GemEnv
from flywheel.envs.guess_number import GuessNumberEnv
from flywheel.envs.multiply import MultiplyEnv
from flywheel.envs.question_envs import QuestionEnv, roll_math, roll_qa
from flywheel.envs.registry import (
    check_env_config,
    make,
    register,
    register_from_import_path,
    registered_envs,
)
from flywheel.envs.sokoban import SokobanEnv
from flywheel.envs.trajectory import (
    StepSample,
    Trajectory,
    aggregate_metrics,
    discounted_returns,
    episode_metrics,
    to_step_samples,
)

register("frozen_lake", FrozenLakeEnv)
register("sokoban", SokobanEnv)
register("guess_number", GuessNumberEnv)
register("multiply", MultiplyEnv)
register("roll_math", roll_math)  # ROLL's GEM math and QA envs, on local data files
register("roll_qa", roll_qa)
for _name, _factory in GEM_ENVS.items():  # GEM (gem-llm) envs by their GEM ids
    register(_name, _factory)

__all__ = [
    "DEFAULT_ACTION_PATTERN",
    "DEFAULT_FORMAT_PENALTY",
    "ChatTurns",
    "EnvManager",
    "EnvManagerConfig",
    "FrozenLakeEnv",
    "GemEnv",
    "GenerateFn",
    "GuessNumberEnv",
    "MultiplyEnv",
    "QuestionEnv",
    "SokobanEnv",
    "StepResult",
    "StepSample",
    "TextEnv",
    "Tokenizer",
    "Trajectory",
    "aggregate_metrics",
    "check_env_config",
    "compile_action_pattern",
    "discounted_returns",
    "episode_metrics",
    "extract_action",
    "group_seed",
    "make",
    "parse_action",
    "register",
    "register_from_import_path",
    "registered_envs",
    "to_step_samples",
]
