"""DPO on deepspeed_train ranks (pipelines/dpo/run.py, sft/trainers.py): the same pairs on
two ZeRO ranks as Ray workers, the reference a frozen cluster of the same backend beside
them, equal to the in-driver hf_train DPO on one rank of the whole batch (the update
loop's counts are global, so two ranks of 2 pairs are one rank of 4). The in-suite check
is the piece that makes that so without Ray: a step's pairs split over ranks, each shard
scaled by the global pair count, sum to the whole batch's loss and gradient.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from flywheel.algorithms.preference.pair_logprobs import PAIR_EXTRA, pair_layout
from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.run.launch import run
from flywheel.workers.batch import pack_sequences
from flywheel.workers.pair_objective import PairObjective
from flywheel.workers.strategies.train_loop import local_counts


def pairs_file(path, n=12):
    path.write_text("".join(json.dumps({"prompt": f"{a}*3=", "chosen": str(3 * a),
                                        "rejected": str(3 * a + 1)}) + "\n"
                            for a in range(2, 2 + n)))
    return str(path)


def dpo(tmp_path, name, pairs_per_rank, ranks, **extra):
    train = pairs_file(tmp_path / "pairs.jsonl")
    val = pairs_file(tmp_path / "val.jsonl", n=4)
    actor = {"model_args": {"dtype": "fp32"},
             "training_args": {"learning_rate": 1e-3,
                               "per_device_train_batch_size": pairs_per_rank},
             "data_args": {"file_name": train}}
    if ranks > 1:  # two ZeRO-1 ranks on device slots 0 and 1
        actor |= {"strategy_args": {"strategy_name": "deepspeed_train",
                                    "strategy_config": {"zero_stage": 1}},
                  "device_mapping": list(range(ranks))}
    return load_config_dict({
        "pipeline_type": "dpo", "pretrain": "builtin://tiny-qwen2", "seed": 0,
        "output_dir": str(tmp_path / name), "sequence_length": 16, "response_length": 3,
        "max_steps": 3, "eval_steps": 3, "beta": 0.5, "tracking": {"backends": ["jsonl"]},
        "actor_train": actor, "validation": {"data_args": {"file_name": val}}, **extra})


def test_a_steps_pairs_split_over_ranks_sum_to_the_whole_batchs_loss_and_gradient():
    torch.manual_seed(0)
    batch = pack_sequences([[1, 2]] * 8, [[3, 4, 5], [6, 7]] * 4, 0)
    batch.attach(PAIR_EXTRA, pair_layout(list(range(4))), per="sample")
    batch.ref_log_probs = -torch.rand(batch.input_ids.shape)
    logps = (-torch.rand(batch.input_ids.shape)).requires_grad_()
    loss = PairObjective("sigmoid")
    whole, _ = loss(logps, None, batch, local_counts(batch))
    (whole_grad,) = torch.autograd.grad(whole, logps)
    counts = local_counts(batch)  # the global counts every rank is handed
    parts = [loss(logps[i * 4:(i + 1) * 4], None, shard, counts)[0]
             for i, shard in enumerate(batch.shard(2))]
    (split_grad,) = torch.autograd.grad(sum(parts), logps)
    assert float(sum(parts).detach()) == pytest.approx(float(whole.detach()), abs=1e-6)
    assert torch.allclose(split_grad, whole_grad, atol=1e-7)
    assert all(torch.equal(s.extra(PAIR_EXTRA)[::2, 0], s.extra(PAIR_EXTRA)[1::2, 0])
               for s in batch.shard(2))  # each rank's share holds whole pairs


def rows(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.long  # two ZeRO ranks and two frozen reference ranks through Ray: ~1 min
def test_dpo_on_two_zero_ranks_equals_the_in_driver_run(tmp_path, capsys):
    ranks_dir = run(dpo(tmp_path, "ranks", pairs_per_rank=2, ranks=2))
    said = capsys.readouterr().out
    assert ("actor_train: 2 deepspeed_train ranks" in said
            and "reference: 2 frozen deepspeed_train ranks on its devices" in said)
    logs = sorted(p.name for p in (ranks_dir / "logs").iterdir())
    assert {name.split(".")[0].split("-")[0] for name in logs} == {"actor_train",
                                                                   "reference"}, logs
    hf_dir = run(dpo(tmp_path, "hf", pairs_per_rank=4, ranks=1))
    on_ranks, in_driver = rows(ranks_dir), rows(hf_dir)
    assert [r["step"] for r in on_ranks] == [0, 1, 2, 3]  # 0: the baseline validation
    for key in ("val/dpo/loss", "val/accuracy"):
        assert on_ranks[0][key] == pytest.approx(in_driver[0][key], abs=1e-4), key
    on_ranks, in_driver = on_ranks[1:], in_driver[1:]
    for key in ("dpo/loss", "dpo/reward_margin", "dpo/chosen_logps"):
        assert [r[key] for r in on_ranks] == pytest.approx([r[key] for r in in_driver],
                                                           abs=1e-4), key
    # the steps after the first compare updated policies (step 1's is the reference: h = 0)
    assert on_ranks[0]["dpo/reward_margin"] == 0.0
    assert min(abs(r["dpo/reward_margin"]) for r in on_ranks[1:]) > 1e-3
    for key in ("val/dpo/loss", "val/dpo/reward_margin", "val/accuracy"):
        assert on_ranks[-1][key] == pytest.approx(in_driver[-1][key], abs=1e-4), key
    ranks_weights = load_file(ranks_dir / "checkpoint-3" / "model.safetensors")
    hf_weights = load_file(hf_dir / "checkpoint-3" / "model.safetensors")
    assert ranks_weights.keys() == hf_weights.keys()
    assert max(float((ranks_weights[k] - hf_weights[k]).abs().max()) for k in hf_weights) < 1e-4
