"""ROLL's env_config keys in the terms of the flywheel env that plays the tag.

ROLL's Sokoban (roll/pipeline/agentic/env/sokoban/env.py, on gym-sokoban) takes
`dim_room: [h, w]`, `search_depth` (its level generator's search) and pays gym-sokoban's
-0.1 per step (penalty_for_step), +1 per box on a target and +10 when solved. flywheel's
Sokoban (envs/sokoban.py) takes a square `size`, makes levels by reverse play of its own
and pays +1 / +10 with `step_penalty` per legal move. Without this a converted Sokoban tag
would validate and then fail when its env is built (`size` is the accepted key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flywheel.platform.config.roll_conversion import Conversion

ROLL_SOKOBAN_STEP_PENALTY = -0.1  # gym-sokoban's penalty_for_step, which ROLL keeps


def fit_env_config(env_type: str, config: dict[str, Any], where: str,
                   out: Conversion) -> dict[str, Any]:
    """`config` (a ROLL tag's env_config) for flywheel's env of `env_type`; said."""
    if env_type != "sokoban":
        return config
    config = dict(config)
    room = config.pop("dim_room", None)
    if room is not None:
        if not (isinstance(room, (list, tuple)) and len(room) == 2 and room[0] == room[1]):
            out.missing.append(f"a Sokoban room that is not square ({where}.dim_room = "
                               f"{room!r}; flywheel's Sokoban takes one size)")
        else:
            config["size"] = room[0]
            out.mapped.append(f"{where}.dim_room {list(room)} -> {where}.size {room[0]}")
    if "search_depth" in config:
        out.dropped.append(f"{where}.search_depth: {config.pop('search_depth')!r}: ROLL's "
                           f"level generator's search; flywheel makes solvable levels by "
                           f"reverse play (reverse_steps), so levels differ either way")
    if "step_penalty" not in config:
        config["step_penalty"] = ROLL_SOKOBAN_STEP_PENALTY
        out.mapped.append(f"{where}.step_penalty: {ROLL_SOKOBAN_STEP_PENALTY} written "
                          f"(ROLL's Sokoban pays gym-sokoban's penalty_for_step on every "
                          f"step; flywheel's default is 0)")
    return config
