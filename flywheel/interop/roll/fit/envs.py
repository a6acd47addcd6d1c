"""ROLL's env_config keys in the terms of the flywheel env that plays the tag.

ROLL's Sokoban (roll/pipeline/agentic/env/sokoban/env.py, on gym-sokoban) takes
`dim_room: [h, w]`, `search_depth` (its level generator's search) and pays gym-sokoban's
-0.1 per step (penalty_for_step), +1 per box on a target and +10 when solved. flywheel's
Sokoban (envs/sokoban.py) takes a square `size`, makes levels by reverse play of its own
and pays +1 / +10 with `step_penalty` per legal move. Without this a converted Sokoban tag
would validate and then fail when its env is built (`size` is the accepted key).

ROLL's GEM math and QA envs (`roll_math`, `roll_qa`) load a hub dataset by `dataset_name`
(with its `split` and the column names `question_key` / `answer_key`); flywheel's
(envs/question_envs.py) read a local JSONL file instead, and the converter points them at
the files examples/data/gem_local_data.py ships (LOCAL_DATA), saying so: the hub is
unreachable here, so the questions differ from ROLL's, the env's behaviour does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

ROLL_SOKOBAN_STEP_PENALTY = -0.1  # gym-sokoban's penalty_for_step, which ROLL keeps
# Local data of ROLL's GEM question envs, relative to the flywheel checkout (as the shipped
# examples' data files are).
LOCAL_DATA = {"roll_math": "examples/data/gem_math.jsonl",
              "roll_qa": "examples/data/gem_qa.jsonl"}
# env_config keys that address the hub dataset only -> why they go.
HUB_DATASET_KEYS = {
    "split": "the local file is one split",
    "question_key": "a column of the hub dataset; the local file's is 'question'",
    "answer_key": "a column of the hub dataset; the local file's is 'answer'",
    "seed": "GEM's shuffle of the hub dataset; flywheel picks each episode's question "
            "from the episode's seed",
    "load_from_cache_file": "the datasets library's cache of the hub dataset",
}


def fit_env_config(env_type: str, config: dict[str, Any], where: str,
                   out: Conversion) -> dict[str, Any]:
    """`config` (a ROLL tag's env_config) for flywheel's env of `env_type`; said."""
    if env_type in LOCAL_DATA:
        return _local_data(env_type, config, where, out)
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


def _local_data(env_type: str, config: dict[str, Any], where: str,
                out: Conversion) -> dict[str, Any]:
    config = dict(config)
    name = config.pop("dataset_name", None)
    for key, why in HUB_DATASET_KEYS.items():
        if key in config:
            out.dropped.append(f"{where}.{key}: {config.pop(key)!r}: {why}")
    config["data_file"] = LOCAL_DATA[env_type]
    out.mapped.append(f"{where}.dataset_name {name!r} -> {where}.data_file "
                      f"{LOCAL_DATA[env_type]}: the hub dataset is replaced by local data "
                      f"(the hub is unreachable here; examples/data/gem_local_data.py "
                      f"makes it), so the questions differ from ROLL's")
    return config
