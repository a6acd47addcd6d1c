"""ifeval: ROLL's instruction constraints by function name, on hand-written responses,
adversarial ones included, and once through a real Ray reward worker."""

from __future__ import annotations

import json
import time

import pytest

from flywheel.config.schema import RewardConfig
from flywheel.platform.config.errors import ConfigError
from flywheel.workers.rewards import ifeval_checks
from flywheel.workers.rewards.ifeval import IfevalArgs, score_with
from flywheel.workers.rewards.registry import reward_fn

NO_PENALTY = IfevalArgs(repetition_max_penalty=0.0)


def ref(func_name: str, **args) -> str:
    """A reference as ROLL's RLVR ifeval data writes it: every argument key, unused null."""
    keys = ("N", "quantifier", "end_phrase", "keyword_list", "word", "forbidden_words",
            "letter", "i", "first_word", "postscript_marker", "options", "section_splitter",
            "original_prompt", "language")
    return json.dumps({"func_name": func_name, **{k: None for k in keys}, **args})


def held(response: str, reference: str) -> bool:
    result = score_with(NO_PENALTY, "prompt", response, reference)
    assert result.score == float(result.metadata["correct"])
    return result.metadata["correct"]


CASES = [  # (reference, response, constraint met)
    (ref("verify_keywords", keyword_list=["Tea", "scone"]), "I like TEA and a scone.", True),
    (ref("verify_keywords", keyword_list=["tea", "scone"]), "I like tea.", False),
    (ref("verify_keyword_frequency", word="cat", N=2), "Cat. A cat! Category.", True),
    (ref("verify_keyword_frequency", word="cat", N=2), "a cat sat on the mat", False),
    (ref("validate_forbidden_words", forbidden_words=["very"]), "Quite good.", True),
    (ref("validate_forbidden_words", forbidden_words=["very"]), "EVERY day", False),
    (ref("verify_letter_frequency", letter="a", N=3), "banana", True),
    (ref("verify_letter_frequency", letter="a", N=3), "bAnana", False),
    (ref("verify_paragraph_count", N=2), "One.\n* * *\nTwo.", True),
    (ref("verify_paragraph_count", N=2), "One.\n* * *\n \n* * *\nTwo.", False),
    (ref("validate_word_constraint", N=10, quantifier="around"), " ".join(["w"] * 11), True),
    (ref("validate_word_constraint", N=10, quantifier="around"), " ".join(["w"] * 12), False),
    (ref("validate_word_constraint", N=3, quantifier="at least"), "one two three", True),
    (ref("validate_word_constraint", N=2, quantifier="at most"), "one two three", False),
    (ref("verify_sentence_constraint", N=2, quantifier="at most"),
     "Mr. Smith came. He left? Yes.", False),
    (ref("verify_sentence_constraint", N=3, quantifier="at least"),
     "Mr. Smith came. He left? Yes.", True),
    (ref("validate_paragraphs", N=2, first_word="Second", i=2), "First.\n\nSecond one.", True),
    (ref("validate_paragraphs", N=2, first_word="Second", i=1), "First.\n\nSecond one.",
     False),
    (ref("validate_paragraphs", N=2, first_word="Second", i=0), "First.\n\nSecond one.",
     False),
    (ref("verify_postscript", postscript_marker="P.S."), "Hi.\nP.S. see you", True),
    (ref("verify_postscript", postscript_marker="P.S."), "Hi.\nP.S.  ", False),
    (ref("validate_placeholders", N=2), "[name] lives at [address]", True),
    (ref("validate_placeholders", N=2), "[name] lives at [address\n]", False),
    (ref("verify_bullet_points", N=2), "* a\n  - b\ntext", True),
    (ref("verify_bullet_points", N=2), "* a\ntext", False),
    (ref("validate_title"), "<<Ode to Tea>>\nverse", True),
    (ref("validate_title"), "<<Ode to\nTea>>", False),
    (ref("validate_choice", options=["My answer is yes.", "My answer is no."]),
     "My answer is no.", True),
    (ref("validate_choice", options=["My answer is yes.", "My answer is no."]),
     "My answer is no. Because", False),
    (ref("validate_choice", options=["yes", "no"]), "", False),  # ROLL: True (DIVERGES)
    (ref("validate_highlighted_sections", N=2), "*one* and **two**", True),
    (ref("validate_highlighted_sections", N=2), "*one* and *two\n*", False),
    (ref("validate_sections", N=2, section_splitter="SECTION"), "SECTION 1 a SECTION 2 b",
     True),
    (ref("validate_sections", N=2, section_splitter="SECTION"), "intro SECTION 1 a", True),
    (ref("validate_sections", N=3, section_splitter="SECTION"), "SECTION 1 a SECTION 2", False),
    (ref("validate_json_format"), '{"a": [1, 2]}', True),
    (ref("validate_json_format"), "```json\n{}\n```", False),
    (ref("validate_repeat_prompt", original_prompt="Say hi."), "Say hi. Hi!", True),
    (ref("validate_repeat_prompt", original_prompt="Say hi."), "Hi! Say hi.", False),
    (ref("validate_two_responses"), "Answer one.\n******\nAnswer two.", True),
    (ref("validate_two_responses"), "Same.\n******\nSame.", False),
    (ref("validate_two_responses"), "a ****** b ****** c", False),
    (ref("validate_uppercase"), "ALL CAPS, 123!", True),
    (ref("validate_uppercase"), "ALL CAPs", False),
    (ref("validate_lowercase"), "all quiet, 123", True),
    (ref("validate_lowercase"), "all Quiet", False),
    (ref("validate_frequency_capital_words", N=2, quantifier="at least"), "NASA and ESA", True),
    (ref("validate_frequency_capital_words", N=2, quantifier="around"), "NASA, ESA, JAXA",
     False),
    (ref("validate_end", end_phrase="Any other questions?"), "Done. Any other questions?",
     True),
    (ref("validate_end", end_phrase="Any other questions?"), "Any other questions?\n", False),
    (ref("validate_quotation"), '"quoted"', True),
    (ref("validate_quotation"), '"quoted', False),
    (ref("validate_no_commas"), "no commas here", True),
    (ref("validate_no_commas"), "one, two", False),
    (ref("validate_response_language", language="fr"),
     "Bonjour, je suis très content de vous voir aujourd'hui.", True),
    (ref("validate_response_language", language="en"),
     "Bonjour, je suis très content de vous voir aujourd'hui.", False),
    (ref("validate_response_language", language="en"), "1234 !!!", False),  # no letters
]


