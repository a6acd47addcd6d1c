"""ROLL's LLM judge (its LLMJudgeRewardWorker) as flywheel's llm_judge reward.

ROLL spells the judge in keys beside the reward's worker block; flywheel's live in
`rewards.<name>.llm_judge` (config/schema/ `LlmJudgeArgs`):

- `judge_prompt` names a prompt in ROLL's own table (roll/utils/prompt.py `prompt_maps`).
  A name flywheel knows becomes `llm_judge.prompt_template` in flywheel's words (the same
  placeholders and the same YES/NO verdict, so the same parser). Without one (no name, or
  a name not in the table) ROLL asks for a 0-10 score in its own words, which flywheel's
  judge neither has nor parses: the file is refused rather than judged by another prompt.
- `judge_model_type`: `inference` is a judge model the role loads (`backend: local`),
  `api` an OpenAI-compatible server (`backend: endpoint`, `judge_api_url` its base URL,
  `judge_model_name` its model). ROLL writes the API key into the YAML; flywheel never
  reads a key from a config, so the key is dropped and the report says to put it in an
  environment variable named by `llm_judge.api_key_env`.
- `generating_args`: the judge's `max_new_tokens` carries over; its sampling settings do
  not: flywheel's judge decodes greedily (ROLL samples, at temperature 0.8 in its
  examples), which the report says.
- `judge_model_type: cluster` with a top-level `reward_model` role: the judge is a model
  ROLL serves once on that role's devices (an InferWorker behind a router) for every
  reward worker to query. In flywheel that is the judge reward's own model: the role's
  model_args, strategy_args, device_mapping and generating_args become the reward's
  (`backend: local`), and the reward's `world_size` (ROLL's count of client workers) goes,
  since flywheel's judge runs one worker per device set of its own.
- `model_args.model_type: trl`: ROLL loads a HF judge with trl's value head, which its
  verdict never reads (the judge generates text; on vllm the key is not read at all), so
  it is dropped. Another model_type (a classifier head) is a reward model, not a judge.
"""

from __future__ import annotations

from typing import Any

from flywheel.interop.roll.conversion import Conversion

# What ROLL's "Qwen2.5-7B-Instruct-RLVR-prompt" asks, in flywheel's words: does the final
# answer of a solution match the reference, whatever the language; answer YES or NO only.
RLVR_MATCH_PROMPT = (
    "You are checking a solution against a reference answer. The reference may be a single "
    "option letter (such as A, B, C or D), a number, an expression, or several answers "
    "when the problem has several questions; it may be written in any language, and your "
    "judgement must not depend on the language.\n\n"
    "Compare the final answer the solution reaches with the reference answer. Answer YES "
    "if they match exactly. Answer NO if they differ, or if the solution is unclear, "
    "unfinished or ambiguous.\n\n"
    "Reply with the single word YES or NO and nothing else.\n\n"
    "Problem:\n{prompt}\n\n"
    "Solution (its final step is what counts):\n{response}\n\n"
    "Reference answer:\n{reference}\n\n"
    "Verdict:"
)
# ROLL's judge_prompt names -> flywheel's prompt_template
JUDGE_PROMPTS: dict[str, str] = {"Qwen2.5-7B-Instruct-RLVR-prompt": RLVR_MATCH_PROMPT}
JUDGE_KEYS = ("judge_prompt", "judge_model_type", "judge_model_name", "judge_api_url",
              "judge_api_key")


