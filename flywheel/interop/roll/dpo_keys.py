"""ROLL's DPO pipeline (`roll/pipeline/dpo`): the keys it reads and how each becomes
flywheel's `pipeline_type: dpo`, for the converter's per-pipeline key tables.

Read from ROLL's `roll/pipeline/dpo/dpo_config.py` (`DPOConfig`, on BaseConfig) and
`dpo_pipeline.py` at its current main, as facts about its file format. ROLL's DPO reads
BaseConfig's run keys (exp_name, seed, max_steps, save_steps, logging_steps, eval_steps,
sequence_length, pretrain, output_dir, ...: the RLVR table's rules hold for them) and its
own, below. `DPO_TOP` holds its own keys' defaults; `DPO_TOP_RULES` how each converts,
with the rule types of rules.py; `DPO_NOTES` what differs in meaning where the name is
the same. Which table applies to a file (ROLL's pipeline recognition) is the converter's
seam, not this module's.
"""

from __future__ import annotations

from typing import Any

from flywheel.interop.roll.rules import SAME, Drop, Missing, Rule, To

# DPOConfig's own fields and their defaults
DPO_TOP: dict[str, Any] = {
    "global_template": None, "max_grad_norm": 1.0, "pretrain": None, "ipo": False,
    "beta": 0.1, "label_smoothing": 0.0, "chosen_key": "chosen", "rejected_key": "rejected",
    "validation": None, "actor_train": None, "reference": None,
}

DPO_TOP_RULES: dict[str, Rule] = {
    # the loss: ROLL's ipo switch is flywheel's ipo (read as dpo_loss_type: ipo); the forms
    # are the same (algorithms/preference/pair_losses.py: IPO on summed log-probs, as ROLL)
    "ipo": SAME,
    "beta": SAME,
    "label_smoothing": SAME,
    "chosen_key": SAME,
    "rejected_key": SAME,
    "global_template": To("/actor_train/data_args/template"),  # as RLVR's
    "max_grad_norm": To("/actor_train/training_args/max_grad_norm"),
    "pretrain": SAME,
    # ROLL builds one validation loader of pairs and logs the DPO loss on it; flywheel's
    # validation block reads the same file (val/dpo/*, plus greedy val/accuracy)
    "validation": SAME,
    "actor_train": SAME,
    # only the reference's model acts in flywheel (a frozen copy on actor_train's backend
    # and devices); ROLL's reference strategy / devices / infer_batch_size are reported
    # (DPO_NOTES)
    "reference": SAME,
    # BaseConfig keys a DPO file carries that mean nothing to ROLL's DPO loop either
    "rollout_batch_size": Drop("ROLL's DPO batches by actor_train's batch size, not by it"),
    "num_return_sequences_in_group": Drop("ROLL's DPO samples nothing"),
    "is_offload_states": Drop("a memory knob; flywheel's DPO keeps its models on their "
                              "devices"),
    "is_offload_optimizer_states_in_train_step": Drop("a memory knob, as is_offload_states"),
    "use_sequence_packing": Missing("sequence packing in ROLL's DPO (ROLL refuses it)"),
}

# What differs where ROLL's key converts as is (the converter's report lines)
DPO_NOTES: dict[str, str] = {
    "actor_train.training_args.per_device_train_batch_size":
        "pairs per device in both (ROLL doubles it into rows internally, as flywheel does)",
    "actor_train.infer_batch_size": "rows per forward in flywheel; ROLL doubles it for pairs",
    "actor_train.training_args.num_train_epochs":
        "the same in both: the run stops at max_steps or after int(epochs) whole passes "
        "over the pairs (each epoch's last partial batch left out), whichever comes first",
    "actor_train.data_args.prompt": "ROLL's DPO reads the prompt from the column "
                                    "'instruction' whatever data_args say: the converted "
                                    "file sets actor_train.data_args.prompt: instruction "
                                    "(and validation's)",
    "eval_steps": "ROLL's DPO also validates before its first step (step 0 is a multiple); "
                  "flywheel's first validates at step eval_steps, and after the last",
    "sequence_length": "ROLL drops pairs whose chosen or rejected ids (prompt included) are "
                       "over it without a count; flywheel drops and counts them "
                       "(overlong_pairs: drop)",
    "actor_train.strategy_args": "ROLL's examples train on megatron_train; flywheel's DPO "
                                 "trains on hf_train in process or on deepspeed_train ranks",
    "reference": "ROLL runs the reference as a role of its own backend and devices; "
                 "flywheel's is a frozen copy of its model on actor_train's backend and "
                 "devices, in actor_train's precision (only model_args.model_name_or_path "
                 "acts)",
}

# what a converted ROLL DPO file gains: ROLL's fixed prompt column, and the kind
DPO_IMPLIED: dict[str, Any] = {
    "pipeline_type": "dpo",
    "actor_train.data_args.prompt": "instruction",
}


def dpo_top_keys(roll: dict[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    """(flywheel top-level values, report lines, missing features) for the DPO keys of a
    ROLL file's top level: each key mapped, dropped with its reason, or named as missing;
    the keys of no DPO rule are left to the RLVR table (BaseConfig's)."""
    out: dict[str, Any] = {"pipeline_type": "dpo"}
    lines, missing = [], []
    for key, value in roll.items():
        rule = DPO_TOP_RULES.get(key)
        if rule is None or key in ("validation", "actor_train", "reference"):
            continue
        if isinstance(rule, Drop):
            lines.append(f"{key}: dropped ({rule.reason})")
        elif isinstance(rule, Missing):
            if value not in (None, False, 0, "", DPO_TOP.get(key)):
                missing.append(f"{key}: {rule.feature}")
        elif isinstance(rule, To):
            lines.append(f"{key} -> {rule.path.strip('/').replace('/', '.')}: {value}")
            node = out
            *parents, leaf = rule.path.strip("/").split("/")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        else:
            out[key] = value
    data = out.setdefault("actor_train", {}).setdefault("data_args", {})
    data.setdefault("prompt", DPO_IMPLIED["actor_train.data_args.prompt"])
    lines.append(f"actor_train.data_args.prompt: instruction ("
                 f"{DPO_NOTES['actor_train.data_args.prompt']})")
    return out, lines, missing
