"""How ROLL's own example configs fare in flywheel: natively, and through `platform convert`.

    python bench/roll_check.py /path/to/ROLL [--json out.json] [--list]

Takes a ROLL checkout (a work tree with examples/) and, for every pipeline config under
examples/ (a file with one of ROLL's role, reward or env blocks once its `defaults:` are
merged; files under examples/config/ are fragments), recognises which of ROLL's pipelines it is for
(interop/roll/pipelines: RLVR, agentic, SFT, DPO, offline or on-policy distillation) and
reports, per pipeline, how many convert and validate and what the rest need (a feature
flywheel lacks, or the pipeline itself: "pipeline dpo"); and, for every file:

- whether ROLL itself could load it, judged by reading it with ROLL's leniency (a missing
  `defaults:` fragment, an unset `${oc.env:...}` or an empty top-level file fails there too;
  an empty fragment is an empty mapping there, as in Hydra);
- native: whether flywheel's strict loader reads it, or would with only its unknown keys
  removed ("unknown keys only"), or fails for another reason (named);
- convert: whether `platform convert --from roll` turns it into a config that validates, or
  which flywheel-missing features stop it (counted by feature over all files);
- vl (RLVR files ROLL runs with its VL pipeline, roll_vl.is_vl): how many convert, and
  the ones excepted by name (`EXCEPTED`: video and audio inputs, which flywheel's prompts
  do not take; issue 29 counts its VL target without them);
- megatron (files with a role on megatron_train / megatron_infer): how many convert and
  validate keeping every Megatron strategy_config key on Megatron, how many keep their
  Megatron role but lose a key (counted by key), how many move off Megatron (MoE, LoRA,
  VL: to deepspeed_train);
- envs (agentic, converted): whether every env tag the converted file plays builds with its
  env_config (a key the env does not take validates but fails when the run starts) and its
  tools (tool_use), and starts an episode.

Figures, not a test: ROLL's files change, so this prints counts and writes JSON. The test
suite exercises each mechanism on small fixtures under tests/data/configs/roll/.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from flywheel.config.schema import PipelineConfig
from flywheel.interop.roll.fit.vl import is_vl
from flywheel.interop.roll.pipelines import AGENTIC_MARKERS, NAMES, recognise
from flywheel.pipelines.config import convert_roll, load_config, load_config_layers
from flywheel.platform.config.conversion import field_type_at
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.config.helpers import helper_keys, without
from flywheel.platform.config.interpolation import resolve_references
from flywheel.platform.config.yaml_source import load_layers

# a pipeline config has one of these blocks (ROLL's roles of every pipeline, its rewards or
# its env blocks)
ROLE_KEYS = ("actor_train", "actor_infer", "sft_train", "student", "teacher", "student_train",
             "student_infer", "rewards", *AGENTIC_MARKERS)
_VIDEO = "video inputs (Video-R1 data and reward): flywheel's prompts take images, not video"
# ROLL files refused for a feature flywheel leaves out on purpose, by path under the checkout
EXCEPTED = {
    "examples/qwen3-vl-30BA3B-video-rlvr/video_r1.yaml": _VIDEO,
    "examples/qwen3-vl-30BA3B-video-rlvr/video_r1_sglang.yaml": _VIDEO,
    "examples/video-rlvr/video_r1.yaml": _VIDEO,
    "examples/qwen3-omni/audio_test_80G.yaml": "audio inputs (ROLL's Omni audio test): "
                                               "flywheel's prompts take images, not audio",
}


def kind_of(path: Path) -> str | None:
    """The ROLL pipeline the file is for (interop/roll/pipelines `recognise`), "unreadable"
    when ROLL's leniency cannot read it but it names a role, or None: a fragment (under a
    config/ folder) or no pipeline config (no role, reward or env block)."""
    if "config" in path.parts[-2:-1]:
        return None
    try:
        data = resolve_references(load_layers(path).data, schema=PipelineConfig)
    except ConfigError:
        text = path.read_text(encoding="utf-8", errors="replace")
        return "unreadable" if any(f"\n{k}:" in f"\n{text}" for k in ROLE_KEYS) else None
    if not any(isinstance(data.get(k), dict) for k in ROLE_KEYS):
        return None
    return recognise(data)[0]


def native(path: Path) -> tuple[str, str]:
    """("ok" | "unknown keys only" | "error", detail)."""
    try:
        load_config(path)
        return "ok", ""
    except ConfigError as error:
        first = str(error)
    try:
        layered = load_layers(path)
    except ConfigError as error:
        return "error", str(error)
    layered.data = _resolved_without_helpers(layered.data)
    removed = remove_unknown_keys(layered.data)
    if not removed:
        return "error", first
    try:
        load_config_layers(layered)
        return "unknown keys only", f"{len(removed)} unknown keys"
    except ConfigError as error:
        return "error", f"{len(removed)} unknown keys, then: {error}"


def _resolved_without_helpers(data: dict) -> dict:
    """`data` with its `${...}` resolved and its top-level helpers dropped, when it resolves
    as written: then a whole helper sub-tree copied into a schema field
    (`custom_envs.X: ${custom_env.X}`) is searched for unknown keys at its new place. When
    it does not resolve (a reference into a key that is itself unknown), `data` unchanged."""
    try:
        resolved = resolve_references(data, schema=PipelineConfig)
    except ConfigError:
        return data
    return without(resolved, helper_keys(data, PipelineConfig))


def remove_unknown_keys(data: dict) -> list[str]:
    """Delete every key the schema does not know, at any depth, from `data`; the removed key
    paths. Repeats until nothing changes: a top-level helper referenced only from keys
    removed in one round (`offload_nccl: ${offload_nccl}` under a role) is no helper any
    more, and goes in the next."""
    removed: list[str] = []
    while True:
        found = _remove_unknown(data, helper_keys(data, PipelineConfig))
        if not found:
            return removed
        removed += found


def _remove_unknown(data: dict, helpers: set[str], path: tuple = ()) -> list[str]:
    removed = []
    for key in list(data):
        child = path + (key,)
        if not path and key in helpers:
            continue
        try:
            type_ = field_type_at(child, PipelineConfig)
        except ConfigError:
            del data[key]
            removed.append(".".join(map(str, child)))
            continue
        if isinstance(data[key], dict) and type_ is not dict:
            removed += _remove_unknown(data[key], helpers, child)
    return removed


def check(root: Path, envs: bool = True) -> dict:
    rows = []
    for path in sorted((root / "examples").rglob("*.y*ml")):
        kind = kind_of(path)
        if kind is None:
            continue
        row = {"file": str(path.relative_to(root)), "kind": kind}
        try:
            conversion = convert_roll(path)
        except ConfigError as error:  # unreadable with ROLL's leniency: ROLL fails too
            row.update(roll_loads=False, reason=str(error))
            rows.append(row)
            continue
        try:
            source = resolve_references(load_layers(path).data, schema=PipelineConfig)
        except ConfigError:  # a reference ROLL resolves and flywheel's resolver does not
            source = load_layers(path).data
        row.update(roll_loads=True, converted=not conversion.missing and not conversion.typos,
                   missing=conversion.missing, typos=conversion.typos,
                   ignored=conversion.ignored, vl=kind == "rlvr" and is_vl(source),
                   **megatron_fate(source, conversion))
        if row["file"] in EXCEPTED and not row["converted"]:
            row["excepted"] = EXCEPTED[row["file"]]
        if envs and kind == "agentic" and row["converted"]:
            row["env_errors"] = env_errors(conversion.data)
        row["native"], row["native_detail"] = native(path)
        rows.append(row)
    return {"rows": rows, "summary": summarize(rows)}


def megatron_fate(source: dict, conversion) -> dict:
    """For a file with a role on Megatron (megatron_train / megatron_infer): those roles,
    whether the conversion moved one off Megatron (to deepspeed_train), and the Megatron
    strategy_config keys it dropped (each `dropped` line names its key path)."""
    roles = sorted(name for name, role in source.items() if isinstance(role, dict) and str(
        (role.get("strategy_args") or {}).get("strategy_name", "")).startswith("megatron"))
    if not roles:
        return {}
    prefixes = tuple(f"{name}.strategy_args.strategy_config" for name in roles)
    dropped = [d.split(":")[0] for d in conversion.dropped if d.startswith(prefixes)]
    moved = [m.split(":")[0] for m in conversion.mapped if m.startswith(tuple(
        f"{name}.strategy_args: megatron" for name in roles))]
    return {"megatron_roles": roles, "megatron_moved": moved,
            "megatron_dropped": sorted({d.split(".", 3)[-1] for d in dropped})}


def env_errors(data: dict) -> list[str]:
    """"tag: error" for each played env tag of a converted agentic config that fails to
    build (flywheel.envs.make with its env_config) or to start an episode; a tag with
    tool_use is built with its tools (the sandbox probe, the search index) and reset."""
    from flywheel.config.checks.import_allowlist import allowed_prefixes
    from flywheel.envs import make  # the envs and tools only this check needs
    from flywheel.pipelines.config import load_config_dict
    from flywheel.tools.from_config import tool_box, with_tools
    cfg = load_config_dict(data)
    errors = []
    for tag in sorted({*cfg.train_env_manager.tags, *cfg.val_env_manager.tags}):
        env = cfg.custom_envs[tag]
        try:
            built = make(env.env_type, **env.env_config)
            if env.tool_use is not None:
                box = tool_box(env.tool_use, allowed_prefixes(cfg),
                               f"custom_envs.{tag}.tool_use")
                built = with_tools(built, box, env.tool_use)
            built.reset(seed=0)
            built.close()
        except Exception as error:  # noqa: BLE001 - reported per tag
            errors.append(f"{tag}: {error}")
    return errors


def per_pipeline(rows: list[dict]) -> dict:
    """For each of ROLL's pipelines: files, how many ROLL loads, how many convert and
    validate, and what the others need (features counted; "pipeline X" for the files of a
    pipeline flywheel does not run)."""
    table = {}
    for name in NAMES:
        mine = [r for r in rows if r["kind"] == name]
        loads = [r for r in mine if r["roll_loads"]]
        needs = collections.Counter(m.split(":")[0] if m.startswith("pipeline ")
                                    else m.split(" (")[0]
                                    for r in loads if not r["converted"] for m in r["missing"])
        table[name] = {"files": len(mine), "roll_loads": len(loads),
                       "converted_and_valid": sum(r["converted"] for r in loads),
                       "not_converted_need": dict(needs.most_common())}
    return table


def summarize(rows: list[dict]) -> dict:
    loads = [r for r in rows if r["roll_loads"]]
    features = collections.Counter(m.split(" (")[0] for r in loads for m in r["missing"])
    per_kind = {k: sum(1 for r in loads if r["kind"] == k) for k in ("rlvr", "agentic")}
    return {
        "per_pipeline": per_pipeline(rows),
        "candidates": len(rows), "roll_loads": len(loads), "roll_loads_by_kind": per_kind,
        "roll_fails": [f"{r['file']}: {r['reason']}" for r in rows if not r["roll_loads"]],
        "native_ok": sum(r["native"] == "ok" for r in loads),
        "native_unknown_keys_only": sum(r["native"] == "unknown keys only" for r in loads),
        "native_other_errors": sum(r["native"] == "error" for r in loads),
        "converted_and_valid": sum(r["converted"] for r in loads),
        "converted_by_kind": {k: sum(1 for r in loads if r["kind"] == k and r["converted"])
                              for k in ("rlvr", "agentic")},
        "agentic_converted_envs_build": sum(1 for r in loads if r.get("converted") and
                                            r["kind"] == "agentic"
                                            and not r.get("env_errors", ["not built"])),
        "not_converted_missing_features": dict(features.most_common()),
        "megatron": _megatron_summary(loads),
        "vl_rlvr": {"files": sum(1 for r in loads if r.get("vl")),
                    "converted_and_valid": sum(1 for r in loads if r.get("vl") and
                                               r["converted"]),
                    "excepted_by_name": {r["file"]: r["excepted"] for r in loads
                                         if "excepted" in r},
                    "refused": {r["file"]: r["missing"] for r in loads if r.get("vl")
                                and not r["converted"] and "excepted" not in r}},
    }


def pipeline_table(table: dict) -> str:
    """The per-pipeline counts as a Markdown table."""
    lines = ["| ROLL pipeline | files | ROLL loads | converted and valid | the rest need |",
             "|---|---|---|---|---|"]
    for name, row in table.items():
        need = ", ".join(f"{k} ({n})" for k, n in row["not_converted_need"].items()) or "-"
        lines.append(f"| {name} | {row['files']} | {row['roll_loads']} | "
                     f"{row['converted_and_valid']} | {need} |")
    return "\n".join(lines)


def _megatron_summary(loads: list[dict]) -> dict:
    """Files with a Megatron role: how many convert (valid) keeping every Megatron key on
    Megatron, how many a conversion moves off it, and the Megatron keys dropped, counted
    over files."""
    files = [r for r in loads if r.get("megatron_roles")]
    kept = [r for r in files if r["converted"] and not r["megatron_moved"]
            and not r["megatron_dropped"]]
    dropped = collections.Counter(k for r in files if not r["megatron_moved"]
                                  for k in r["megatron_dropped"])
    return {"files": len(files),
            "converted_on_megatron_dropping_no_key": len(kept),
            "on_megatron_dropping_a_key": sum(1 for r in files if not r["megatron_moved"]
                                             and r["megatron_dropped"]),
            "moved_off_megatron": sum(1 for r in files if r["megatron_moved"]),
            "dropped_keys_on_megatron": dict(dropped.most_common())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roll", type=Path, help="a ROLL checkout (with examples/)")
    parser.add_argument("--json", type=Path, default=None, help="write every row here")
    parser.add_argument("--list", action="store_true", help="print one line per file")
    parser.add_argument("--skip-envs", action="store_true",
                        help="do not build the converted agentic files' envs (faster)")
    args = parser.parse_args(argv)
    if not (args.roll / "examples").is_dir():
        print(f"error: {args.roll}: no examples/ folder (expected a ROLL checkout)",
              file=sys.stderr)
        return 2
    result = check(args.roll, envs=not args.skip_envs)
    if args.list:
        for r in result["rows"]:
            status = ("ROLL fails" if not r["roll_loads"] else
                      f"native {r['native']}; " + ("converts" if r["converted"] else
                                                   f"{len(r['missing'])} missing"))
            print(f"{r['kind']:8} {status:55} {r['file']}")
    print(pipeline_table(result["summary"]["per_pipeline"]))
    print(json.dumps(result["summary"], indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
