"""One question per episode from a local data file: ROLL's `roll_math` and `roll_qa`.

ROLL's GEM math and QA envs (roll/pipeline/agentic/env/gem/{math,qa}_env.py, on gem-llm's
MathEnv and QaEnv) draw a question from a hub dataset, take one reply and end the episode:
reward 1.0 when the reply's answer is right, else 0 (an unparseable reply is 0 too, and
`action_is_valid` False). Tools come from the tag's tool block (flywheel/tools), which
answers tool calls before they reach the env, as ROLL's ToolEnvWrapper does.

Why flywheel's own env and not GEM's classes with a local dataset: GEM's envs pick the
question with the process-global `random` module (an index in [0, len] inclusive, so one
seed in len+1 fails), start a multiprocessing pool per env for the math check, and take
`**_`, which would hide a misspelt env_config key. Here a seed picks the question with its
own generator (the same seed, the same question: GRPO groups compare like with like) and
the file is read once per env. The answer checks are GEM's own:
- math: the last `\\boxed{...}` of the reply (gem.utils.parsing.extract_last_boxed_answer),
  compared by math-verify as gem.envs.math_env.MathEnv.check_correct does (parse both,
  `verify(gold, answer)`, any of several gold answers); a text GEM's parse reads nothing
  from is read again as inline LaTeX (`$...$`), so `\\dfrac{2}{4}` counts as 1/2.
  math-verify's own time limit uses signal.alarm, which works on the main thread only; env
  steps run on the main thread of the env's own process (workers/env_process.py), and
  step_timeout_s bounds them besides.
- QA: the last `<answer>...</answer>` (gem.utils.parsing.extract_last_tagged_answer), or the
  last `\\boxed{}` with extract_boxed, compared by GEM's exact match after SQuAD-style
  normalisation (gem.utils.qa_em.em_check: lower case, no punctuation or articles). The
  question is shown inside an instruction asking for that format, as GEM's QaEnv does
  (its wording is GEM's; this one is ours).

Data: a JSONL file, one object per line with the question and the answer (a string, a
number, or a list of accepted answers) under `question_key` / `answer_key`. The shipped
files are made by examples/data/gem_local_data.py (hub datasets are unreachable here).
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flywheel.envs.base import StepResult, TextEnv, check_format_penalty, resolve_seed

QA_INSTRUCTION = ("Answer the question below. Think it through inside <think> </think> "
                  "first, then write only the final answer inside <answer> </answer>.\n\n"
                  "Question: {question}")


@functools.lru_cache(maxsize=8)
def load_items(path: str, question_key: str, answer_key: str) -> tuple[tuple[str, Any], ...]:
    """(question, answer) of every line of `path`; a ValueError naming the file (and the
    line) when it cannot be read or a line is not an object with both keys. Cached: an env
    worker builds one env per episode slot from the same file (a 17k-line DAPO file would
    otherwise be read and parsed once per env); the envs only read the items."""
    items = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as error:  # a ValueError, as every bad env_config value is
        raise ValueError(f"data_file {path}: {error.strerror or error}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            question, answer = record[question_key], record[answer_key]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"{path}:{number}: expected a JSON object with "
                             f"'{question_key}' and '{answer_key}'") from None
        if not isinstance(question, str) or not isinstance(answer, (str, int, float, list)):
            raise ValueError(f"{path}:{number}: the question must be text and the answer "
                             f"text, a number or a list of them")
        items.append((question, answer))
    if not items:
        raise ValueError(f"{path} holds no questions")
    return tuple(items)


def gold_answers(answer: Any) -> list[str]:
    return [str(a) for a in answer] if isinstance(answer, list) else [str(answer)]


def math_correct(model_answer: str, answer: Any) -> bool:
    """GEM's math check (MathEnv.check_correct: math-verify's parse of both, then
    verify), with math-verify's time limit only where it works (the main thread)."""
    from math_verify import parse, verify

    limit = 5 if threading.current_thread() is threading.main_thread() else None

    def read(text: str) -> list:
        # GEM's reading; where it finds nothing, the text as inline LaTeX (math-verify
        # reads `\\dfrac{2}{4}` only between $ signs): a right answer GEM misses scores
        return parse(text, parsing_timeout=limit) or parse(f"${text}$", parsing_timeout=limit)

    try:
        parsed = read(model_answer)
        return any(verify(read(gold), parsed, timeout_seconds=limit)
                   for gold in gold_answers(answer))
    except Exception:  # math-verify raises on some malformed input: not shown equal
        return False


class QuestionEnv(TextEnv):
    """A question from `items` per episode; one reply, scored by `extract` and `correct`.

    Args:
        items: (question, answer) pairs.
        prompt: the observation, with {question}.
        extract: reply -> the answer it gives, or None (unparseable).
        correct: (extracted answer, gold answer) -> bool.
        format_penalty: reward of an unparseable reply (ROLL's: 0).
    """

    def __init__(self, items: Sequence[tuple[str, Any]], prompt: str,
                 extract: Callable[[str], str | None], correct: Callable[[str, Any], bool],
                 format_penalty: float) -> None:
        self.items = items
        self.prompt = prompt
        self.extract = extract
        self.correct = correct
        self.format_penalty = check_format_penalty(format_penalty)
        self.item: tuple[str, Any] | None = None  # this episode's (question, answer)
        self._done = True

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        seed = resolve_seed(seed)
        self.item = self.items[int(np.random.default_rng(seed).integers(len(self.items)))]
        self._done = False
        return self.prompt.format(question=self.item[0]), {"seed": seed}

    def step(self, action_text: str) -> StepResult:
        if self.item is None or self._done:
            raise RuntimeError("QuestionEnv: step() after the episode ended; call reset()")
        self._done = True
        answer = self.extract(action_text)
        if answer is None:
            return ("No answer found.", self.format_penalty, True, False,
                    {"action_is_valid": False, "success": False})
        right = bool(self.correct(answer, self.item[1]))
        return ("Correct." if right else "Wrong."), float(right), True, False, {
            "action_is_valid": True, "success": right}


def roll_math(*, data_file: str, question_key: str = "question", answer_key: str = "answer",
              format_penalty: float = 0.0) -> QuestionEnv:
    """ROLL's `roll_math`: the question as is, the last \\boxed{} answer checked by
    math-verify (the agent templates ask for \\boxed{})."""
    from gem.utils.parsing import extract_last_boxed_answer

    return QuestionEnv(load_items(data_file, question_key, answer_key), "{question}",
                       extract_last_boxed_answer, math_correct, format_penalty)


def roll_qa(*, data_file: str, question_key: str = "question", answer_key: str = "answer",
            extract_boxed: bool = False, format_penalty: float = 0.0) -> QuestionEnv:
    """ROLL's `roll_qa`: the question in an instruction, the answer in <answer> tags (or the
    last \\boxed{} with extract_boxed), exact match after normalisation."""
    from gem.utils.parsing import extract_last_boxed_answer, extract_last_tagged_answer
    from gem.utils.qa_em import em_check

    def correct(model_answer: str, answer: Any) -> bool:
        return bool(em_check(model_answer, gold_answers(answer)))

    extract = extract_last_boxed_answer if extract_boxed else extract_last_tagged_answer
    return QuestionEnv(load_items(data_file, question_key, answer_key), QA_INSTRUCTION,
                       extract, correct, format_penalty)
