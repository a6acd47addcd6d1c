"""What a converted ROLL config must add or leave out to run as ROLL would have run it.

`roll_convert` maps every key a ROLL file writes; three passes here then finish the job,
each reported in the conversion (`Conversion.mapped` / `dropped`):

1. `turn_budget` (agentic): ROLL generates a turn with at most min(custom_envs.<tag>.
   max_tokens_per_step, actor_infer's max_new_tokens) tokens; so does flywheel
   (turn_budget.py), and the converted file says it outright: the smaller one is written as
   each tag's max_tokens_per_step and max_new_tokens is taken out.
2. `write_roll_defaults`: a key the ROLL file leaves unset runs at ROLL's default; where that
   differs from flywheel's default and the key carries over (a `SAME` or `To` rule in
   rules.py), ROLL's value is written out: learning rate and schedule, dtype, sampling
   temperature / top-p / top-k, gradient checkpointing, batch sizes, steps, the `response`
   column, ... Keys that only say where files go (`NOT_WRITTEN`) are left to flywheel.
3. `drop_inert`: a key that would do nothing in the converted config (the "acts when" table,
   config/acts_when/table.py) is taken out: one the file wrote is reported as dropped with the
   reason (ROLL does not read it there either: the rows follow the same loss variants,
   estimators and roles); one of ROLL's defaults from pass 2 is simply not written. So
   `platform validate` accepts every file `platform convert` writes.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from flywheel.config.acts_when.check import data_paths, inert
from flywheel.config.schema import PipelineConfig, ValidationConfig, WorkerConfig
from flywheel.interop.roll import keys as keys
from flywheel.interop.roll import rules as rules
from flywheel.interop.roll.fit.backends import fit_backends, megatron_precision
from flywheel.interop.roll.fit.domains import fit_domain_mix
from flywheel.interop.roll.fit.lora import drop_frozen_elsewhere, fit_lora
from flywheel.interop.roll.fit.megatron import fit_moe, fit_vl_megatron
from flywheel.interop.roll.fit.packing import fit_packing
from flywheel.interop.roll.fit.vl import fit_vl
from flywheel.interop.roll.pipelines import pipelines
from flywheel.platform.config.conversion import to_config
from flywheel.platform.config.errors import ConfigError, KeyPath, format_key_path

if TYPE_CHECKING:
    from flywheel.interop.roll.conversion import Conversion

# ROLL defaults never written: where ROLL puts files (flywheel: under output_dir), and the
# generation budget, which flywheel derives from response_length (RLVR) or the env tags.
NOT_WRITTEN = frozenset({"output_dir", "logging_dir", "max_new_tokens", "max_length"})
# ROLL defaults that mean what flywheel's own default means (data_args: template native, the
# id and tag columns), so writing them would change nothing.
SAME_MEANING = {"template": "native", "id": "id", "tag": "tag"}
# flywheel's own default of each CustomEnvConfig.max_tokens_per_step (schema.py)
DEFAULT_TURN_BUDGET = 128


def turn_budget(data: dict[str, Any], out: Conversion) -> None:
    """Agentic: each tag's turn budget is the smaller of its own and max_new_tokens."""
    gen = (out.data.get("actor_infer") or {}).get("generating_args") or {}
    if out.pipeline_type != "agentic" or "max_new_tokens" not in gen:
        return
    most = gen.pop("max_new_tokens")
    for tag, env in (out.data.get("custom_envs") or {}).items():
        budget = env.get("max_tokens_per_step", DEFAULT_TURN_BUDGET)
        if isinstance(most, int) and most < budget:
            env["max_tokens_per_step"] = most
        out.mapped.append(f"actor_infer.generating_args.max_new_tokens ({most}) -> "
                          f"custom_envs.{tag}.max_tokens_per_step "
                          f"({env.get('max_tokens_per_step', budget)}): ROLL caps a turn at "
                          f"the smaller of the two")


