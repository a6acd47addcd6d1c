"""The walk every ROLL role block goes through: its keys, its sub-blocks (model_args,
training_args, ...) and its strategy, each mapped by the rules (rules.py) into flywheel's block
of the same name, or reported.

Its own module so that both convert.py and a ROLL pipeline's fit (pipelines/opd.py, a
teacher block) use it: convert imports the pipelines, so the walk cannot live there."""

from __future__ import annotations

from typing import Any

from flywheel.config.schema import PipelineConfig
from flywheel.interop.roll import keys as keys
from flywheel.interop.roll import rules as rules
from flywheel.interop.roll.conversion import Conversion
from flywheel.interop.roll.fit import packing as roll_packing
from flywheel.interop.roll.fit.fsdp2 import fit_fsdp2_config
from flywheel.interop.roll.typos import near, unknown_key
from flywheel.platform.config.conversion import field_type_at
from flywheel.platform.config.errors import ConfigError

FSDP2 = ("fsdp2_train", "fsdp2_infer")

def apply_rule(rule: rules.Rule, key: str, value: Any, roll_default: Any, block: tuple[str, ...],
           where: str, out: Conversion) -> None:
    """One key under the flywheel block `block` (a path of keys from the top).

    The rules follow flywheel's schema as it grows: a dropped key that has become a field
    of the same block is copied, and a copied key the schema lacks is reported missing."""
    has_field = is_field(block + (key,))
    if isinstance(rule, rules.Drop) and has_field:
        rule = rules.SAME
    if isinstance(rule, rules.Same) and not has_field:
        rule = rules.Missing(f"flywheel has no {key} here")
    if isinstance(rule, rules.Same):
        if value is None:
            out.mapped.append(f"{where}: null, flywheel's default used")
        else:
            put(out.data, block + (key,), value)
    elif isinstance(rule, rules.To):
        target = tuple(rule.path.strip("/").split("/"))
        target = target if rule.path.startswith("/") else block + target
        converted = rule.convert(value) if rule.convert else value
        if converted is None:
            out.mapped.append(f"{where}: null, flywheel's default used")
            return
        put(out.data, target, converted)
        # a conversion's note only where it changed the value ("a string is a one-file
        # list" is not said of a list)
        note = f" ({rule.note})" if rule.note and (rule.convert is None
                                                    or converted != value) else ""
        out.mapped.append(f"{where} -> {'.'.join(p for p in target if p)}{note}")
    elif isinstance(rule, rules.Drop):
        out.dropped.append(f"{where}: {rule.reason}")
    elif is_off(value, roll_default):
        out.dropped.append(f"{where}: off ({show(value)})")
    else:
        out.missing.append(f"{rule.feature} ({where} = {show(value)})")


def walk_block(value: Any, table: dict[str, rules.Rule], known: dict[str, Any],
           block: tuple[str, ...], where: str, out: Conversion) -> None:
    """A ROLL sub-block (model_args, ...) whose keys map into flywheel's `block`."""
    for key, item in (value or {}).items():
        child = f"{where}.{key}"
        if key not in known:
            unknown_key(child, key, known, out)
        else:
            apply_rule(table.get(key, rules.Missing(key)), key, item, known.get(key), block,
                   child, out)


def walk_role(value: Any, name: str, table: dict[str, rules.Rule], out: Conversion,
          known: dict[str, Any] = keys.WORKER) -> None:
    if value is None:
        out.mapped.append(f"{name}: null, role not declared")
        return
    block = tuple(name.split("."))
    value = _critic_value_head(value, name, out)
    node = out.data
    for part in block:  # the role is declared even when none of its keys carries over
        node = node.setdefault(part, {})
    for key, item in value.items():
        where = f"{name}.{key}"
        if key not in known:
            unknown_key(where, key, known, out)
        elif key == "strategy_args":
            _strategy(item or {}, block, where, out, value)
        elif key in roll_packing.KEYS:  # converted once backends are final (finish)
            continue
        elif key == "data_args" and name != "actor_train":
            out.dropped.append(f"{where}: only actor_train's data_args are read (prompts and "
                               f"their template)")
        elif key in SUB_BLOCKS:
            sub_table, sub_known = SUB_BLOCKS[key]
            walk_block(item, sub_table, sub_known, block + (key,), where, out)
        else:
            apply_rule(table.get(key, rules.Missing(key)), key, item, known.get(key), block, where,
                   out)


