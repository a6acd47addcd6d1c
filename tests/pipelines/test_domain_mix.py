"""domain_interleave_probs: each batch's mix of domains, resumable (a pure function of
seed and batch index), and the rules that keep every record in exactly one domain."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.prompt_data import DataError, PromptOrder, PromptRecord
from flywheel.pipelines.rlvr.domain_mix import (
    DomainOrder,
    check_routing,
    domain_quotas,
    split_domains,
    training_order,
)
from flywheel.platform.config.errors import ConfigError


def records(**per_tag: int) -> list[PromptRecord]:
    return [PromptRecord(f"{tag}-{i}", f"{i}+{i}=", str(2 * i), tag)
            for tag, n in per_tag.items() for i in range(n)]


def config(probs: dict, rewards: dict | None = None, **top):
    return load_config_dict({
        "actor_train": {"data_args": {"domain_interleave_probs": probs}},
        **({"rewards": rewards} if rewards is not None else {}), **top})


def test_quotas_fill_each_batch_and_carry_the_rounding():
    probs, size = [0.5, 0.3, 0.2], 8  # 4, 2.4, 1.6 prompts per batch
    given = [0, 0, 0]
    for index in range(500):
        counts = domain_quotas(probs, size, index, given)
        assert sum(counts) == size
        for p, c in zip(probs, counts):
            assert abs(c - p * size) < 2  # each batch within a prompt or two
        given = [g + c for g, c in zip(given, counts)]
        for p, g in zip(probs, given):  # the long-run share is exact within one prompt
            assert abs(g - p * size * (index + 1)) < 1


def test_batches_hold_the_mix_over_many_batches():
    cfg = config({"math": 0.7, "code": 0.3})
    order = training_order(records(math=50, code=13), cfg)
    assert isinstance(order, DomainOrder)
    size, batches = 10, 300
    totals = Counter()
    for b in range(batches):
        tags = Counter(r.tag for r in order.batch(b, size))
        assert sum(tags.values()) == size
        assert (tags["math"], tags["code"]) == (7, 3)  # 0.7 and 0.3 of 10 are whole
        totals.update(tags)
    assert totals == {"math": 7 * batches, "code": 3 * batches}
    # An inexact share (0.35 of 10 = 3.5 per batch) alternates and averages out.
    order = training_order(records(math=50, code=13), config({"math": 0.65, "code": 0.35}))
    counts = [Counter(r.tag for r in order.batch(b, size))["code"] for b in range(batches)]
    assert set(counts) <= {3, 4}
    assert abs(sum(counts) / batches - 3.5) < 0.01


def test_same_seed_and_index_give_the_same_batch_whatever_came_before():
    cfg = config({"math": 0.6, "code": 0.4}, seed=7)
    data = records(math=30, code=11)
    walked = training_order(data, cfg)
    in_order = [walked.batch(b, 8) for b in range(40)]
    fresh = training_order(data, cfg)  # a resumed run: asks for batch 33 first
    assert [r.id for r in fresh.batch(33, 8)] == [r.id for r in in_order[33]]
    assert [r.id for r in fresh.batch(5, 8)] == [r.id for r in in_order[5]]  # backwards too
    other_seed = training_order(data, config({"math": 0.6, "code": 0.4}, seed=8))
    assert [r.id for r in other_seed.batch(0, 8)] != [r.id for r in in_order[0]]


def test_each_domain_goes_through_its_records_epoch_by_epoch():
    data = records(math=40, code=6)
    order = training_order(data, config({"math": 0.5, "code": 0.5}))
    drawn = [r for b in range(6) for r in order.batch(b, 4)]  # 12 of each domain
    code = [r.id for r in drawn if r.tag == "code"]
    assert sorted(code[:6]) == sorted(code[6:12]) == sorted(f"code-{i}" for i in range(6))
    math = [r.id for r in drawn if r.tag == "math"]
    assert len(set(math)) == 12  # the large domain is still in its first epoch


def test_a_batch_interleaves_its_domains():
    order = training_order(records(math=40, code=40), config({"math": 0.5, "code": 0.5}))
    tags = [r.tag for r in order.batch(0, 8)]
    assert tags[:4].count("code") == 2  # not all of one domain first


def test_without_probs_the_order_is_todays():
    data = records(math=10, code=10)
    order = training_order(data, config({}))
    assert isinstance(order, PromptOrder)
    assert order.batch(2, 4) == PromptOrder(data, seed=42).batch(2, 4)


def test_keys_may_name_rewards_as_in_roll():
    rewards = {"math_rule": {"tag_included": ["gsm8k", "math500"]},
               "other": {"tag_included": ["code"]}}
    cfg = config({"math_rule": 0.75, "other": 0.25}, rewards)
    domains = split_domains(records(gsm8k=5, math500=3, code=4), cfg)
    assert [(d.name, len(d.records)) for d in domains] == [("math_rule", 8), ("other", 4)]


def test_zero_probability_leaves_a_domain_out():
    order = training_order(records(math=10, code=10, junk=5),
                           config({"math": 0.5, "code": 0.5, "junk": 0.0}))
    assert not {r.tag for b in range(20) for r in order.batch(b, 4)} - {"math", "code"}


@pytest.mark.parametrize(("probs", "data", "message"), [
    ({"math": 0.5, "cod": 0.5}, {"math": 4, "code": 4}, "no training record has tag 'cod'"),
    ({"math": 1.0}, {"math": 4, "code": 4}, "4 training record(s) with tag 'code' are in "
                                            "no domain"),
])
def test_data_that_does_not_fit_the_domains_is_refused(probs, data, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_routing(config(probs), records(**data), [])


@pytest.mark.parametrize(("probs", "message"), [
    ({"math": 0.5, "code": 0.3}, "sum to 0.8; they must sum to 1"),
    ({"math": 1.5, "code": -0.5}, "code: must be a probability >= 0"),
    ({"math": 0.0, "code": 0.0}, "sum to 0"),
])
def test_probabilities_are_checked_with_the_config(probs, message):
    with pytest.raises(ConfigError, match=message):
        config(probs)


def test_probabilities_within_a_rounding_of_one_are_rescaled():
    domains = split_domains(records(a=3, b=3, c=3),
                            config({"a": 0.333, "b": 0.333, "c": 0.333}))
    assert sum(d.prob for d in domains) == pytest.approx(1.0, abs=1e-12)


def test_mix_keys_that_would_do_nothing_are_refused():
    with pytest.raises(ConfigError, match="validation.data_args.domain_interleave_probs"):
        load_config_dict({"validation": {"data_args": {"domain_interleave_probs": {"a": 1}}}})


def test_a_roll_config_with_domain_interleave_probs_converts(tmp_path):
    from flywheel.pipelines.config import convert_roll

    roll = Path(__file__).parents[1] / "data" / "configs" / "roll" / "mechanics" / "roll_rlvr.yaml"
    text = roll.read_text().replace("    file_name: builtin://arithmetic/train\n",
                                    "    file_name: builtin://arithmetic/train\n"
                                    "    domain_interleave_probs: {math_rule: 1.0}\n")
    (tmp_path / "roll.yaml").write_text(text)
    conversion = convert_roll(tmp_path / "roll.yaml")
    assert conversion.missing == []
    cfg = load_config_dict(conversion.data)
    assert cfg.actor_train.data_args.domain_interleave_probs == {"math_rule": 1.0}
    # ROLL's key names the reward: its records are those tagged as its tag_included says.
    domains = split_domains(records(arithmetic=6), cfg)
    assert [(d.name, len(d.records)) for d in domains] == [("math_rule", 6)]
