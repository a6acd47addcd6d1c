"""The device_mapping grammar: ROLL's string forms parse, anything else is refused."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.device_mapping import MAX_DEVICES, parse_device_mapping
from flywheel.platform.config.errors import ConfigError


@pytest.mark.parametrize("value, devices", [
    ([0, 1, 2], [0, 1, 2]),
    ([3], [3]),
    ([5, 1], [5, 1]),  # order is the user's
    ("list(range(0,4))", [0, 1, 2, 3]),
    ("list([0,1,2,3,8,9,10,11])", [0, 1, 2, 3, 8, 9, 10, 11]),
    ("list(range(16,24))", list(range(16, 24))),
    ("list(range(0,2))+list(range(14,16))", [0, 1, 14, 15]),
    ("[1]", [1]),
    ("[0, 1, 2]", [0, 1, 2]),
    ("[0, 1, 2,]", [0, 1, 2]),
    ("range(4)", [0, 1, 2, 3]),
    ("range(0, 8, 2)", [0, 2, 4, 6]),
    ("list(range(1,8,3))", [1, 4, 7]),
    ("[1]+[2]", [1, 2]),  # '+' concatenates any terms, brackets included
    ("[0] + list(range(4, 6)) + range(8,9)", [0, 4, 5, 8]),
    ("  list( range( 0 , 2 ) )  ", [0, 1]),
    (f"[{MAX_DEVICES - 1}]", [MAX_DEVICES - 1]),
])
def test_accepted_forms(value, devices):
    assert parse_device_mapping(value, "actor_train.device_mapping") == devices


@pytest.mark.parametrize("value, message", [
    ("__import__('os').system('x')", "unknown name '__import__'"),
    ("list(map(int,'12'))", "unknown name 'map'"),
    ("eval('[1]')", "unknown name 'eval'"),
    ("list(range(0,4)).__class__", "unexpected character '.'"),
    ("[i for i in range(4)]", "expected a non-negative integer, got 'i'"),
    ("list(range(0,4))*2", "unexpected character '*'"),
    ("[1]-[1]", "unexpected character '-'"),
    ("[-1]", "unexpected character '-'"),
    ([0, -1], "a device index is an int >= 0, got int -1"),
    ("[0.5]", "unexpected character '.'"),
    ([0.5], "got float 0.5"),
    ([True], "got bool true"),
    (["0"], "got str '0'"),
    ("range(4,0)", "is empty"),
    ("range(0,4,0)", "range step must be >= 1"),
    ("range(0,4,1,1)", "expected ')'"),
    ("range()", "expected a non-negative integer"),
    ("list(range(0,4)", "expected ')', got end of text"),
    ("[0, 1", "expected ',' or ']', got end of text"),
    ("[]", "selects no devices"),
    ([], "selects no devices"),
    ("", "expected '[', 'list(' or 'range(', got end of text"),
    ("[0, 0]", "device 0 appears more than once"),
    ("list(range(0,4))+[3]", "device 3 appears more than once"),
    ("range(0, 999999999)", "too large"),
    (f"[{MAX_DEVICES}]", "too large"),
    ("range(0, 10**9)", "unexpected character '*'"),
    ("0x10", "expected '[', 'list(' or 'range(', got '0'"),
    (3, "got a single int 3: write [3]"),
    ({"a": 1}, "got mapping"),
    (None, "got null"),
])
def test_rejected_forms_name_the_key_and_what_is_accepted(value, message):
    with pytest.raises(ConfigError) as info:
        parse_device_mapping(value, "actor_infer.device_mapping")
    assert info.value.key_path.startswith("actor_infer.device_mapping")
    assert message in info.value.message


@pytest.mark.parametrize("value", ["list(map(int,'12'))", "[-1]", "", "[]", [0.5], "x"])
def test_syntax_errors_say_what_is_accepted(value):
    with pytest.raises(ConfigError, match=r"list\(range\(a, b\[, step\]\)\)"):
        parse_device_mapping(value, "k")


def test_loader_parses_every_roles_mapping():
    cfg = load_config_dict({"actor_train": {"device_mapping": "list(range(0,2))"},
                            "actor_infer": {"device_mapping": "[2, 3]"},
                            "reference": {"device_mapping": "range(4,5)"},
                            "use_kl_loss": True, "kl_loss_coef": 0.1})
    assert cfg.actor_train.device_mapping == [0, 1]
    assert cfg.actor_infer.device_mapping == [2, 3]
    assert cfg.reference.device_mapping == [4]


def test_loader_error_names_file_and_key_path():
    with pytest.raises(ConfigError) as info:
        load_config_dict({"critic": {"device_mapping": "list(map(int, '12'))"}}, source="f.yaml")
    assert str(info.value).startswith("f.yaml: critic.device_mapping: cannot parse")


def test_a_key_named_device_mapping_in_free_form_config_is_left_alone():
    # vllm's keys are its engine's own, checked where vllm runs (engine_options.py)
    cfg = load_config_dict({"actor_infer": {"strategy_args": {
        "strategy_name": "vllm", "strategy_config": {"device_mapping": "anything"}}}})
    assert cfg.actor_infer.strategy_args.strategy_config == {"device_mapping": "anything"}


@given(st.text(alphabet="list(range)[]0123456789,+ -.*_'a", max_size=40))
def test_any_text_parses_or_raises_config_error(text):
    try:
        devices = parse_device_mapping(text, "k")
    except ConfigError:
        return
    assert devices and len(set(devices)) == len(devices)
    assert all(isinstance(d, int) and 0 <= d < MAX_DEVICES for d in devices)


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 20), st.integers(1, 3)),
                min_size=1, max_size=4))
def test_ranges_joined_with_plus_match_python(spans):
    text = "+".join(f"list(range({a},{a + n},{s}))" for a, n, s in spans)
    expected = [d for a, n, s in spans for d in range(a, a + n, s)]
    if len(set(expected)) != len(expected):
        with pytest.raises(ConfigError, match="appears more than once"):
            parse_device_mapping(text, "k")
    else:
        assert parse_device_mapping(text, "k") == expected
