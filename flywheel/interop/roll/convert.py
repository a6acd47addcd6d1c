"""`platform convert --from roll`: a ROLL config, read with ROLL's leniency, as a strict
flywheel config plus a report of everything that did not carry over unchanged.

Reading is ROLL's: `defaults:` with `@_here_`, the `hydra:` block dropped, every `${...}`
(and the `oc.env` / `now` resolvers) resolved over the whole merged tree, and no schema
check. Then each block is walked (a role's by `role_walk.walk_role`) beside two tables:
`roll_keys` (what ROLL reads: a key outside it is one ROLL ignores too, so the user learns
it never did anything) and `roll_rules` (what each key ROLL reads becomes here). Keys ROLL
ignores that some `${...}` referenced are reported as helpers. Then `roll_defaults.finish`:
where ROLL's default differs from flywheel's and the key acts, ROLL's value is written out,
so the converted run means the same; a key that would do nothing in the converted config is
dropped, with the reason.

Nothing is dropped silently: the report lists every key ignored, mapped, dropped (with why
it makes no difference) and every ROLL feature flywheel lacks. A config that needs a missing
feature is not written (`Conversion.missing` non-empty): the run would not be the one the
file describes. The output is checked by the strict loader before it is returned.
"""

from __future__ import annotations

import os
from typing import Any, get_args

from flywheel.config.catalogs import Catalogs
from flywheel.config.loader import load_config_dict
from flywheel.config.schema import PipelineConfig
from flywheel.interop.roll import keys as keys
from flywheel.interop.roll import rules as rules
from flywheel.interop.roll.conversion import Conversion
from flywheel.interop.roll.defaults import finish
from flywheel.interop.roll.fit import loss as roll_loss
from flywheel.interop.roll.fit import step_credit as step_credit
from flywheel.interop.roll.fit.envs import fit_env_config
from flywheel.interop.roll.fit.judge import judge_settings, served_judges
from flywheel.interop.roll.fit.loss import fit_loss
from flywheel.interop.roll.fit.tools import fit_tool_wrapper
from flywheel.interop.roll.fit.val_lengths import KEYS as VAL_LENGTHS
from flywheel.interop.roll.fit.val_lengths import fit_val_lengths
from flywheel.interop.roll.fit.vl import data_function, detection_reward_args, is_vl
from flywheel.interop.roll.pipelines import AGENTIC_MARKERS, RollPipeline, pipelines, recognise
from flywheel.interop.roll.role_walk import (
    SUB_BLOCKS,
    apply_rule,
    is_off,
    put,
    show,
    walk_block,
    walk_role,
)
from flywheel.interop.roll.typos import unknown_key
from flywheel.platform.config.conversion import field_type_at
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.config.helpers import helper_keys
from flywheel.platform.config.interpolation import resolve_references
from flywheel.platform.config.yaml_source import load_layers

# what a ROLL rule reward worker loads from its model_args, where not only a tokenizer
RULE_MODEL_USE = {"DetectionRewardWorker": "its processor (a tokenizer, and the patch size "
                  "of its Qwen2.5-VL box rescaling, which flywheel's detection reward "
                  "leaves out: the reference's coordinates must be the reply's)"}
ROLE_BLOCKS = ("actor_train", "actor_infer", "reference", "critic")


