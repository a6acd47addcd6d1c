"""A reward's scoring process (the child side of time_limit.py).

Started with one argument, the import path of the reward's builder (its `RewardSpec.build`:
this fresh interpreter never saw the driver's `register_reward`). Reads the RewardConfig as
JSON (rebuilt by the config loader's strict conversion), builds
the reward and answers {"ready": true} (or {"error": "..."} if it cannot be built, e.g.
no sandbox), then scores one [prompt, response, reference] JSON list per message until
its input closes. Every frame is JSON (time_limit.py): no pickle either way. It asks the
kernel to kill it when its parent dies, so a reward worker that dies leaves no scorer
behind. Anything the reward prints goes to stderr: stdout carries only the answers.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

from flywheel.platform.config.schema import RewardConfig
from flywheel.workers.rewards.time_limit import read_frame, write_frame

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before the request took effect
            os._exit(1)


def reward_config(data: object) -> RewardConfig:
    """The RewardConfig the parent sent as a dict, checked field by field like a YAML's."""
    import dacite

    from flywheel.platform.config.conversion import normalize

    return dacite.from_dict(RewardConfig, normalize(data, RewardConfig, ("rewards",)),
                            dacite.Config(strict=True))


def sample(data: object) -> tuple[str, str, str]:
    """A [prompt, response, reference] request, or ValueError."""
    if not (isinstance(data, list) and len(data) == 3 and all(isinstance(x, str) for x in data)):
        raise ValueError("a request must be a JSON list [prompt, response, reference] of strings")
    return data[0], data[1], data[2]


def main() -> None:
    die_with_parent()
    stdin, answers = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints go to stderr
    from flywheel.workers.rewards.registry import reward_fn

    try:
        cfg = reward_config(json.loads(read_frame(stdin) or b"null"))
        score = reward_fn(cfg.reward_type, cfg, build=sys.argv[1])
    except Exception as e:  # sent to the worker, which raises it as its own start error
        write_frame(answers, json.dumps({"error": str(e).splitlines()[0]}).encode())
        return
    write_frame(answers, json.dumps({"ready": True}).encode())
    while (request := read_frame(stdin)) is not None:
        try:
            result = score(*sample(json.loads(request)))
            answer = {"score": result.score, "metadata": result.metadata}
        except Exception as e:
            answer = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
        write_frame(answers, json.dumps(answer).encode())


if __name__ == "__main__":
    main()
