"""The teachers' log-probs from the scoring job to a training batch's advantages
(pipelines/distill/teacher_scoring.py, opd_batch.py), without Ray: a teacher's [rows, L]
forward result is cut into each response's values, laid back onto the batch's columns, and
its term added as the mode says."""

import pytest
import torch

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.records import PromptRecord
from flywheel.pipelines.distill.opd_batch import add_opd, attach_teacher_scores, teacher_scores
from flywheel.pipelines.distill.teacher_scoring import (
    TeacherPart,
    rows_of,
    write_teacher_log_probs,
)
from flywheel.pipelines.rlvr.generation import Group, group_from_dict, group_to_dict
from flywheel.pipelines.rlvr.train_batch import pack_groups
from flywheel.workers.strategies.base import Generation


def group(seq, tag, prompt, responses):
    record = PromptRecord(id=str(seq), prompt="p", answer="a", tag=tag)
    gens = [Generation(0, ids, [-1.0] * len(ids), "stop") for ids in responses]
    return Group(seq, record, prompt, gens, version=0, scores=[1.0] * len(responses))


def test_rows_are_padded_to_the_teachers_ranks_with_the_first_row():
    groups = [group(0, "a", [1, 2], [[3], [4, 5]]), group(1, "b", [6], [[7, 8, 9]])]
    prompts, responses = rows_of(groups, [0, 1], world_size=2)
    assert prompts == [[1, 2], [1, 2], [6], [1, 2]]
    assert responses == [[3], [4, 5], [7, 8, 9], [3]]


def test_a_teachers_result_becomes_each_responses_values_and_the_batch_columns():
    groups = [group(0, "a", [1, 2], [[3], [4, 5]]), group(1, "b", [6], [[7, 8, 9]])]
    # what forward_logprobs returns: aligned with input_ids (prompt columns first)
    result = torch.tensor([[0.0, -9.0, -0.1, 0.0],
                           [0.0, -9.0, -0.2, -0.3],
                           [0.0, -0.4, -0.5, -0.6]])
    write_teacher_log_probs(groups, TeacherPart("t", None, [], [0, 1], [2, 1]), result)
    assert groups[0].teacher_log_probs["t"] == [pytest.approx([-0.1]),
                                               pytest.approx([-0.2, -0.3])]
    assert groups[1].teacher_log_probs["t"] == [pytest.approx([-0.4, -0.5, -0.6])]
    assert group_from_dict(group_to_dict(groups[1])).teacher_log_probs == (
        groups[1].teacher_log_probs)  # kept in a checkpoint's buffer
    batch = pack_groups(groups, pad_id=0)
    attach_teacher_scores(groups, batch, ["t"])
    scores = teacher_scores(batch.select(slice(0, 3)), ["t"])  # extras travel with the rows
    torch.testing.assert_close(scores.log_probs["t"] * batch.response_mask,
                               result * batch.response_mask)
    assert scores.routes["t"].tolist() == [True, True, True]


def test_add_opd_in_pure_and_mixed_mode():
    g = group(0, "a", [1], [[2, 3]])
    g.responses[0].log_probs = [-1.0, -2.0]  # the student's sampled log-probs
    g.teacher_log_probs = {"t": [[-0.5, -2.5]]}  # r = [0.5, -0.5]
    batch = pack_groups([g], pad_id=0)
    attach_teacher_scores([g], batch, ["t"])
    scores = teacher_scores(batch, ["t"])
    rl = torch.tensor([[0.0, 1.0, 1.0]])
    to_go = torch.tensor([[0.0, -0.1, -0.05]])
    for mode, base in (("pure", to_go), ("mixed", rl)):
        cfg = load_config_dict({"teacher": {"t": {"opd_kl_coef": 2.0}}, "opd_mode": mode})
        adv, metrics = add_opd(rl, to_go, batch, scores, cfg)
        torch.testing.assert_close(adv, base + torch.tensor([[0.0, 1.0, -1.0]]))
        assert metrics["distill/reverse_kl"] == pytest.approx(0.0)
