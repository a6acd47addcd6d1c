"""The configuration reference: every schema field documented beside its definition, and
the generated page listing every key with its type and default."""

from __future__ import annotations

import dataclasses

from flywheel.config import reference, schema


def test_every_config_field_is_documented_beside_its_definition():
    missing = reference.undocumented()
    assert not missing, (
        "config fields without a comment beside their definition in config/schema/ (write one "
        "above the field: meaning, unit, range, interactions):\n  " + "\n  ".join(missing))


def test_every_config_class_and_field_reaches_the_page():
    page = reference.render_markdown()
    classes = {s.cls for s in reference.sections()}
    for cls in classes:
        for f in dataclasses.fields(cls):
            if reference.field_owner(cls, f.name) is not None:
                assert f"| `{f.name}` |" in page, f"{cls.__name__}.{f.name}"
    # every block the schema declares is reached from the top level
    declared = {v for v in vars(schema).values()
                if isinstance(v, type) and dataclasses.is_dataclass(v)}
    assert declared <= classes, declared - classes


def test_rows_show_type_default_and_meaning():
    page = reference.render_markdown()
    assert '| `loss_agg_mode` | "token-mean" \\| "seq-mean-token-mean" \\| ' \
           '"seq-mean-token-sum" \\| "seq-mean-token-sum-norm" | `"seq-mean-token-mean"` |' in page
    assert "| `device_mapping` | list[int] \\| null | `null` | Devices this role owns" in page
    assert "## `<role>.training_args` {#trainingargs}" in page
    assert "## `custom_envs.<tag>` {#customenvconfig}" in page


SOURCE = '''
class A:
    # Above, first line
    # and second line.
    x: int = 1
    y: int = 2  # trailing
    # lo and hi: bounds [lo, hi]
    lo: float = 0.0
    hi: float = 1.0
    other: float = 3.0

    z: int = 0
'''


def test_comment_rules():
    docs = reference.field_comments(SOURCE)
    assert docs[("A", "x")][0] == "Above, first line and second line."
    assert docs[("A", "y")][0] == "trailing"
    assert docs[("A", "lo")][0] == docs[("A", "hi")][0] == "lo and hi: bounds [lo, hi]"
    assert docs[("A", "other")][0] == ""  # not named by the comment above: undocumented
    assert docs[("A", "z")][0] == ""


def test_the_staleness_bound_on_the_page_is_the_one_the_window_enforces():
    # pipelines/loop/async_window.py: t - v <= ceil(r) + model_update_frequency - 1
    row = next(line for line in reference.render_markdown().splitlines()
               if line.startswith("| `async_generation_ratio` |"))
    assert "ceil(ratio) + model_update_frequency - 1" in row