def _default_blocks(data: dict[str, Any], out: Conversion):
    """(where in the ROLL file, ROLL's defaults there, their rules, flywheel's block); of
    the blocks and keys the file's ROLL pipeline reads."""
    agentic = out.pipeline_type == "agentic"
    pipeline = pipelines()[out.roll_pipeline]
    yield ("",), {k: v for k, v in keys.TOP.items() if k not in pipeline.unread}, rules.TOP, ()
    for role in ("actor_train", "actor_infer", "reference", "critic"):
        if data.get(role) is None:
            continue
        yield (role, "model_args"), keys.MODEL_ARGS, rules.MODEL_ARGS, (role, "model_args")
        if role in ("actor_train", "critic"):
            yield ((role, "training_args"), keys.TRAINING_ARGS, rules.TRAINING_ARGS,
                   (role, "training_args"))
    gen_source = ("train_env_manager" if agentic else "actor_infer", "generating_args")
    if pipeline.generates:
        yield gen_source, keys.GENERATING_ARGS, rules.GENERATING_ARGS, ("actor_infer",
                                                                        "generating_args")
    if not agentic:
        # data_args keys the pipeline never reads: `unread` holds them as data_args.<key>
        data_args = {k: v for k, v in keys.DATA_ARGS.items()
                     if f"data_args.{k}" not in pipeline.unread}
        yield (("actor_train", "data_args"), data_args, rules.DATA_ARGS,
               ("actor_train", "data_args"))
        if data.get("validation") is not None:
            yield (("validation", "data_args"), data_args, rules.DATA_ARGS,
                   ("validation", "data_args"))


def write_roll_defaults(data: dict[str, Any], out: Conversion) -> dict[KeyPath, str]:
    """Write ROLL's defaults that differ from flywheel's; {path written: report line}."""
    written: dict[KeyPath, str] = {}
    for source, defaults, table, block in _default_blocks(data, out):
        given = _get(data, tuple(p for p in source if p)) or {}
        for key, roll_default in defaults.items():
            rule = table.get(key)
            if (key in given or key in NOT_WRITTEN or roll_default is keys._NO_DEFAULT
                    or roll_default is None or not isinstance(rule, (rules.Same, rules.To))
                    or SAME_MEANING.get(key, keys._NO_DEFAULT) == roll_default):
                continue
            path, value = _target(rule, key, roll_default, block)
            if value is None or _has(out.data, path) or value == _flywheel_default(path):
                continue
            if not _special_case_allows(key, data, out):
                continue
            _put(out.data, path, value)
            written[path] = (f"{format_key_path(path)}: unset, ROLL's default "
                             f"{roll_default!r} written out")
    return written


def _special_case_allows(key: str, data: dict[str, Any], out: Conversion) -> bool:
    if key == "init_kl_coef":  # ROLL penalises rewards only with add_token_level_kl: true
        return data.get("add_token_level_kl") is True
    if key == "eval_steps":  # RLVR validates only with a validation block
        return out.pipeline_type == "agentic" or data.get("validation") is not None
    return True


def drop_inert(out: Conversion, defaults: dict[KeyPath, str]) -> None:
    """Take out every key that would do nothing; report the ones the file wrote."""
    for _ in range(5):  # dropping a key can turn another's switch off: repeat
        try:
            cfg = to_config(copy.deepcopy(out.data), PipelineConfig)
        except ConfigError:
            break  # a wrong value: the strict loader names it (roll_convert._validate)
        found = list(inert(cfg, data_paths(out.data)))
        if not found:
            break
        gone: list[KeyPath] = []
        for path, row in found:
            if any(path[:len(g)] == g for g in gone):
                continue  # inside a block already dropped
            gone.append(path)
            _delete(out.data, path)
            if path not in defaults:
                out.dropped.append(f"{format_key_path(path)}: not read here: acts only "
                                   f"{row.needs.says} ({row.does})")
            defaults.pop(path, None)
    out.mapped.extend(defaults.values())