def convert_roll(path: str | os.PathLike, catalogs: Catalogs,
                 pipeline: str | None = None) -> Conversion:
    """Read a ROLL config file and map it; raises ConfigError only for unreadable input.
    `pipeline`: ROLL's pipeline by name (interop/roll/pipelines), else recognised."""
    path = os.fspath(path)
    layered = load_layers(path)
    raw = layered.data
    out = Conversion(source=path, catalogs=catalogs)
    data = resolve_references(raw, schema=PipelineConfig)
    known = pipelines()
    if pipeline is not None and pipeline not in known:
        raise ConfigError(path, "", f"--pipeline {pipeline}: ROLL has no such pipeline here "
                                    f"(expected one of {', '.join(known)})")
    name, out.recognised_by = ((pipeline, "--pipeline") if pipeline is not None
                               else recognise(data))
    kind = known[name]
    out.roll_pipeline = name
    own = {k for k in data if kind.reads(k)}
    out.helpers = sorted(helper_keys(raw, PipelineConfig) - set(keys.TOP) - own)
    agentic = any(k in data for k in AGENTIC_MARKERS) or name == "agentic"
    if kind.runs_as is None:
        return _not_run_yet(kind, data, out, agentic)
    if kind.fit is not None:
        data = kind.fit(data, out)
    data = served_judges(data, out)
    out.vl = is_vl(data)  # before data_function takes ROLL's default data function out
    data = data_function(data, out)
    out.pipeline_type = kind.runs_as
    out.data["pipeline_type"] = out.pipeline_type
    _top(data, out, agentic)
    _default_reward(data, out)
    _global_template(data.get("global_template"), out)
    _tag_to_template(data.get("tag_to_template"), out)
    _eval_steps_without_validation(out)
    fit_loss(data, out)  # importance_sampling, TOPR coefficients, train_infer_correction
    fit_val_lengths(data, out)
    step_credit.fit_step_credit(data, out)  # per-turn rows, step estimators, templates
    step_credit.fit_rollout_only(data, out)
    finish(data, out)  # ROLL's defaults written, inert keys dropped
    step_credit.fit_batch_adjust(data, out)
    if not out.missing and not out.typos:
        _validate(out)
    return out


def _not_run_yet(kind: RollPipeline, data: dict[str, Any], out: Conversion,
                 agentic: bool) -> Conversion:
    """A pipeline flywheel does not run: its own keys and roles are reported as needing
    it, the shared ones are walked as ever (so the report says what would carry over), and
    nothing is written."""
    out.pipeline_type = kind.name
    out.missing.append(f"pipeline {kind.name}: ROLL's {kind.title} pipeline "
                       f"({kind.launcher}), which flywheel does not run yet")
    for key in [k for k in data if kind.reads(k)]:
        value = data.pop(key)
        what = "a role" if key in kind.roles else show(value)
        out.needs_pipeline.append(f"{key}: {what}: needs pipeline {kind.name}")
    _top({k: v for k, v in data.items() if k not in out.helpers}, out, agentic)
    return out


def _top(data: dict[str, Any], out: Conversion, agentic: bool) -> None:
    other_tracker = data.get("track_with") not in (None, *_trackers())
    for key, value in data.items():
        if key in out.helpers:
            continue
        if key in keys.ROLL_ONLY_TOP_KEYS and key not in keys.TOP:
            out.ignored.append(str(key))  # a key ROLL's own files carry, dead there too
        elif key not in keys.TOP:
            unknown_key(str(key), key, keys.TOP, out)
        elif (key == "rewards" and agentic) or (key in AGENTIC_MARKERS and not agentic):
            out.ignored.append(str(key))
        elif key in ROLE_BLOCKS:
            table = rules.ACTOR_TRAIN if key == "actor_train" else rules.WORKER
            walk_role(value, key, table, out)
        elif key == "rewards":
            for name, reward in (value or {}).items():
                _reward(reward, f"rewards.{name}", out)
        elif key == "validation":
            _validation(value, out)
        elif key in ("train_env_manager", "val_env_manager"):
            _env_manager(value, key, out)
        elif key == "custom_envs":
            _custom_envs(value, data, out)
        elif key == "reward_normalization":
            _reward_normalization(value, out)
        elif key in roll_loss.KEYS:
            continue  # roll_loss.fit_loss: they choose the loss together
        elif key in VAL_LENGTHS:
            continue  # fit_val_lengths: the pair sets validation's response budget
        elif key in step_credit.KEYS:
            continue  # fit_step_credit / fit_batch_adjust
        elif key in ("global_template", "tag_to_template"):
            continue  # _global_template / _tag_to_template, once every block is in
        elif key == "track_with" and other_tracker:
            out.dropped.append(f"track_with: {value!r}: a tracker flywheel does not have"
                               f"{rules.UNKNOWN_TRACKERS.get(value, '')}; where metrics go "
                               f"does not change the run (flywheel: tracking.backends' "
                               f"default)")
        elif key == "tracker_kwargs" and other_tracker:
            out.dropped.append(f"tracker_kwargs: options of track_with "
                               f"{data['track_with']!r}, dropped with it")
        else:
            apply_rule(rules.TOP.get(key, rules.Missing(key)), key, value, keys.TOP.get(key),
                   ("",), key, out)


