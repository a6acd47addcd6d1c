"""code_sandbox: run the response's program against the record's tests, in a sandbox.

The program is the response's last fenced code block (```python ... ```; a bare fence is
Python). The reference is JSON in the APPS/TACO stdin/stdout shape,
`{"inputs": ["1 2\\n", ...], "outputs": ["3\\n", ...]}`: test case i feeds inputs[i] on
stdin and expects outputs[i] on stdout. Each case runs in its own fresh sandbox
(flywheel/sandbox/bwrap.py) with the limits of `RewardConfig.code_sandbox`. Output matches when the
whitespace-separated tokens are equal, numbers within 1e-6 (APPS's lenient comparison).

Score: the fraction of cases passed, or 1/0 for all-or-nothing (`scoring`). Metadata per
sample: `passed`, `failed` (ran, wrong output), `timed_out_tests` (killed at the wall-clock
limit), `crashed` (nonzero exit: an exception, a limit's signal), `parsed` (a program was
found). Not here: call-based tests (TACO's `fn_name`) and assert-style test code; a
reference in a shape not handled is an error that names it, never a silent 0.

This runs in the reward worker's scoring process (time_limit.py), whose hard per-sample
limit covers all of a sample's cases; each sandbox has its own wall-clock limit inside it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from flywheel.config.schema import CodeSandboxArgs, RewardConfig
from flywheel.sandbox.bwrap import LANGUAGES, check_sandbox, run_sandboxed
from flywheel.workers.rewards.result import RewardResult

_FENCE = re.compile(r"```[ \t]*([\w+#-]*)[^\n]*\n(.*?)```", re.DOTALL)
_ALIASES = {"": "python", "py": "python", "python3": "python"}


@dataclass
class StdioTests:
    inputs: list[str]
    outputs: list[str]


def last_code_block(text: str) -> tuple[str, str] | None:
    """(language, code) of the last fenced block, or None."""
    blocks = _FENCE.findall(text)
    if not blocks:
        return None
    tag, code = blocks[-1]
    return _ALIASES.get(tag.lower(), tag.lower()), code


def _as_text(value: object) -> str:
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def parse_tests(reference: str) -> StdioTests:
    try:
        ref = json.loads(reference)
    except json.JSONDecodeError as e:
        raise ValueError(f"code_sandbox: reference is not JSON ({e.msg})") from None
    if not isinstance(ref, dict) or "fn_name" in ref or not {"inputs", "outputs"} <= set(ref):
        keys = sorted(ref) if isinstance(ref, dict) else type(ref).__name__
        raise ValueError(f"code_sandbox: reference must be stdin/stdout tests "
                         f'{{"inputs": [...], "outputs": [...]}} (got {keys})')
    if len(ref["inputs"]) != len(ref["outputs"]):
        raise ValueError(f"code_sandbox: reference has {len(ref['inputs'])} inputs but "
                         f"{len(ref['outputs'])} outputs")
    return StdioTests([_as_text(v) for v in ref["inputs"]], [_as_text(v) for v in ref["outputs"]])


def _token_equal(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-6)
    except ValueError:
        return False


def outputs_match(got: str, expected: str) -> bool:
    got_tokens, expected_tokens = got.split(), expected.split()
    return len(got_tokens) == len(expected_tokens) and all(
        _token_equal(a, b) for a, b in zip(got_tokens, expected_tokens))


def run_tests(program: str, language: str, tests: StdioTests,
              args: CodeSandboxArgs) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "timed_out_tests": 0, "crashed": 0}
    cases = list(zip(tests.inputs, tests.outputs))[: args.max_tests or None]
    for stdin, expected in cases:
        outcome = run_sandboxed(program, stdin, args, language)
        if outcome.status == "timed_out":
            counts["timed_out_tests"] += 1
        elif outcome.exit_code != 0:
            counts["crashed"] += 1
        elif outputs_match(outcome.stdout.decode(errors="replace"), expected):
            counts["passed"] += 1
        else:
            counts["failed"] += 1
    return counts


def score_with(args: CodeSandboxArgs, prompt: str, response: str,
               reference: str) -> RewardResult:
    tests = parse_tests(reference)
    block = last_code_block(response)
    if block is None or block[0] not in LANGUAGES:
        return RewardResult(0.0, {"parsed": False, "passed": 0, "failed": len(tests.inputs),
                                  "language": None if block is None else block[0]})
    counts = run_tests(block[1], block[0], tests, args)
    total = sum(counts.values())
    if args.scoring == "all_or_nothing":
        value = float(total > 0 and counts["passed"] == total)
    else:
        value = counts["passed"] / total if total else 0.0
    return RewardResult(value, {"parsed": True, **counts})


def build(cfg: RewardConfig) -> Callable[[str, str, str], RewardResult]:
    """The reward with `cfg.code_sandbox`'s limits; refuses (SandboxUnavailable, one line)
    where the sandbox cannot be set up, so code never runs unsandboxed."""
    args = cfg.code_sandbox
    check_sandbox(args)

    def score(prompt: str, response: str, reference: str) -> RewardResult:
        return score_with(args, prompt, response, reference)

    return score