@pytest.mark.parametrize("reference, response, expected", CASES)
def test_each_constraint_on_hand_written_responses(reference, response, expected):
    assert held(response, reference) is expected


def test_every_check_of_roll_is_covered_by_a_case():
    named = {json.loads(r)["func_name"] for r, _, _ in CASES}
    assert named == set(ifeval_checks.CHECKS)
    assert len(ifeval_checks.CHECKS) == 25  # ROLL's IF_FUNCTIONS_MAP


def test_the_check_reads_the_text_after_the_last_think():
    reference = ref("validate_lowercase")
    assert held("<think>Let Me Think</think>\n\nall lower", reference)
    assert not held("<think>a</think>x</think>\nNot lower", reference)


def test_a_python_literal_reference_is_read_too():
    assert held("hi", str({"func_name": "validate_lowercase", "N": None}))


@pytest.mark.parametrize("reference, message", [
    ("not a constraint", "must be a JSON object"),
    ('["validate_lowercase"]', "must be a JSON object"),
    ('{"N": 3}', "unknown constraint func_name None"),
    ('{"func_name": "validate_rhyme"}', "unknown constraint func_name 'validate_rhyme'"),
    (ref("verify_paragraph_count"), "needs N as an integer, the reference gives None"),
    (ref("verify_paragraph_count", N=True), "needs N as an integer"),
    (ref("validate_word_constraint", N=3, quantifier="roughly"), "quantifier must be one of"),
    (ref("verify_letter_frequency", letter="ab", N=1), "must be one character"),
    (ref("verify_keywords", keyword_list=["a", 1]), "keyword_list as a list of strings"),
])
def test_a_malformed_reference_is_an_error_that_names_it(reference, message):
    with pytest.raises(ValueError, match=message):
        score_with(NO_PENALTY, "p", "response", reference)