def _critic_value_head(value: dict[str, Any], name: str, out: Conversion) -> dict[str, Any]:
    """A critic's `model_args.model_type: trl` (trl's causal LM with a value head) is what
    flywheel's critic is (workers/strategies/model_head.py VALUE): dropped, said."""
    model_args = value.get("model_args")
    if name != "critic" or not isinstance(model_args, dict) or (
            model_args.get("model_type") != "trl"):
        return value
    out.dropped.append(f"{name}.model_args.model_type: trl: flywheel's critic is a value head "
                       f"on the causal LM already, as trl's")
    return {**value, "model_args": {k: v for k, v in model_args.items() if k != "model_type"}}


def _strategy(value: dict[str, Any], block: tuple[str, ...], where: str, out: Conversion,
              role: dict[str, Any] | None = None) -> None:
    for key in value:
        if key not in keys.STRATEGY_ARGS:
            unknown_key(f"{where}.{key}", key, keys.STRATEGY_ARGS, out)
    name = value.get("strategy_name")
    if name is None:
        return
    same = (name, "") if name in out.catalogs.backends else (None, "")  # a flywheel name already
    flywheel_name, note = rules.STRATEGY_NAMES.get(name, same)
    if flywheel_name is None:
        close = near(name, [*rules.STRATEGY_NAMES, *out.catalogs.backends])
        if close is not None:
            out.typos.append(f"{where}.strategy_name: {name} is no backend of ROLL's or "
                             f"flywheel's; did you mean '{close}'?")
        else:
            out.missing.append(f"the {name} backend ({where}.strategy_name = {name})")
        return
    strategy: dict[str, Any] = {"strategy_name": flywheel_name}
    # megatron_infer's layout keys are megatron_train's: kept, then checked key by key
    keeps_config = not note or (name, flywheel_name) == ("megatron_infer", "megatron_train")
    if keeps_config and value.get("strategy_config"):
        strategy["strategy_config"] = value["strategy_config"]
    elif name in FSDP2 and isinstance(value.get("strategy_config"), dict):
        fit_fsdp2_config(value["strategy_config"], role or {}, f"{where}.strategy_config", out)
    elif value.get("strategy_config"):  # a forward-only role on a train backend
        config = value["strategy_config"]
        listed = ", ".join(config) if isinstance(config, dict) else show(config)
        out.dropped.append(f"{where}.strategy_config: {listed}: {name}'s settings; the "
                           f"forward-only {flywheel_name} role takes its own defaults (a "
                           f"memory/speed layout: the same log-probs)")
    put(out.data, block + ("strategy_args",), strategy)
    if flywheel_name != name:
        out.mapped.append(f"{where}.strategy_name: {name} -> {flywheel_name} ({note})")


def is_field(path: tuple[str, ...]) -> bool:
    try:
        field_type_at(tuple(p for p in path if p), PipelineConfig)
        return True
    except ConfigError:
        return False


def is_off(value: Any, roll_default: Any) -> bool:
    return value in (None, False, 0, "", {}, []) or (
        roll_default is not keys._NO_DEFAULT and value == roll_default)


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def put(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    path = tuple(p for p in path if p)
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


SUB_BLOCKS: dict[str, tuple[dict[str, rules.Rule], dict[str, Any]]] = {
    "model_args": (rules.MODEL_ARGS, keys.MODEL_ARGS),
    "training_args": (rules.TRAINING_ARGS, keys.TRAINING_ARGS),
    "data_args": (rules.DATA_ARGS, keys.DATA_ARGS),
    "generating_args": (rules.GENERATING_ARGS, keys.GENERATING_ARGS),
}