def _default_reward(data: dict[str, Any], out: Conversion) -> None:
    """An RLVR file without rewards: ROLL starts no reward worker (its `rewards` defaults
    to {}), flywheel's default is one math_rule reward (schema.py). Said, not silent."""
    if out.pipeline_type != "rlvr" or data.get("rewards"):
        return
    out.mapped.append("rewards: none in the file (ROLL starts no reward worker without "
                      "one) -> flywheel's default rewards.math_rule (reward_type math_rule, "
                      "every tag); write a rewards block to choose another")


def _eval_steps_without_validation(out: Conversion) -> None:
    """ROLL's RLVR and SFT pipelines validate every eval_steps only when the file has
    validation data (roll/pipeline/rlvr/rlvr_pipeline.py, sft/sft_pipeline.py); without,
    the key does nothing there, where flywheel refuses it."""
    if out.pipeline_type == "agentic" or out.data.get("validation") or not out.data.get(
            "eval_steps"):
        return
    out.dropped.append(f"eval_steps: {out.data.pop('eval_steps')}: the file has no "
                       f"validation block, so ROLL validates nothing either")


def _global_template(name: str | None, out: Conversion) -> None:
    """ROLL's `global_template` encodes the prompts in place of actor_train's
    `data_args.template` (roll/pipeline/rlvr/rlvr_pipeline.py), for training and validation
    alike: it becomes that template here, the one both encode with."""
    if not name:
        return
    for block in ("actor_train", "validation"):
        args = (out.data.get(block) or {}).get("data_args")
        if block == "actor_train" or (isinstance(args, dict) and "template" in args):
            put(out.data, (block, "data_args", "template"), name)
    out.mapped.append(f"global_template -> actor_train.data_args.template: {name} (ROLL "
                      f"encodes every prompt with it, in place of actor_train's template)")


def _tag_to_template(mapping: Any, out: Conversion) -> None:
    """ROLL's top-level `tag_to_template` picks the template of a record by its tag, for
    training and validation alike (rlvr_pipeline.py get_encode_function): flywheel's
    actor_train.data_args.tag_to_template, which validation shares."""
    if not mapping:
        return
    if not isinstance(mapping, dict):
        out.missing.append(f"a tag_to_template that is not a mapping ({mapping!r})")
        return
    put(out.data, ("actor_train", "data_args", "tag_to_template"),
         {str(tag): name for tag, name in mapping.items()})
    out.mapped.append(f"tag_to_template -> actor_train.data_args.tag_to_template "
                      f"({len(mapping)} tags)")


def _reward(value: Any, name: str, out: Conversion) -> None:
    known = {**keys.WORKER, **keys.REWARD_EXTRA}
    worker_cls = str((value or {}).get("worker_cls") or "")
    reward_type = rules.REWARD_WORKERS.get(worker_cls.rsplit(".", 1)[-1])
    if reward_type not in out.catalogs.rewards:
        out.missing.append(f"the reward worker {worker_cls.rsplit('.', 1)[-1] or '(none)'} "
                           f"({name}.worker_cls = {worker_cls or 'null'})")
        return
    value = dict(value)
    only_some = {key: value.pop(key) for key in ("reward_type", "response_length_penalty_coef")
                 if key in value}
    if out.catalogs.rewards.get(reward_type, f"{name}.worker_cls").kind == "rule":
        value = _rule_reward_model(value, name, worker_cls.rsplit(".", 1)[-1], out)
    if reward_type == "detection":
        detection_reward_args(name, out)
    if reward_type == "llm_judge":
        value, judge = judge_settings(value, name, out)
        for key, item in judge.items():
            put(out.data, tuple(name.split(".")) + ("llm_judge", key), item)
    walk_role(value, name, rules.REWARD, out, known)
    put(out.data, tuple(name.split(".")) + ("reward_type",), reward_type)
    out.mapped.append(f"{name}.worker_cls -> {name}.reward_type: {reward_type}")
    targets = rules.REWARD_WORKER_KEYS.get(reward_type, {})
    for key, item in only_some.items():
        where = f"{name}.{key}"
        if key in targets and item is not None:
            put(out.data, tuple(name.split(".")) + tuple(targets[key].split(".")), item)
            out.mapped.append(f"{where} -> {name}.{targets[key]}")
        elif key in targets or is_off(item, known.get(key)):
            out.dropped.append(f"{where}: off ({show(item)})")
        else:
            out.dropped.append(f"{where}: ROLL's {worker_cls.rsplit('.', 1)[-1]} does not "
                               f"read it")


