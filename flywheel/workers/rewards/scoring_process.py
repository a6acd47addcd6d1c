"""A reward's scoring process (the child side of time_limit.py).

Started with one argument, the import path of the reward's builder (its `RewardSpec.build`:
this fresh interpreter never saw the driver's `register_reward`). Reads the RewardConfig as
JSON (rebuilt by the config loader's strict conversion), builds the reward and answers
{"ready": true, "batched": ...} (or {"error": "..."} if it cannot be built, e.g. no
sandbox), then scores one request per message until its input closes: a list of samples,
each [prompt, response, reference, record], answered with one result per sample
({"results": [...]}). A reward that is not batched gets one sample a request
(time_limit.py); a batched one (registry.SampleReward) the samples of a batch. Every frame
is JSON (time_limit.py): no pickle either way. It first splits into a supervisor and the
scorer (process_tree.py): the scorer runs under the address-space limit (a second
argument, MiB), and every process below it dies with it or with the reward worker, `setsid`
ones included. A request that runs out of that memory (MemoryError) scores its samples 0
with `crashed` and `out_of_memory` (reward/out_of_memory). Anything the reward prints goes
to stderr: stdout carries only the answers.
"""

from __future__ import annotations

import json
import os
import sys

from flywheel.config.schema import RewardConfig
from flywheel.workers.process_tree import supervised
from flywheel.workers.rewards.registry import Sample
from flywheel.workers.rewards.time_limit import read_frame, write_frame

# A request that ran out of the address-space limit (reward_limits.py): each of its samples
OUT_OF_MEMORY = {"crashed": True, "out_of_memory": True}


def reward_config(data: object) -> RewardConfig:
    """The RewardConfig the parent sent as a dict, checked field by field like a YAML's."""
    import dacite

    from flywheel.platform.config.conversion import normalize

    return dacite.from_dict(RewardConfig, normalize(data, RewardConfig, ("rewards",)),
                            dacite.Config(strict=True))


def samples(data: object) -> list[Sample]:
    """A request's samples: a list of [prompt, response, reference, record, messages], or
    ValueError (messages: a list of message objects, or null)."""
    def one(item: object) -> Sample:
        if not (isinstance(item, list) and len(item) in (4, 5)
                and all(isinstance(x, str) for x in item[:3]) and isinstance(item[3], dict)
                and (len(item) == 4 or item[4] is None or (
                    isinstance(item[4], list) and all(isinstance(m, dict) for m in item[4])))):
            raise ValueError("a sample must be a JSON list [prompt, response, reference, "
                             "record, messages] of three strings, an object and a list of "
                             "message objects (or null)")
        return Sample(*item)

    if not isinstance(data, list) or not data:
        raise ValueError("a request must be a non-empty JSON list of samples")
    return [one(item) for item in data]


def out_of_memory(cfg: RewardConfig, samples: int) -> str:
    """The report of a scoring process's first MemoryError (the console gets it once)."""
    return (f"reward '{cfg.reward_type}' ran out of memory (its address-space limit, "
            f"rewards.*.memory_mb, is {sys.argv[2] if len(sys.argv) > 2 else 'unset'} MiB) "
            f"on a request of {samples} sample(s): they score 0 and count in "
            f"reward/out_of_memory; later ones are only counted")


def main() -> None:
    # argv: the builder's import path, then the address-space limit in MiB (none: no limit)
    supervised(int(sys.argv[2]) if len(sys.argv) > 2 else None)
    stdin, answers = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints go to stderr
    from flywheel.workers.rewards.registry import sample_reward

    try:
        cfg = reward_config(json.loads(read_frame(stdin) or b"null"))
        reward = sample_reward(cfg.reward_type, cfg, build=sys.argv[1])
    except Exception as e:  # sent to the worker, which raises it as its own start error
        why = (str(e) or type(e).__name__).splitlines()[0]  # a MemoryError has no message
        write_frame(answers, json.dumps({"error": why}).encode())
        return
    write_frame(answers, json.dumps({"ready": True, "batched": reward.batched}).encode())
    said = False  # this process reported its first MemoryError
    while (request := read_frame(stdin)) is not None:
        asked: list[Sample] = []
        try:
            asked = samples(json.loads(request))
            results = reward.score(asked)
            if len(results) != len(asked):
                raise ValueError(f"{len(results)} results for {len(asked)} samples")
            answer = json.dumps({"results": [{"score": float(r.score), "metadata": r.metadata}
                                             for r in results]})
        except MemoryError:  # over memory_mb: the samples' failure, counted, not the run's
            report, said = {} if said else {"fn_traceback": out_of_memory(cfg, len(asked))}, True
            answer = json.dumps({"results": [{"score": 0.0,
                                              "metadata": {**OUT_OF_MEMORY, **report}}
                                             for _ in asked]})
        except Exception as e:
            answer = json.dumps({"error": f"{type(e).__name__}: {e}".splitlines()[0]})
        write_frame(answers, answer.encode())


if __name__ == "__main__":
    main()
