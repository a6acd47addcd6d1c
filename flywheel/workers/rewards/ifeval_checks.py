"""The instruction constraints of ROLL's ifeval reward, by the function name its data uses.

ROLL's RLVR ifeval records (allenai's RLVR-IFeval, as ROLL's GeneralRuleRewardWorker reads
them: roll/pipeline/rlvr/rewards/ifeval_rule_reward_worker.py, whose checks follow
open-instruct's open_instruct/if_functions.py) name one constraint per record: a function
name and its arguments, e.g. {"func_name": "verify_keywords", "keyword_list": ["tea"]}.
Each check here keeps that name, its argument names and ROLL's verdict, except where noted
(`DIVERGES`). `CHECKS` maps the name to the check and the arguments it reads; ifeval.py
reads the reference and calls it.

Every check reads untrusted model output, so each is a linear scan: the regex-based ones
of ROLL that can backtrack quadratically on a long line (`\\[(.*?)\\]` over "[[[[...") are
rewritten as scans that count the same matches. Only regexes, counts and langdetect (for
the response language) are used: no NLTK data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

# ROLL's sentence split: at whitespace after "." or "?", unless the period ends an
# abbreviation like "e.g." or "Mr." (fixed-width lookbehinds: linear).
SENTENCE_END = re.compile(r"(?<!\w\.\w.)(?<![A-Z][a-z]\.)(?<=\.|\?)\s")
WORD = re.compile(r"\b\w+\b")
CAPITAL_WORD = re.compile(r"\b[A-Z]+\b")
QUANTIFIERS = ("at least", "around", "at most")
DIVERGES = {
    "verify_keyword_frequency": "counts occurrences of `word`; ROLL compares each word with "
                                "itself and so counts every word of the response",
    "validate_choice": "an empty response is no choice; ROLL accepts it (the empty string is "
                       "in every option)",
    "validate_paragraphs": "i outside 1..N fails; ROLL reads paragraph i - 1 as a Python "
                           "index, so i = 0 checks the last one",
}


def count_delimited(text: str, opening: str, closing: str) -> int:
    """How many matches `re.findall(opening + "(.*?)" + closing, text)` finds, in one pass:
    per line (`.` stops at "\\n"), each match runs from an opening to the first closing
    after it, and the next starts after that closing."""
    count = 0
    for line in text.split("\n"):
        pos = 0
        while (start := line.find(opening, pos)) >= 0:
            end = line.find(closing, start + len(opening))
            if end < 0:  # no closing after this opening, so none after a later one
                break
            count, pos = count + 1, end + len(closing)
    return count


def _compare(actual: int, n: int, quantifier: str, around: int) -> bool:
    if quantifier == "at least":
        return actual >= n
    if quantifier == "at most":
        return actual <= n
    return abs(actual - n) <= around


def verify_keywords(text: str, keyword_list: list[str]) -> bool:
    """Every keyword appears, case-insensitively (as a substring)."""
    lowered = text.lower()
    return all(k.lower() in lowered for k in keyword_list)


def verify_keyword_frequency(text: str, word: str, N: int) -> bool:
    """`word` occurs exactly N times as a whole word, case-insensitively."""
    target = word.lower()
    return sum(w == target for w in WORD.findall(text.lower())) == N


def validate_forbidden_words(text: str, forbidden_words: list[str]) -> bool:
    """No forbidden word appears, case-insensitively (as a substring)."""
    lowered = text.lower()
    return not any(w.lower() in lowered for w in forbidden_words)


def verify_letter_frequency(text: str, letter: str, N: int) -> bool:
    """The character `letter` occurs exactly N times (case-sensitive)."""
    return text.count(letter) == N


def validate_response_language(text: str, language: str) -> bool:
    """langdetect names `language` (an ISO 639-1 code such as "en", "zh-cn") for the text;
    text it cannot classify (no letters) fails. Seeded: the same text, the same verdict."""
    from langdetect import DetectorFactory, detect
    from langdetect.lang_detect_exception import LangDetectException

    DetectorFactory.seed = 0
    try:
        return detect(text) == language
    except LangDetectException:
        return False


def verify_paragraph_count(text: str, N: int) -> bool:
    """N paragraphs separated by the markdown divider "* * *", none of them empty."""
    cleaned = "\n".join(line.strip() for line in text.splitlines()).strip()
    paragraphs = cleaned.split("* * *")
    return all(p.strip() for p in paragraphs) and len(paragraphs) == N


def validate_word_constraint(text: str, N: int, quantifier: str) -> bool:
    """Whitespace-separated words: at least / at most N, or around N (within 10%, >= 1)."""
    return _compare(len(text.split()), N, quantifier, max(round(N * 0.1), 1))


def verify_sentence_constraint(text: str, N: int, quantifier: str) -> bool:
    """Sentences (ROLL's split at ". " and "? "): at least / at most N, or around N (+-1)."""
    return _compare(len(SENTENCE_END.split(text)), N, quantifier, 1)


def validate_paragraphs(text: str, N: int, first_word: str, i: int) -> bool:
    """N paragraphs separated by blank lines ("\\n\\n"); the i-th (from 1) starts with
    `first_word`."""
    paragraphs = text.split("\n\n")
    return (len(paragraphs) == N and 1 <= i <= N
            and paragraphs[i - 1].strip().startswith(first_word))


def verify_postscript(text: str, postscript_marker: str) -> bool:
    """The marker (e.g. "P.S.") appears with some text after it."""
    at = text.find(postscript_marker)
    return at >= 0 and len(text[at:].strip()) > len(postscript_marker)


def validate_placeholders(text: str, N: int) -> bool:
    """At least N square-bracket placeholders such as [address] (on one line each)."""
    return count_delimited(text, "[", "]") >= N


def verify_bullet_points(text: str, N: int) -> bool:
    """Exactly N lines that start (after indentation) with "*" or "-"."""
    return sum(line.strip().startswith(("*", "-")) for line in text.split("\n")) == N


def validate_title(text: str) -> bool:
    """A title in double angle brackets, such as <<poem of joy>>, on one line."""
    return count_delimited(text, "<<", ">>") > 0


def validate_choice(text: str, options: list[str]) -> bool:
    """The whole response is (part of) one of the options, as ROLL checks it."""
    return bool(text) and any(text in option for option in options)


def validate_highlighted_sections(text: str, N: int) -> bool:
    """At least N markdown-highlighted spans, *like this* (on one line each)."""
    return count_delimited(text, "*", "*") >= N


def validate_sections(text: str, N: int, section_splitter: str) -> bool:
    """N sections, each opened by `section_splitter` (e.g. "SECTION")."""
    sections = text.split(section_splitter)
    if sections[0] == "":
        sections.pop(0)
    return len(sections) == N


def validate_json_format(text: str) -> bool:
    """The whole response parses as JSON (too deeply nested to parse: not JSON)."""
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def validate_repeat_prompt(text: str, original_prompt: str) -> bool:
    """The response begins with the request, repeated word for word."""
    return text.startswith(original_prompt)


def validate_two_responses(text: str) -> bool:
    """Two different answers separated by exactly one "******"."""
    if text.count("******") != 1:
        return False
    first, second = text.split("******")
    return first.strip() != second.strip()


def validate_uppercase(text: str) -> bool:
    """No lowercase letters (ROLL: text == text.upper())."""
    return text == text.upper()


def validate_lowercase(text: str) -> bool:
    """No uppercase letters (ROLL: text == text.lower())."""
    return text == text.lower()


def validate_frequency_capital_words(text: str, N: int, quantifier: str) -> bool:
    """All-capital words ([A-Z]+): at least / at most N, or around N (here: exactly)."""
    return _compare(len(CAPITAL_WORD.findall(text)), N, quantifier, 0)


def validate_end(text: str, end_phrase: str) -> bool:
    """The response ends with exactly `end_phrase`."""
    return text.endswith(end_phrase)


def validate_quotation(text: str) -> bool:
    """The response starts and ends with a double quote."""
    return text.startswith('"') and text.endswith('"')


def validate_no_commas(text: str) -> bool:
    return "," not in text


# argument name -> the JSON type it must have in the reference
INT, STR, STRS = "an integer", "a string", "a list of strings"
ARGUMENT_TYPES = {"N": INT, "i": INT, "word": STR, "letter": STR, "language": STR,
                  "quantifier": STR, "first_word": STR, "postscript_marker": STR,
                  "section_splitter": STR, "original_prompt": STR, "end_phrase": STR,
                  "keyword_list": STRS, "forbidden_words": STRS, "options": STRS}


@dataclass(frozen=True)
class Check:
    fn: Callable[..., bool]
    arguments: tuple[str, ...]  # the reference keys it reads (ROLL: its parameter names)


CHECKS: dict[str, Check] = {fn.__name__: Check(fn, args) for fn, args in (
    (verify_keywords, ("keyword_list",)),
    (verify_keyword_frequency, ("word", "N")),
    (validate_forbidden_words, ("forbidden_words",)),
    (verify_letter_frequency, ("letter", "N")),
    (validate_response_language, ("language",)),
    (verify_paragraph_count, ("N",)),
    (validate_word_constraint, ("N", "quantifier")),
    (verify_sentence_constraint, ("N", "quantifier")),
    (validate_paragraphs, ("N", "first_word", "i")),
    (verify_postscript, ("postscript_marker",)),
    (validate_placeholders, ("N",)),
    (verify_bullet_points, ("N",)),
    (validate_title, ()),
    (validate_choice, ("options",)),
    (validate_highlighted_sections, ("N",)),
    (validate_sections, ("N", "section_splitter")),
    (validate_json_format, ()),
    (validate_repeat_prompt, ("original_prompt",)),
    (validate_two_responses, ()),
    (validate_uppercase, ()),
    (validate_lowercase, ()),
    (validate_frequency_capital_words, ("N", "quantifier")),
    (validate_end, ("end_phrase",)),
    (validate_quotation, ()),
    (validate_no_commas, ()),
)}
