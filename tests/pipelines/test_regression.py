"""`platform ci`: regression configs (configs/ci) parsed, judged and tabled; the fast set
run for real (Ray actors, the built-in tiny model) as part of the suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flywheel import cli
from flywheel.pipelines.run.regression import (
    Outcome,
    find_configs,
    format_table,
    judge,
    parse_expectations,
    read_cases,
    reduce,
    run_suite,
    select,
)
from flywheel.platform.config.errors import ConfigError

CI = Path(__file__).parents[2] / "configs" / "ci"
RECORDS = [{"step": 0, "val/accuracy": 0.30},
           {"step": 1, "staleness/max": 0.0, "throughput/samples_per_s": 10.0},
           {"step": 2, "staleness/max": 1.0, "throughput/samples_per_s": 14.0,
            "val/accuracy": 0.42}]


def test_every_ci_config_declares_its_runs():
    full = read_cases(find_configs(CI), fast=False)
    names = {c.name for c in full}
    assert {"rlvr_sync", "rlvr_async", "agentic_frozen_lake", "vllm_deepspeed",
            "partial_rollout", "pg_variant_sweep[pg_variant=cispo]"} <= names
    sweep = [c for c in full if c.stem == "pg_variant_sweep"]
    assert {c.config.actor_train.pg_variant for c in sweep} == {
        "vanilla", "ppo", "tis", "topr", "cispo", "kimi15"}
    fast = read_cases(find_configs(CI), fast=True)
    assert fast and all(c.config.max_steps <= 4 for c in fast)


@pytest.mark.parametrize("at,value", [("first", 0.30), ("last", 0.42), ("gain", 0.12),
                                      ("min", 0.30), ("max", 0.42), ("mean", 0.36),
                                      ("median", 0.36)])
def test_reductions(at, value):
    assert reduce(RECORDS, "val/accuracy", at) == pytest.approx(value)
    assert reduce(RECORDS, "never/logged", at) is None


def cases_for(tmp_path: Path, expectations: str, name: str = "a") -> list:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"max_steps: 2\nexpectations:\n{expectations}")
    return read_cases([path], fast=False)


def test_judge_passes_fails_and_names_the_reason(tmp_path):
    cases = cases_for(tmp_path, """
  checks:
    - {metric: val/accuracy, at: gain, min: 0.1}
    - {metric: staleness/max, at: max, max: 0}
    - {metric: reward/mean, min: 0}
""")
    rows = judge(cases, {"a": Outcome(tmp_path, RECORDS, 1.0)})
    assert [(r.result, r.measured) for r in rows] == [
        ("pass", "0.12"), ("FAIL", "1"), ("FAIL", "reward/mean never logged")]
    rows = judge(cases, {"a": Outcome(None, [], 1.0, error="RuntimeError: boom")})
    assert all(r.result == "FAIL" and "boom" in r.measured for r in rows)
    table = format_table(rows)
    assert table.splitlines()[0].split() == ["CONFIG", "CHECK", "MEASURED", "EXPECTED",
                                             "RESULT"]
    assert table.splitlines()[-1].startswith("3 checks: 0 passed, 3 failed (a: ")


def test_a_ratio_divides_by_the_other_run_of_the_same_set(tmp_path):
    cases = (cases_for(tmp_path, "  checks: [{metric: staleness/max, max: 0}]\n", "base") +
             cases_for(tmp_path, "  checks: [{metric: throughput/samples_per_s, "
                                 "at: median, ratio_to: base, min: 1.5}]\n", "fast"))
    chosen = select(cases, ["fast"])  # the other side of the ratio comes along
    assert [c.name for c in chosen] == ["base", "fast"]
    slow = [dict(r, **{"throughput/samples_per_s": 6.0}) for r in RECORDS[1:]]
    rows = judge(chosen, {"base": Outcome(tmp_path, slow, 1.0),
                          "fast": Outcome(tmp_path, RECORDS, 1.0)})
    assert (rows[1].measured, rows[1].result) == ("2 (12 / 6)", "pass")


@pytest.mark.parametrize("block,where", [
    ("  check: []\n", "expectations.check: unknown key"),
    ("  checks: [{metric: x, at: best, min: 1}]\n", "expectations.checks[0].at"),
    ("  checks: [{metric: x}]\n", "needs min:, max: or both"),
    ("  checks: [{metric: x, min: high}]\n", "expectations.checks[0].min"),
])
def test_a_bad_expectations_block_is_a_config_error(tmp_path, block, where):
    with pytest.raises(ConfigError, match=where.replace("[", r"\[").replace("]", r"\]")):
        cases_for(tmp_path, block)


def test_no_expectations_block_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="needs an expectations: block"):
        parse_expectations(None, "f.yaml", fast=False)


@pytest.mark.long  # every fast form (~1 min); make ci-configs runs them too, and the
# learning-rate-zero test below runs one fast form through the same machinery in make test
def test_fast_set_passes(tmp_path, ray_session, arith_model_path, tiny_model_path, capsys):
    """The fast forms of configs/ci through `platform ci --fast`."""
    code = cli.main(["ci", str(CI), "--fast", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json.loads(next(tmp_path.glob("*/ci.json")).read_text())
    assert summary["checks"] and all(c["result"] == "pass" for c in summary["checks"])


def test_learning_rate_zero_fails_the_fast_set_with_a_table(tmp_path, ray_session,
                                                           arith_model_path, capsys):
    code = run_suite(CI, only=["rlvr_sync"], fast=True, runs_dir=tmp_path,
                     overrides=["actor_train.training_args.learning_rate=0"])
    out = capsys.readouterr().out
    assert code == 1
    assert "pg/approx_kl (mean)" in out and "FAIL" in out
    assert "1 failed (rlvr_sync: pg/approx_kl (mean))" in out


def test_validate_checks_a_regression_config_and_its_expectations(tmp_path, capsys):
    from flywheel import cli

    assert cli.main(["validate", "--config", str(CI / "rlvr_sync.yaml")]) == 0
    assert "regression config: 1 run(s), 1 in its fast form" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("expectations:\n  checks: 3\n")
    assert cli.main(["validate", "--config", str(bad)]) == 2
    assert "expectations.checks" in capsys.readouterr().err
