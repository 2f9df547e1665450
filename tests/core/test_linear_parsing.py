"""Text parsing is linear: answers of megabytes built to make a quadratic parser crawl grow its cost linearly.

Each case is a completion that once made a parser quadratic (or worse): thousands of unclosed
``\\boxed{``, a long run of spaces after "answer:", thousands of harmony headers without a
message, alternating think tags. Each is run at 1 MB and at 4 MB in a worker process with a
time limit (a regression fails the test instead of hanging the run), and the CPU time of the 4 MB
call must stay under 8x the 1 MB call's (linear growth gives 4x, quadratic 16x). A ratio of CPU
times, not a time limit: the check holds on a slow or busy machine.
The rewritten parsers are checked against the plain implementations they replace (oracles,
kept here) on random short texts.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lengthlens.data.grading.answers import _ANSWER_PHRASE, extract_choice, last_boxed

from .isolated import Isolated

MB = 2**20

# (name, target, args builder taking the size in characters): each once quadratic or worse.
CASES = [
    ("unclosed boxed, aime", "lengthlens.data.grading:grade", lambda n: ("aime24", "\\boxed{" * (n // 7), "5")),
    ("open braces, aime", "lengthlens.data.grading:grade", lambda n: ("aime24", "\\boxed{" + "{" * n, "5")),
    ("answer: and spaces, longbench", "lengthlens.data.grading:grade", lambda n: ("longbench_v2", "answer:" + " " * n + "x", "A")),
    ("answer phrases, longbench", "lengthlens.data.grading:grade", lambda n: ("longbench_v2", "answer: " * (n // 8), "A")),
    ("numbers, gsm8k", "lengthlens.data.grading:grade", lambda n: ("gsm8k", "1,234" * (n // 5), "5")),
    ("harmony channel headers", "lengthlens.data.channels:split_channels", lambda n: ("<|channel|>" * (n // 11),)),
    ("harmony start headers", "lengthlens.data.channels:split_channels", lambda n: ("<|start|>" * (n // 9),)),
    ("harmony final headers", "lengthlens.data.channels:split_channels", lambda n: ("<|channel|>final" * (n // 16) + "<|message|>",)),
    ("think tags", "lengthlens.data.channels:split_channels", lambda n: ("</think><think>" * (n // 15),)),
    ("study policy, aime", "lengthlens.data.grading:grade_study", lambda n: ("aime24", "\\boxed{ " * (n // 8), "5")),
]


@pytest.fixture(scope="module")
def worker():
    w = Isolated()
    yield w
    w.close()


@pytest.mark.parametrize("name,target,make", CASES, ids=[c[0] for c in CASES])
def test_megabyte_answers_are_parsed_in_linear_time(worker, name, target, make):
    timed = f"{Isolated.__module__}:timed_call"
    worker.call(timed, target, *make(1000), timeout=60)  # imports and warms up outside the measurement
    t1 = worker.call(timed, target, *make(MB), timeout=60)
    t4 = worker.call(timed, target, *make(4 * MB), timeout=60)
    # 0.05 s of slack: a linear parser's 1 MB call can take a few milliseconds, where timer granularity tells.
    assert t4 < 8 * t1 + 0.05, f"{name}: 4 MB took {t4:.3f} s of CPU, 1 MB {t1:.3f} s (not linear)"


def _last_boxed_oracle(text: str) -> str | None:
    """The former implementation: scan from each box start to its balancing brace (quadratic, plainly right)."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for s in reversed(starts):
        depth, i = 1, s
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[s:i - 1]
    return None


# The former pattern, with the letter a capital (the phrase's words in any case): "the answer is a bit" names no choice.
_ANSWER_PHRASE_ORACLE = re.compile(
    r"(?i:(?:answer|choice)(?:\s+is|\s*:)\s*(?:\*\*)?\s*(?:option\s+)?\(?\s*)([A-D])\s*\)?(?![A-Za-z0-9])")

_PIECES = st.sampled_from(["\\boxed{", "\\fbox {", "\\boxed", "{", "}", "a", "1", " ", "\n", "\\text{B}"])
_CHOICE_PIECES = st.sampled_from(["answer", "Answer", "choice", " is", ":", " ", "  ", "**", "option", "Option ", "(", ")",
                                  "A", "B", "d", "x", "1", "\n", "."])


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=30).map("".join))
def test_last_boxed_agrees_with_the_plain_scan(text):
    assert last_boxed(text) == _last_boxed_oracle(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(_CHOICE_PIECES, max_size=14).map("".join))
def test_answer_phrase_matches_what_the_former_pattern_matched(text):
    new = [(m.start(), m.group(1)) for m in _ANSWER_PHRASE.finditer(text)]
    old = [(m.start(), m.group(1)) for m in _ANSWER_PHRASE_ORACLE.finditer(text)]
    assert new == old


def test_hand_made_choices_still_read():
    # Derivation: each phrase's letter is the one after the last "answer is" / "answer:" (the pattern's cases).
    assert extract_choice("so the answer is **(C)** here")[0] == "C"
    assert extract_choice("Answer: option  ( B )")[0] == "B"
    assert extract_choice("answer:\n** D")[0] == "D"
    assert last_boxed("x \\boxed{a{b}c} \\boxed{unclosed") == "a{b}c"