def judge_settings(value: dict[str, Any], name: str,
                   out: Conversion) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the reward block without ROLL's judge keys, flywheel's `llm_judge` block for them).
    What was carried over, dropped or cannot be goes into the report (`out`)."""
    mapped, dropped, missing = out.mapped, out.dropped, out.missing
    value = dict(value)
    roll = {key: value.pop(key) for key in JUDGE_KEYS if key in value}
    judge: dict[str, Any] = {}
    prompt = roll.get("judge_prompt")
    if prompt in JUDGE_PROMPTS:
        judge.update(prompt_template=JUDGE_PROMPTS[prompt], score_parser="yes_no")
        mapped.append(f"{name}.judge_prompt: {prompt} -> {name}.llm_judge.prompt_template "
                      f"(flywheel's wording of that prompt: the same placeholders and YES/NO "
                      f"verdict)")
    else:
        missing.append(f"ROLL's default 0-10 judge prompt ({name}.judge_prompt = "
                       f"{prompt!r}, not a prompt of ROLL's table); write "
                       f"{name}.llm_judge.prompt_template and score_parser instead")
    kind = roll.get("judge_model_type") or "inference"
    if kind == "api":
        judge.update(backend="endpoint", base_url=roll.get("judge_api_url"),
                     model=roll.get("judge_model_name"))
        mapped.append(f"{name}.judge_model_type: api -> {name}.llm_judge.backend: endpoint "
                      f"(judge_api_url -> base_url, judge_model_name -> model)")
        if roll.get("judge_api_key"):
            dropped.append(f"{name}.judge_api_key: flywheel reads no key from a config; put "
                           f"it in an environment variable and name that variable in "
                           f"{name}.llm_judge.api_key_env")
    elif kind == "inference":
        for key in ("judge_model_name", "judge_api_url", "judge_api_key"):
            if roll.get(key):
                dropped.append(f"{name}.{key}: read by ROLL's api judge only")
    else:
        missing.append(f"a judge of kind {kind!r} ({name}.judge_model_type)")
    generating = value.pop("generating_args", None) or {}
    if generating.get("max_new_tokens") is not None:
        judge["max_new_tokens"] = generating["max_new_tokens"]
        mapped.append(f"{name}.generating_args.max_new_tokens -> "
                      f"{name}.llm_judge.max_new_tokens")
    sampled = sorted(k for k in generating if k not in ("max_new_tokens", "num_beams",
                                                        "num_return_sequences"))
    if sampled:
        dropped.append(f"{name}.generating_args ({', '.join(sampled)}): flywheel's judge "
                       f"decodes greedily, so a verdict does not change from one call to "
                       f"the next; ROLL samples the judge's answer")
    model_args = value.get("model_args")
    if isinstance(model_args, dict) and "model_type" in model_args:
        model_args = dict(model_args)
        model_type = model_args.pop("model_type")
        value["model_args"] = model_args
        if model_type == "trl" or model_type is None:
            dropped.append(f"{name}.model_args.model_type: {model_type}: a judge generates "
                           f"its verdict with the language model's head; ROLL's value head "
                           f"is never read")
        else:
            missing.append(f"a reward model with a {model_type} head "
                           f"({name}.model_args.model_type = {model_type!r})")
    return value, judge


SERVED = ("model_args", "strategy_args", "device_mapping", "generating_args")


def served_judges(data: dict[str, Any], out: Conversion) -> dict[str, Any]:
    """`data` with each `judge_model_type: cluster` judge given the model of the top-level
    `reward_model` role it queries, and that role removed (its model is the judge's now)."""
    served = data.get("reward_model")
    rewards = data.get("rewards")
    if not isinstance(served, dict) or not isinstance(rewards, dict):
        return data
    clients = [name for name, reward in rewards.items()
               if isinstance(reward, dict) and reward.get("judge_model_type") == "cluster"]
    if not clients:
        return data
    rewards = dict(rewards)
    for name in clients:
        client = rewards[name]
        reward = {k: v for k, v in client.items() if k not in SERVED + ("world_size",)}
        reward.update({k: served[k] for k in SERVED if k in served})
        reward["judge_model_type"] = "inference"
        rewards[name] = reward
        out.mapped.append(f"reward_model ({', '.join(k for k in SERVED if k in served)}) -> "
                          f"rewards.{name}: judge_model_type: cluster is the model ROLL "
                          f"serves on that role; flywheel's judge loads it itself "
                          f"(backend: local)")
        if "world_size" in client:
            out.dropped.append(f"rewards.{name}.world_size: ROLL's count of client workers "
                               f"querying the served judge; flywheel's judge runs one worker "
                               f"per device set of reward_model's device_mapping")
    return {k: v for k, v in data.items() if k != "reward_model"} | {"rewards": rewards}