def _rule_reward_model(value: dict[str, Any], name: str, worker: str,
                       out: Conversion) -> dict[str, Any]:
    """ROLL's rule reward workers take a `model_args` block for the tokenizer they load
    (ROLL decodes responses in the reward worker); flywheel hands a rule reward the decoded
    text, so a rule reward has no model to name: dropped, said."""
    if not value.get("model_args"):
        return value
    loads = RULE_MODEL_USE.get(worker, "only a tokenizer")
    out.dropped.append(f"{name}.model_args: ROLL's {worker} loads {loads} from it; "
                       f"flywheel's rule rewards score decoded text and load no model")
    return {k: v for k, v in value.items() if k != "model_args"}


def _validation(value: Any, out: Conversion) -> None:
    if value is None:
        return
    for key, item in value.items():
        where = f"validation.{key}"
        if key not in keys.WORKER:
            unknown_key(where, key, keys.WORKER, out)
        elif key in ("data_args", "generating_args"):
            walk_block(item, *SUB_BLOCKS[key], ("validation", key), where, out)
        else:
            apply_rule(rules.VALIDATION[key], key, item, keys.WORKER.get(key), ("validation",),
                   where, out)


def _env_manager(value: Any, name: str, out: Conversion) -> None:
    known = {**keys.WORKER, **keys.ENV_MANAGER_EXTRA}
    for key, item in (value or {}).items():
        where = f"{name}.{key}"
        if key not in known:
            unknown_key(where, key, known, out)
        elif key == "generating_args" and name == "train_env_manager":
            walk_block(item, rules.GENERATING_ARGS, keys.GENERATING_ARGS,
                   ("actor_infer", "generating_args"), where, out)
            out.mapped.append(f"{where} -> actor_infer.generating_args (flywheel's agentic "
                              f"turns are generated by actor_infer with its generating_args)")
        elif key == "generating_args":
            out.dropped.append(f"{where}: flywheel's validation episodes decode greedily")
        else:
            apply_rule(rules.ENV_MANAGER.get(key, rules.Missing(key)), key, item, known.get(key),
                   (name,), where, out)


def _custom_envs(value: Any, data: dict[str, Any], out: Conversion) -> None:
    played = {t for m in ("train_env_manager", "val_env_manager")
              for t in ((data.get(m) or {}).get("tags") or [])}
    for tag, env in (value or {}).items():
        where = f"custom_envs.{tag}"
        if tag not in played:
            out.dropped.append(f"{where}: no env manager plays this tag")
            continue
        env = env or {}
        env_type = env.get("env_type")
        if env_type in rules.CUSTOM_ENV_TYPES:
            env = _local_env(env, where, out)
            env_type = env["env_type"]
        if env_type not in out.catalogs.envs.builtin:
            why = rules.CUSTOM_ENV_MISSING.get(env_type)
            out.missing.append(f"the {env_type} environment ({where}.env_type = {env_type}"
                               f"{': ' + why if why else ''})")
            continue
        _custom_env(env, tag, where, out)


def _local_env(env: dict[str, Any], where: str, out: Conversion) -> dict[str, Any]:
    """A ROLL env type played by a flywheel env (rules.CUSTOM_ENV_TYPES), said; its
    service-only env_config keys and the {suffix} placeholder (ROLL's service state line;
    the local env's observation shows the state) go."""
    ours, why, service_keys = rules.CUSTOM_ENV_TYPES[env["env_type"]]
    out.mapped.append(f"{where}.env_type: {env['env_type']} -> {ours} ({why})")
    env = {**env, "env_type": ours}
    config = dict(env.get("env_config") or {})
    for key in service_keys:
        if key in config:
            out.dropped.append(f"{where}.env_config.{key}: {config.pop(key)!r} addresses "
                               f"ROLL's service; the local env needs none")
    if "env_config" in env:
        env["env_config"] = config
    for name in ("agent_template", "agent_system_template"):
        if isinstance(env.get(name), str) and "{suffix}" in env[name]:
            env[name] = env[name].replace("{suffix}", "")
            out.mapped.append(f"{where}.{name}: {{suffix}} -> '' (the local env's "
                              f"observation shows the state)")
    return env