def test_the_repetition_penalty_is_added_and_reported():
    repeated = " ".join(["the same words"] * 40)  # 120 words, 3 distinct trigrams of 118
    result = score_with(IfevalArgs(), "p", repeated, ref("validate_lowercase"))
    assert result.metadata["repetition_penalty"] == pytest.approx(-0.5 * (1 - 3 / 118))
    assert result.score == pytest.approx(1.0 + result.metadata["repetition_penalty"])
    fresh = score_with(IfevalArgs(), "p", "each word here differs", ref("validate_lowercase"))
    assert fresh.score == 1.0 and fresh.metadata["repetition_penalty"] == 0.0


HOSTILE = {
    "open brackets": "[" * 200_000,
    "open angles": "<<" * 100_000,
    "stars": "*" + "a" * 200_000,
    "deep json": "[" * 100_000,
    "unicode": "\u0130\u00df\U0001F600\u202e\u0000" * 40_000,
    "empty": "",
    "lone think": "</think>",
    "sentence-ish": "a.b. " * 40_000,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_responses_are_verdicts_in_linear_time(name):
    """Every check on each hostile text: no exception, a bool, and fast (ROLL's
    `\\[(.*?)\\]` and `<<(.*?)>>` take minutes on the brackets: quadratic backtracking)."""
    response = HOSTILE[name]
    start = time.monotonic()
    for func_name, check in ifeval_checks.CHECKS.items():
        args = {"keyword_list": ["x"], "word": "a", "N": 3, "forbidden_words": ["x"],
                "letter": "a", "language": "en", "quantifier": "around", "first_word": "a",
                "i": 1, "postscript_marker": "P.S.", "options": ["a"],
                "section_splitter": "SECTION", "original_prompt": "p", "end_phrase": "e"}
        reference = ref(func_name, **{k: args[k] for k in check.arguments})
        assert isinstance(held(response, reference), bool)
    assert time.monotonic() - start < 15  # ~0.5 s here; quadratic would be minutes


def test_through_a_ray_reward_worker_with_a_format_pattern(ray_session):
    """The scoring process builds ifeval by name from the catalog, with reward_args and
    format_pattern (a mismatch subtracts 1), and answers with JSON metadata."""
    from flywheel.platform.cluster import Cluster
    from flywheel.platform.resources import RoleDevices
    from flywheel.workers.reward_worker import RewardWorker

    cfg = RewardConfig(reward_type="ifeval", reward_args={"repetition_max_penalty": 0.0},
                       format_pattern=r"<think>.*</think>")
    cluster = Cluster.create("rewards.ifeval", RewardWorker,
                             RoleDevices("rewards.ifeval", (0,)), None,
                             init_kwargs=dict(reward_type="ifeval", cfg=cfg))
    try:
        lower = ref("validate_lowercase")
        results = cluster.call_all("score", [("p", "<think>X</think>fine", lower),
                                             ("p", "fine", lower),
                                             ("p", "Not", lower)])[0]
    finally:
        cluster.shutdown()
    assert [r.score for r in results] == [1.0, 0.0, -1.0]
    assert [r.metadata["format_ok"] for r in results] == [True, False, False]
    assert results[0].metadata["constraint"] == "validate_lowercase"


def test_reward_args_are_checked_when_the_config_loads():
    from flywheel.pipelines.config import load_config_dict

    with pytest.raises(ConfigError, match="repetition_max_penalty must be <= 0"):
        load_config_dict({"rewards": {"ifeval": {"reward_type": "ifeval", "reward_args": {
            "repetition_max_penalty": 0.5}}}})
    with pytest.raises(ConfigError, match="scoring"):
        load_config_dict({"rewards": {"ifeval": {"reward_type": "ifeval", "reward_args": {
            "scoring": "soft"}}}})


def test_built_by_name_from_the_catalog():
    score = reward_fn("ifeval", RewardConfig(reward_type="ifeval"))
    assert score("p", "ok", ref("validate_lowercase")).score == 1.0
