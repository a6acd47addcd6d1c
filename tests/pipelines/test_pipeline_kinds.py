"""The pipeline-kinds catalog (flywheel/config/kinds.py), the estimator catalog
(flywheel/algorithms/estimators.py) and batch extras (flywheel/workers/batch.py): names
checked against the catalogs in one line, checks that ask an entry and never a kind's name,
and extras that travel with their rows. A registered kind and estimator run a real step in
tests/pipelines/test_registration.py."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from flywheel.algorithms.estimators import ESTIMATORS
from flywheel.config.kinds import KINDS, PipelineKind, register_kind
from flywheel.pipelines.agentic.batch import fit_rows
from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.batch import TokenBatch, pack_sequences
from flywheel.workers.strategies.registry import STRATEGIES

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("data, message", [
    ({"pipeline_type": "kto"}, "pipeline_type: unknown pipeline_type 'kto'; known: rlvr, "
                               "agentic, agent, sft, evaluate, dpo, online_dpo, reward_model"),
    ({"adv_estimator": "grp"}, "adv_estimator: unknown adv_estimator 'grp' (did you mean "
                               "'grpo'?); known: grpo, reinforce, gae, step_reinforce, gigpo"),
])
def test_a_name_no_catalog_has_is_one_line_listing_the_known(data, message):
    with pytest.raises(ConfigError) as info:
        load_config_dict(data)
    assert message in str(info.value) and "\n" not in str(info.value)


# `cfg.pipeline_type == "sft"`, `data.get("pipeline_type") != "agentic"`, `... in OWN_LOOPS`
COMPARISON = re.compile(r"pipeline_type\b([\"'][^)\n]*\))?\s*(==|!=|in\s|not\s+in\s)"
                        r"|(==|!=)\s*[\w.]*pipeline_type\b")


def lines_matching(pattern: re.Pattern, owner: str) -> list[str]:
    """`path:line: text` of every line of flywheel/ matching `pattern`, outside the files
    named `owner` (the catalog that may name them) and the ROLL interop (ROLL's names)."""
    return [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for path in (ROOT / "flywheel").rglob("*.py")
            if path.name != owner and "interop" not in path.parts
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if pattern.search(line)]


def test_no_check_compares_pipeline_type_outside_the_catalog():
    """Checks ask the kind's entry (kind_of(cfg).rl, .rewards, ...), so a new kind is never
    classified by exclusion; ROLL's own pipeline names (interop/) are ROLL's."""
    found = lines_matching(COMPARISON, "kinds.py")
    assert not found, "\n".join(found)


def test_the_comparison_pattern_finds_what_it_forbids():
    for line in ('if cfg.pipeline_type == "sft":', 'data.get("pipeline_type", "x") != "rlvr"',
                 "if cfg.pipeline_type in OWN_LOOPS:", '"rlvr" == cfg.pipeline_type'):
        assert COMPARISON.search(line), line
    assert not COMPARISON.search("kind = kind_of(cfg)  # pipeline_type's entry")


@pytest.fixture
def own_kinds():
    before = dict(KINDS)
    yield
    KINDS.clear()
    KINDS.update(before)


def test_a_kind_that_reads_the_reference_keeps_it_without_a_kl_term(own_kinds):
    """OPD's shape: a teacher's log-probs read by the kind's loss, no KL term."""
    data = {"reference": {}, "actor_train": {"data_args": {
        "file_name": ["builtin://arithmetic/train"]}}}
    with pytest.raises(ConfigError, match="reference: acts only with use_kl_loss: true or "
                                          "init_kl_coef > 0"):
        load_config_dict(data)
    register_kind("reads_reference", dataclasses.replace(KINDS["rlvr"],
                                                         reads_roles=("reference",)))
    cfg = load_config_dict({**data, "pipeline_type": "reads_reference"})
    assert cfg.reference is not None and not cfg.use_kl_loss and cfg.init_kl_coef == 0


def test_a_kind_without_a_role_refuses_its_block(own_kinds):
    register_kind("no_critic", dataclasses.replace(KINDS["rlvr"],
                                                   roles=("actor_infer", "reference")))
    with pytest.raises(ConfigError, match="critic: pipeline_type no_critic has no critic "
                                          "role: remove it"):
        load_config_dict({"pipeline_type": "no_critic", "adv_estimator": "gae",
                          "critic": {}})


def test_registration_refuses_a_taken_name_and_a_malformed_entry(own_kinds):
    with pytest.raises(ValueError, match="'rlvr' is already registered"):
        register_kind("rlvr", dataclasses.replace(KINDS["rlvr"], rewards=False))
    register_kind("rlvr", KINDS["rlvr"])  # the same spec again: a no-op
    with pytest.raises(ValueError, match="exactly one of rollout"):
        PipelineKind(rl=True, samples=None, prompts=False, rewards=False)
    with pytest.raises(ValueError, match="must look like 'package.module:attr'"):
        PipelineKind(rl=False, samples=None, prompts=False, rewards=False, run="my.loop")
    assert list(KINDS) == ["rlvr", "agentic", "agent", "sft", "evaluate", "dpo",
                           "online_dpo", "reward_model", "distill"]
    assert list(ESTIMATORS) == ["grpo", "reinforce", "gae", "step_reinforce", "gigpo"]


def _batch() -> TokenBatch:
    batch = pack_sequences([[1, 2], [3], [4, 5, 6], [7]], [[8], [9, 10], [11], [12, 13, 14]],
                           pad_id=0)
    batch.scores = torch.arange(4.0)
    batch.attach("row", torch.tensor([10.0, 11.0, 12.0, 13.0]), per="sample")
    batch.attach("token", batch.input_ids.float() * batch.response_mask, per="token")
    return batch


def test_extras_travel_with_their_rows():
    batch = _batch()
    for part, rows in ((batch.select(torch.tensor([2, 0])), [2, 0]),
                       (batch.chunks(3)[1], [3]), (batch.shard(2)[1], [2, 3]),
                       (batch.to(torch.device("cpu")), [0, 1, 2, 3])):
        assert part.extra("row").tolist() == [10.0 + r for r in rows]
        assert torch.equal(part.extra("token"), part.input_ids.float() * part.response_mask)
    trimmed = batch.select(torch.tensor([0])).trimmed()  # 3 columns of 4
    assert trimmed.extra("token").shape == trimmed.input_ids.shape == (1, 3)
    # agentic's batch_adjust_mode re-rows every field in place (agentic/batch.py)
    fit_rows(batch, "copy", 3, seed=0)
    assert batch.extra("row").tolist() == [10.0 + s for s in batch.scores.tolist()]
    assert torch.equal(batch.extra("token"), batch.input_ids.float() * batch.response_mask)


def test_an_extra_of_the_wrong_shape_or_a_missing_one_is_refused_by_name():
    batch = _batch()
    with pytest.raises(ValueError, match=r"extra 'bad' per token: expected shape \[4, 4\]"):
        batch.attach("bad", torch.zeros(4), per="token")
    with pytest.raises(ValueError, match=r"extra 'bad' per sample: expected shape \[4\]"):
        batch.attach("bad", torch.zeros(3), per="sample")
    with pytest.raises(KeyError, match="no extra 'teacher_log_probs' .*has: row, token"):
        batch.extra("teacher_log_probs")


BACKEND_NAMES = "hf_train|deepspeed_train|megatron_train|sim_train|hf_infer|vllm|sglang|sim_infer"
NAME_LIST = re.compile(rf'"({BACKEND_NAMES})"\s*,\s*"({BACKEND_NAMES})"')


def test_no_backend_name_list_outside_the_registry():
    """Checks ask a backend's capability flags (workers/strategies/registry.py), never a
    list of names a new backend would have to join."""
    found = lines_matching(NAME_LIST, "registry.py")
    assert not found, "\n".join(found)
    assert NAME_LIST.search('LORA_BACKENDS = ("hf_train", "deepspeed_train")')


def test_a_backend_s_capability_flag_decides_where_its_keys_act(monkeypatch):
    data = {"actor_train": {"strategy_args": {"strategy_name": "my_train"},
                            "model_args": {"lora_target": "q_proj", "lora_rank": 4}}}
    monkeypatch.setitem(STRATEGIES, "my_train", dataclasses.replace(STRATEGIES["hf_train"],
                                                                    lora=False))
    with pytest.raises(ConfigError, match="lora_target: acts only on actor_train with "
                                          "hf_train or deepspeed_train"):
        load_config_dict(data)
    monkeypatch.setitem(STRATEGIES, "my_train", dataclasses.replace(STRATEGIES["hf_train"],
                                                                    lora=True))
    assert load_config_dict(data).actor_train.model_args.lora_rank == 4