def finish(data: dict[str, Any], out: Conversion) -> None:
    """The three passes (and the reference's backend, the LoRA actor's), in order."""
    turn_budget(data, out)
    reference_backend(out)
    kl_reward_penalty(data, out)
    kl_loss_without_weight(out)
    fit_domain_mix(out)
    megatron_precision(out)  # before the next two: Megatron's bf16 flag is model_args.dtype
    fit_lora(out)  # before fit_backends: a megatron_train LoRA actor becomes deepspeed_train
    drop_frozen_elsewhere(out)
    fit_moe(out)  # so does a megatron_train MoE role (fit/megatron.py)
    fit_vl_megatron(out)  # and a VL file's megatron_train roles (images)
    pipeline = pipelines()[out.roll_pipeline]
    if pipeline.fit_backends is not None:  # e.g. SFT's roles onto deepspeed_train
        pipeline.fit_backends(out)
    fit_backends(out)
    fit_packing(data, out)  # where packing acts depends on the final backends
    written = write_roll_defaults(data, out)
    fit_vl(data, out, written)  # ROLL's VL data columns; images on the final backends
    drop_inert(out, written)


def kl_reward_penalty(data: dict[str, Any], out: Conversion) -> None:
    """ROLL subtracts init_kl_coef x KL from the rewards only with add_token_level_kl: true;
    flywheel does whenever init_kl_coef > 0. Without the switch the coefficient is inert in
    ROLL, so it goes (and the keys of the penalty with it, as inert, in drop_inert)."""
    if data.get("add_token_level_kl") is not True and "init_kl_coef" in out.data:
        value = out.data.pop("init_kl_coef")
        out.dropped.append(f"init_kl_coef: {value!r} not applied: ROLL penalises rewards with "
                           f"it only under add_token_level_kl: true, which this file does not "
                           f"set")


def kl_loss_without_weight(out: Conversion) -> None:
    """use_kl_loss: true with kl_loss_coef 0 (ROLL's default) adds nothing to ROLL's loss;
    flywheel refuses it (checks.check_algorithm_roles), so the switch goes (and the
    reference with it, as inert, in drop_inert)."""
    if out.data.get("use_kl_loss") is True and not out.data.get("kl_loss_coef"):
        out.data.pop("use_kl_loss")
        coef = out.data.pop("kl_loss_coef", 0)
        out.dropped.append(f"use_kl_loss: true not applied: kl_loss_coef is {coef!r}, so "
                           f"ROLL's KL loss adds nothing either")


def reference_backend(out: Conversion) -> None:
    """ROLL's hf_infer reference scores with a forward pass; flywheel's reference does that
    on a training backend (at the sampled distribution), never on hf_infer."""
    strategy = (out.data.get("reference") or {}).get("strategy_args") or {}
    if strategy.get("strategy_name") == "hf_infer":
        strategy["strategy_name"] = "hf_train"
        out.mapped.append("reference.strategy_args.strategy_name: hf_infer -> hf_train "
                          "(the reference's log-probs come from a training backend's "
                          "forward pass)")


def _target(rule: rules.Rule, key: str, value: Any, block: KeyPath) -> tuple[KeyPath, Any]:
    if isinstance(rule, rules.To):
        parts = tuple(p for p in rule.path.strip("/").split("/") if p)
        path = parts if rule.path.startswith("/") else block + parts
        return path, rule.convert(value) if rule.convert else value
    return block + (key,), value


def _flywheel_default(path: KeyPath) -> Any:
    node: Any = PipelineConfig()
    for key in path:
        child = getattr(node, str(key))
        if child is None and key in ("reference", "critic"):
            child = WorkerConfig()
        elif child is None and key == "validation":
            child = ValidationConfig()
        node = child
    return node


def _get(data: Any, path: KeyPath) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _has(data: dict[str, Any], path: KeyPath) -> bool:
    parent = _get(data, path[:-1])
    return isinstance(parent, dict) and path[-1] in parent


def _put(data: dict[str, Any], path: KeyPath, value: Any) -> None:
    for key in path[:-1]:
        data = data.setdefault(key, {})
    data[path[-1]] = value


def _delete(data: dict[str, Any], path: KeyPath) -> None:
    parent = _get(data, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)
