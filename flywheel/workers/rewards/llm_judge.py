"""llm_judge: a language model reads (prompt, response, reference) and gives a verdict.

The judge's prompt is `RewardConfig.llm_judge.prompt_template` with {prompt}, {response}
and {reference} filled in (parsed once by `derived.template_parts`; values are
inserted as they are and never formatted again, so braces in a response are just text).
The judge answers greedily, and `parse_verdict` turns the answer into a score in [0, 1]:
`yes_no` (the first whole word yes / no) or `number` (last number, within [score_min, score_max],
rescaled). Every judged sample's metadata says `judge_parse_failure` (true: the answer
did not parse, or the endpoint's reply was malformed; the sample scores 0), counted as
reward/judge_parse_failures, and `judge_answer` (its first 200 characters).

Two judges, one interface (`Judge`: the template's parts and values in, the answer out):
- `LocalJudge`: the reward role's own infer backend (hf_infer, vllm) with its model,
  built inside the scoring process, so the hard per-sample limit covers generation too.
  With a chat template, the filled-in prompt is one user message, and the values from the
  sample (model output: untrusted) are tokenized with special tokens split, so a response
  that writes "<|im_end|>" cannot close the judge's turn and forge its own.
- `EndpointJudge`: an OpenAI-compatible `POST {base_url}/chat/completions` (temperature
  0) over the standard library. The API key comes from the environment variable that
  `api_key_env` names. A server that cannot be reached or answers with an HTTP error
  raises `JudgeUnavailable` (the run stops with base_url named: a down judge must not
  score every sample 0); a reply that is not the expected JSON scores 0 like an answer
  that does not parse. A server that never answers is cut by `request_timeout_s`, and in
  any case by the per-sample limit.

Not here: batching several samples into one judge call (one sample per scoring process
call, like every reward), logprob-weighted scores, and multi-turn judging.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable

from flywheel.config.derived import template_parts
from flywheel.config.schema import LlmJudgeArgs, RewardConfig
from flywheel.workers.rewards.result import RewardResult

Parts = list[tuple[str, str | None]]  # (literal text, placeholder or None)
Judge = Callable[[Parts, dict[str, str]], str]  # filled-in template -> the judge's answer
# "7", "-2.5", and the numerator of "7/10" or "7 out of 10"
_NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)(?:\s*(?:/|out of)\s*\d+(?:\.\d+)?)?")
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
MAX_REPLY_BYTES = 1 << 20  # an endpoint reply larger than this is malformed
ANSWER_SHOWN = 200  # characters of the judge's answer kept in the metadata


class JudgeUnavailable(RuntimeError):
    """The endpoint could not be reached or refused the request (one line)."""


def render(parts: Parts, values: dict[str, str]) -> str:
    """The template's text with each placeholder replaced by its value, as is."""
    return "".join(literal + (values[name] if name else "") for literal, name in parts)


def parse_verdict(answer: str, args: LlmJudgeArgs) -> float | None:
    """The score in [0, 1] the answer gives, or None when it gives none."""
    if args.score_parser == "yes_no":
        found = _YES_NO.search(answer)
        return None if found is None else float(found.group(1).lower() == "yes")
    numbers = _NUMBER.findall(answer)
    if not numbers:
        return None
    value = float(numbers[-1])
    if not args.score_min <= value <= args.score_max:
        return None
    return (value - args.score_min) / (args.score_max - args.score_min)


def _text_ids(tokenizer, text: str, untrusted: bool) -> list[int]:
    return tokenizer(text, add_special_tokens=False,
                     split_special_tokens=untrusted)["input_ids"]


def _filled_ids(tokenizer, parts: Parts, values: dict[str, str]) -> list[int]:
    """The template's literal text may hold special tokens; the values never do."""
    ids: list[int] = []
    for literal, name in parts:
        ids += _text_ids(tokenizer, literal, untrusted=False)
        if name:
            ids += _text_ids(tokenizer, values[name], untrusted=True)
    return ids


def prompt_ids(tokenizer, parts: Parts, values: dict[str, str],
               system_prompt: str | None = None) -> list[int]:
    """The local judge's prompt tokens: the filled-in template as one user message of the
    tokenizer's chat template (after bos alone when it has none)."""
    if not tokenizer.chat_template:
        bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        return bos + _filled_ids(tokenizer, parts, values)
    marker = "\x00JUDGE_PROMPT\x00"  # cut the rendered template where the prompt goes
    messages = ([{"role": "system", "content": system_prompt}]
                if system_prompt is not None else [])
    messages.append({"role": "user", "content": marker})
    pieces = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                           tokenize=False).split(marker)
    if len(pieces) != 2:
        raise ValueError(f"llm_judge: the judge's chat template shows the user message "
                         f"{len(pieces) - 1} times, not once")
    before, after = pieces
    return (_text_ids(tokenizer, before, untrusted=False)
            + _filled_ids(tokenizer, parts, values)
            + _text_ids(tokenizer, after, untrusted=False))


