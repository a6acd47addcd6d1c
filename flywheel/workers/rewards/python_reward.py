"""`reward_type: python`: a reward function of the user's own, named by
`reward_import_path: "package.module:function"`.

Built in the reward's scoring process (scoring_process.py), never in the reward worker or
the driver: the module is imported there with importlib (it must be importable from the
working directory or PYTHONPATH; the config checks put it under a prefix of the top-level
`import_allowlist` before any worker starts), and every call runs under the per-sample
time limit (time_limit.py) like any reward. Its form (flywheel's, verl's or TRL's batched
one) and the meaning of its answers are user_function.py's.

User code is untrusted, so no failure of it stops the run. An exception (or SystemExit) in
the function, or an answer that is not a score, scores the sample 0 and marks it
`fn_error` (counted in reward/fn_errors; for TRL's batched form the whole batch, since one
call answers for all of it). The first such failure of each scoring process carries its
traceback or reason in `fn_traceback`; the reward worker writes the first one it sees to
its log and the driver to the console (time_limit.py, rlvr/generation.py), so a broken
function is reported once, not once per sample. A hang is the time limit's: the sample
(the batch, for TRL's form) scores 0 and counts in reward/timed_out. A module that cannot
be imported, or a function with no form, is refused when the reward starts, in one line.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path

from flywheel.config.schema import RewardConfig
from flywheel.platform.user_code import import_user_object
from flywheel.workers.rewards import user_function as forms
from flywheel.workers.rewards.registry import Sample, SampleReward
from flywheel.workers.rewards.result import RewardResult
from flywheel.workers.rewards.user_function import NotAScore, UserFunction, coerce, user_function

TRACEBACK_CHARS = 4000  # of a failure's report (the end of a traceback, where its cause is)
# flywheel's own frames, left out of a traceback: it starts at the user's function
OWN_FILES = frozenset(str(Path(m).resolve()) for m in (__file__, forms.__file__))


def build(cfg: RewardConfig) -> SampleReward:
    path = cfg.reward_import_path
    if not path:
        raise ValueError("reward_type python needs reward_import_path: "
                         "'package.module:function'")
    try:
        fn = import_user_object(path)
    except Exception as e:  # the module's own import may raise anything
        raise ValueError(f"reward_import_path {path!r} cannot be imported: "
                         f"{type(e).__name__}: {e}") from None
    scorer = UserScorer(user_function(fn, path), path)
    return SampleReward(scorer.score, batched=scorer.user.batched)


@dataclass
class UserScorer:
    """Calls the user's function on samples and turns whatever happens into results."""

    user: UserFunction
    path: str
    reported: bool = False  # this process has sent a failure's report (fn_traceback)

    def score(self, samples: list[Sample]) -> list[RewardResult]:
        if self.user.batched:
            try:
                answers = self.user.call_batch(samples)
            except NotAScore as e:
                return [self._failed(f"returned {e}") for _ in samples]
            except MemoryError:  # over memory_mb: scoring_process.py counts the request
                raise
            except (Exception, SystemExit) as e:
                return [self._failed(raised(e)) for _ in samples]
            return [self._result(answer) for answer in answers]
        results = []
        for sample in samples:
            try:
                answer = self.user.call_one(sample)
            except MemoryError:
                raise
            except (Exception, SystemExit) as e:
                results.append(self._failed(raised(e)))
            else:
                results.append(self._result(answer))
        return results

    def _result(self, answer: object) -> RewardResult:
        try:
            return coerce(answer)
        except NotAScore as e:
            return self._failed(f"returned {e}")
        except Exception as e:  # noqa: BLE001 (reading a user's object ran its code)
            return self._failed(f"returned an answer that could not be read "
                                f"({type(e).__name__}: {str(e)[:200]})")

    def _failed(self, what: str) -> RewardResult:
        """Score 0, counted; the process's first failure carries its report."""
        metadata: dict = {"fn_error": True, "fn_unscored": False}
        if not self.reported:
            self.reported = True
            metadata["fn_traceback"] = (f"reward function {self.path} {what.rstrip()}\n(the "
                                        f"sample scores 0 and counts in reward/fn_errors; "
                                        f"later failures of this reward are only counted)")
        return RewardResult(0.0, metadata)


def raised(error: BaseException) -> str:
    """What a report says of an exception: its traceback from the user's function on."""
    tb = error.__traceback__
    while tb is not None and str(Path(tb.tb_frame.f_code.co_filename).resolve()) in OWN_FILES:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(error), error, tb))
    return "raised:\n" + text[-TRACEBACK_CHARS:]
