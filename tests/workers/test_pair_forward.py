"""Both responses of a pair in one forward (workers/pair_objective.py, pair_logprobs.py).

A pair's chosen and rejected sequence log-probs from one forward over the batch of pairs
(padded, packed end to end, and with shared prefixes, where the pair's prompt is laid once)
equal those of each row run alone, to 1e-6; and the pairwise objective's step does not
depend on how the mini-batch is cut into micro-batches. Tiny model, fp32, CPU.
"""

from __future__ import annotations

import pytest
import torch
from backend_cases import stepped_grads

from flywheel.algorithms.preference.pair_logprobs import PAIR_EXTRA, pair_layout, pair_logps
from flywheel.algorithms.preference.pair_losses import PairLossArgs
from flywheel.config.schema import TrainingArgs, WorkerConfig
from flywheel.workers.batch import pack_sequences
from flywheel.workers.pair_objective import PairObjective
from flywheel.workers.strategies.hf_model import sequence_logprobs
from flywheel.workers.strategies.hf_train import HFTrainStrategy
from flywheel.workers.strategies.sequence_packing import PackingPlan

# three pairs: prompts of 5, 8 and 3 tokens; chosen / rejected of uneven lengths
PROMPTS = [[1, 20, 21, 15, 22], [1, 23, 24, 25, 26, 27, 28, 29], [1, 30, 31]]
CHOSEN = [[40, 41, 2], [42, 2], [43, 44, 45, 46, 2]]
REJECTED = [[50, 2], [51, 52, 53, 54, 2], [55, 56, 2]]


def pair_batch():
    prompts = [p for p in PROMPTS for _ in range(2)]
    responses = [r for pair in zip(CHOSEN, REJECTED) for r in pair]
    batch = pack_sequences(prompts, responses, pad_id=0)
    batch.attach(PAIR_EXTRA, pair_layout([0, 1, 2]), per="sample")
    return batch


@pytest.fixture(scope="module")
def model(tiny_model_path):
    # float64: the 1e-6 then measures the layout, not fp32 rounding of a sum near -20
    # (fp32 differs there by 1-2 ulp, 2e-6, between any two batch shapes)
    return HFTrainStrategy(tiny_model_path, WorkerConfig(), seed=0, total_steps=1).model.double()


@pytest.fixture(scope="module")
def separate(model):
    """Each row's sequence log-prob from a forward of that row alone."""
    batch = pair_batch()
    sums = []
    for i in range(len(batch)):
        row = batch.select(slice(i, i + 1)).trimmed()
        with torch.no_grad():
            lp, _ = sequence_logprobs(model, row, positions=row.response_mask)
            sums.append(float((lp * row.response_mask).sum()))
    return torch.tensor(sums, dtype=torch.float64)


@pytest.mark.parametrize("plan", [None, PackingPlan(0), PackingPlan(24, share_prefix=True)],
                         ids=["padded", "packed", "shared_prefix"])
def test_one_forward_equals_separate_forwards(model, separate, plan):
    batch = pair_batch()
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, batch, positions=batch.response_mask, packing=plan)
    p = pair_logps(lp, batch.response_mask, batch.extra(PAIR_EXTRA))
    assert torch.allclose(p.chosen.double(), separate[0::2], atol=1e-6, rtol=0)
    assert torch.allclose(p.rejected.double(), separate[1::2], atol=1e-6, rtol=0)
    assert p.chosen_tokens.tolist() == [3.0, 2.0, 5.0]


def test_shared_prefix_packing_lays_a_pairs_prompt_once():
    batch = pair_batch()
    packing = PackingPlan(0, share_prefix=True).pack(batch.input_ids, batch.attention_mask,
                                                     batch.response_mask)
    laid = int((packing.piece > 0).sum())  # tokens of prefixes and continuations
    responses = sum(len(r) for r in CHOSEN + REJECTED)
    assert laid == sum(len(p) for p in PROMPTS) + responses  # each prompt once


def trained(model_path, per_device, accum, batch):
    cfg = WorkerConfig(training_args=TrainingArgs(
        learning_rate=1e-2, per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accum, max_grad_norm=0.0))
    strategy = HFTrainStrategy(model_path, cfg, seed=0, total_steps=1)
    grads = stepped_grads(strategy)
    with torch.no_grad():
        batch.ref_log_probs = strategy.forward(batch)  # the reference: the start weights
    metrics = strategy.train_step(batch, PairObjective("sigmoid", PairLossArgs(beta=0.5)))
    return metrics, grads[0]


def test_the_pair_step_does_not_depend_on_the_micro_batch_cut(tiny_model_path):
    batch = pair_batch()
    whole, g1 = trained(tiny_model_path, 6, 1, batch)
    cut, g2 = trained(tiny_model_path, 2, 3, batch)  # one pair per micro-batch
    # at the reference's weights h = 0: loss log 2 for every pair, margin 0
    assert whole["dpo/loss"] == pytest.approx(0.6931472, abs=1e-6)
    assert cut["dpo/loss"] == pytest.approx(whole["dpo/loss"], abs=1e-6)
    assert whole["actor/grad_norm"] > 0
    assert cut["actor/grad_norm"] == pytest.approx(whole["actor/grad_norm"], rel=1e-5)
    for name, grad in g1.items():
        assert torch.allclose(g2[name], grad, atol=1e-7, rtol=1e-4), name


def test_the_reward_model_objective_reads_each_pairs_margin():
    from flywheel.workers.pair_objective import MARGIN_EXTRA, BradleyTerryObjective
    from flywheel.workers.strategies.train_loop import Counts

    # two pairs, scores read at the one response column: (1.0, 0.5) margin 1, (2.0, 0.0) m 0
    batch = pack_sequences([[1, 2]] * 4, [[0]] * 4, pad_id=0)
    outputs = torch.zeros(4, 3)
    outputs[:, 2] = torch.tensor([1.0, 0.5, 2.0, 0.0])
    batch.attach(PAIR_EXTRA, pair_layout([0, 1]), per="sample")
    batch.attach(MARGIN_EXTRA, torch.tensor([1.0, 1.0, 0.0, 0.0]), per="sample")
    loss, metrics = BradleyTerryObjective()(outputs, None, batch, Counts(4.0, 4.0))
    # (-log sigma(0.5 - 1) - log sigma(2)) / 2 = (0.9740770 + 0.1269280) / 2
    assert float(loss) == pytest.approx((0.9740769842 + 0.1269280110) / 2, abs=1e-6)
    assert metrics["rm/accuracy"] == 1.0