def _custom_env(env: dict[str, Any], tag: str, where: str, out: Conversion) -> None:
    target: dict[str, Any] = {}
    for key, item in env.items():
        if key in rules.CUSTOM_ENV_SAME:
            if item is not None:
                target[key] = item
        elif key == "env_manager_cls" and not step_credit.supported_manager(
                step_credit.manager_name(item)):
            out.missing.append(f"the env manager {item} ({where}.{key})")
        elif key == "env_manager_cls" and step_credit.manager_name(item) != "TrajEnvManager":
            out.dropped.append(f"{where}.{key}: {step_credit.manager_name(item)}: "
                               f"{step_credit.MANAGER_NOTES[step_credit.manager_name(item)]}")
        elif key == "agent_runner_cls" and item is not None and (
                str(item).rsplit(".", 1)[-1] not in step_credit.RUNNERS):
            out.missing.append(f"an agent runner ({where}.{key} = {item})")
        elif key == "agent_runner_cls" and item is not None:
            out.dropped.append(f"{where}.{key}: GEMRunner plays a gym-like env turn by turn "
                               f"with the whole message history, as flywheel's env manager "
                               f"does")
        elif key == "tool_wrapper":
            tool_use = fit_tool_wrapper(item, f"{where}.{key}", env.get("max_steps"), out)
            if tool_use is not None:
                target["tool_use"] = tool_use
        elif key in rules.CUSTOM_ENV_DROPS:
            out.dropped.append(f"{where}.{key}: {rules.CUSTOM_ENV_DROPS[key]}")
        else:
            out.dropped.append(f"{where}.{key}: not read by flywheel's env manager")
    for name in ("agent_template", "agent_system_template"):
        _map_placeholders(target, name, f"{where}.{name}", out)
    env_config = dict(target.get("env_config") or {})
    if "max_steps" in env_config:  # ROLL repeats the turn limit inside env_config
        env_config.pop("max_steps")
        out.mapped.append(f"{where}.env_config.max_steps -> {where}.max_steps")
    env_config = fit_env_config(target.get("env_type"), env_config, f"{where}.env_config", out)
    if env_config or "env_config" in target:
        target["env_config"] = env_config
    out.data.setdefault("custom_envs", {})[tag] = target


def _map_placeholders(target: dict[str, Any], name: str, where: str, out: Conversion) -> None:
    """ROLL's template placeholders in flywheel's terms: {state} is the observation and
    {max_response_length} the turn's token budget (max_tokens_per_step), a constant."""
    text = target.get(name)
    if not isinstance(text, str):
        return
    mapped = text.replace("{state}", "{observation}")
    if "{max_response_length}" in mapped and "max_tokens_per_step" in target:
        mapped = mapped.replace("{max_response_length}", str(target["max_tokens_per_step"]))
    if mapped != text:
        target[name] = mapped
        out.mapped.append(f"{where}: ROLL placeholders {{state}} -> {{observation}}, "
                          f"{{max_response_length}} -> max_tokens_per_step")


def _reward_normalization(value: Any, out: Conversion) -> None:
    value = value or {}
    grouping, method = value.get("grouping", "state"), value.get("method", "identity")
    scope = {"traj_group_id": "group", "batch": "batch"}.get(grouping)
    if method == "identity":  # no normalisation: the grouping does not matter
        scope = "none"
    if scope is None or method not in ("mean_std", "mean", "identity"):
        out.missing.append(f"reward normalisation by {grouping} with {method} "
                           f"(reward_normalization)")
        return
    out.data["norm_mean_type"] = scope if method in ("mean_std", "mean") else "none"
    out.data["norm_std_type"] = scope if method == "mean_std" else "none"
    out.mapped.append(f"reward_normalization ({grouping}, {method}) -> norm_mean_type: "
                      f"{out.data['norm_mean_type']}, norm_std_type: {out.data['norm_std_type']}")


def _validate(out: Conversion) -> None:
    try:
        load_config_dict(out.data, source=f"{out.source} (converted)", catalogs=out.catalogs,
                         hint=keys.roll_hint)
    except ConfigError as error:
        out.missing.append(f"a value flywheel rejects: {error.key_path}: {error.message}")


def _trackers() -> tuple[str, ...]:
    """flywheel's track_with names (the schema's Literal)."""
    names = [a for a in get_args(field_type_at(("track_with",), PipelineConfig))
             if a is not type(None)]
    return get_args(names[0]) if names else ()