class LocalJudge:
    """The reward role's infer backend with its model, decoding greedily."""

    def __init__(self, cfg: RewardConfig):
        from flywheel.platform.models.builtin import resolve_pretrain
        from flywheel.workers.strategies.base import SamplingParams
        from flywheel.workers.strategies.registry import strategy_class

        if not cfg.model_args.model_name_or_path:
            raise ValueError("llm_judge: backend local needs model_args.model_name_or_path "
                             "(or the top-level reward_pretrain)")
        path = resolve_pretrain(cfg.model_args.model_name_or_path)
        self.strategy = strategy_class(cfg.strategy_args.strategy_name)(path, cfg, seed=0)
        self.tokenizer = self.strategy.tokenizer
        self.system_prompt = cfg.llm_judge.system_prompt
        stop = [self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else []
        self.sampling = SamplingParams(max_new_tokens=cfg.llm_judge.max_new_tokens,
                                       do_sample=False, stop_token_ids=stop)

    def __call__(self, parts: Parts, values: dict[str, str]) -> str:
        ids = prompt_ids(self.tokenizer, parts, values, self.system_prompt)
        generation = self.strategy.generate([ids], self.sampling)[0]
        return self.tokenizer.decode(generation.token_ids, skip_special_tokens=True)


class EndpointJudge:
    """An OpenAI-compatible chat-completions server."""

    def __init__(self, args: LlmJudgeArgs):
        self.args = args
        self.url = args.base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Content-Type": "application/json"}
        if args.api_key_env is not None:
            key = os.environ.get(args.api_key_env)
            if not key:
                raise ValueError(f"llm_judge: environment variable {args.api_key_env} "
                                 f"(llm_judge.api_key_env) is not set")
            self.headers["Authorization"] = f"Bearer {key}"

    def request_body(self, text: str) -> bytes:
        messages = ([{"role": "system", "content": self.args.system_prompt}]
                    if self.args.system_prompt is not None else [])
        messages.append({"role": "user", "content": text})
        return json.dumps({"model": self.args.model, "messages": messages, "temperature": 0,
                           "max_tokens": self.args.max_new_tokens}).encode()

    def __call__(self, parts: Parts, values: dict[str, str]) -> str:
        request = urllib.request.Request(self.url, data=self.request_body(render(parts, values)),
                                         headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.args.request_timeout_s) as reply:
                body = reply.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as e:
            raise JudgeUnavailable(f"llm_judge endpoint {self.url} answered HTTP {e.code} "
                                   f"{e.reason}") from None
        except OSError as e:  # URLError included: refused, DNS, reset, timed out
            why = e.reason if isinstance(e, urllib.error.URLError) else e
            if isinstance(why, TimeoutError):
                raise JudgeUnavailable(f"llm_judge endpoint {self.url} did not answer within "
                                       f"{self.args.request_timeout_s:g}s "
                                       f"(llm_judge.request_timeout_s)") from None
            raise JudgeUnavailable(f"llm_judge endpoint {self.url} unreachable ({why})") from None
        return answer_of(body)


class MalformedReply(ValueError):
    pass


def answer_of(body: bytes) -> str:
    """choices[0].message.content of a chat-completions reply, or MalformedReply."""
    if len(body) > MAX_REPLY_BYTES:
        raise MalformedReply(f"reply larger than {MAX_REPLY_BYTES} bytes")
    try:
        content = json.loads(body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise MalformedReply(f"not a chat-completions reply ({type(e).__name__})") from None
    if not isinstance(content, str):
        raise MalformedReply("choices[0].message.content is not text")
    return content


def score_with(judge: Judge, args: LlmJudgeArgs, parts: Parts,
               prompt: str, response: str, reference: str) -> RewardResult:
    values = {"prompt": prompt, "response": response, "reference": reference}
    try:
        answer = judge(parts, values)
    except MalformedReply as e:
        return RewardResult(0.0, {"parsed": False, "judge_parse_failure": True,
                                  "judge_error": f"malformed reply: {e}"})
    value = parse_verdict(answer, args)
    return RewardResult(value or 0.0, {"parsed": value is not None,
                                       "judge_parse_failure": value is None,
                                       "judge_answer": answer[:ANSWER_SHOWN]})


def build(cfg: RewardConfig) -> Callable[[str, str, str], RewardResult]:
    """The judge of `cfg.llm_judge`: a local model loaded now (inside the scoring
    process's start-up, not the first sample's limit), or an endpoint client."""
    args = cfg.llm_judge
    try:
        parts = template_parts(args.prompt_template)
    except ValueError as e:
        raise ValueError(f"llm_judge: {e}") from None
    judge: Judge = EndpointJudge(args) if args.backend == "endpoint" else LocalJudge(cfg)

    def score(prompt: str, response: str, reference: str) -> RewardResult:
        return score_with(judge, args, parts, prompt, response, reference)

    return score
