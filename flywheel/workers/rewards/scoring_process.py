"""A reward's scoring process (the child side of time_limit.py).

Started with one argument, the import path of the reward's builder (its `RewardSpec.build`:
this fresh interpreter never saw the driver's `register_reward`). Reads the RewardConfig as
JSON (rebuilt by the config loader's strict conversion), builds the reward and answers
{"ready": true, "batched": ...} (or {"error": "..."} if it cannot be built, e.g. no
sandbox), then scores one request per message until its input closes: a list of samples,
each [prompt, response, reference, record], answered with one result per sample
({"results": [...]}). A reward that is not batched gets one sample a request
(time_limit.py); a batched one (registry.SampleReward) the samples of a batch. Every frame
is JSON (time_limit.py): no pickle either way. It asks the kernel to kill it when its
parent dies, so a reward worker that dies leaves no scorer behind. Anything the reward
prints goes to stderr: stdout carries only the answers.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

from flywheel.config.schema import RewardConfig
from flywheel.workers.rewards.registry import Sample
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


def samples(data: object) -> list[Sample]:
    """A request's samples: a list of [prompt, response, reference, record], or ValueError."""
    def one(item: object) -> Sample:
        if not (isinstance(item, list) and len(item) == 4
                and all(isinstance(x, str) for x in item[:3]) and isinstance(item[3], dict)):
            raise ValueError("a sample must be a JSON list [prompt, response, reference, "
                             "record] of three strings and an object")
        return Sample(*item)

    if not isinstance(data, list) or not data:
        raise ValueError("a request must be a non-empty JSON list of samples")
    return [one(item) for item in data]


def main() -> None:
    die_with_parent()
    stdin, answers = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints go to stderr
    from flywheel.workers.rewards.registry import sample_reward

    try:
        cfg = reward_config(json.loads(read_frame(stdin) or b"null"))
        reward = sample_reward(cfg.reward_type, cfg, build=sys.argv[1])
    except Exception as e:  # sent to the worker, which raises it as its own start error
        write_frame(answers, json.dumps({"error": str(e).splitlines()[0]}).encode())
        return
    write_frame(answers, json.dumps({"ready": True, "batched": reward.batched}).encode())
    while (request := read_frame(stdin)) is not None:
        try:
            asked = samples(json.loads(request))
            results = reward.score(asked)
            if len(results) != len(asked):
                raise ValueError(f"{len(results)} results for {len(asked)} samples")
            answer = json.dumps({"results": [{"score": float(r.score), "metadata": r.metadata}
                                             for r in results]})
        except Exception as e:
            answer = json.dumps({"error": f"{type(e).__name__}: {e}".splitlines()[0]})
        write_frame(answers, answer.encode())


if __name__ == "__main__":
    main()
