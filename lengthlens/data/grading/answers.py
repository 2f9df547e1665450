"""Answer extraction and comparison for the short-answer datasets (GSM8K, AIME, LongBench-v2).

Every function here reads the ANSWER part of a completion only (see :mod:`lengthlens.data.channels`);
the callers never pass thinking text.
"""

from __future__ import annotations

import re
from fractions import Fraction

# A number as people write it: thousands commas only in groups of three (so "3, 4" is two numbers),
# an optional decimal part, or a plain fraction.
# A number glued to a letter before it ("x2", "H2O") is a name, not a quantity; one followed by a
# unit ("10km", "2.5x") is a quantity.
_NUMBER = re.compile(
    r"(?<![\w.])[-−]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:/\d+)?"
    r"|(?<![\w.])[-−]?\.\d+"
)
_HASH_MARKER = re.compile(r"####[ \t]*([^\n]*)")
# LaTeX spacing commands and wrappers that carry no value ("\,", "\!", "\text{ minutes}").
_LATEX_SPACE = re.compile(r"\\[,;:! ]|\\q?quad\b|~")
_LATEX_UNWRAP = re.compile(r"\\(?:mathbf|mathrm|textbf|bf|boldsymbol|mathit)\s*\{([^{}]*)\}")
_LATEX_TEXT = re.compile(r"\\(?:text|mbox|operatorname)\s*\{[^{}]*\}")


def parse_number(s: str) -> Fraction | None:
    """The value of a number string ("$1,234.50", "−3", "7/2", "18."); None when it is not one."""
    t = s.strip().replace("−", "-").replace("$", "").replace(",", "").rstrip(".")
    t = _LATEX_SPACE.sub("", t).replace("\\", "")
    if not t:
        return None
    try:
        return Fraction(t)
    except (ValueError, ZeroDivisionError):
        return None


def numbers_in(text: str) -> list[str]:
    """The number strings in ``text``, in order (LaTeX thin spaces inside numbers removed first)."""
    # "1\,000" is one number in LaTeX; join digit groups split by spacing commands.
    text = re.sub(r"(\d)\\[,;!](?=\d{3}\b)", r"\1,", text)
    return [m.group() for m in _NUMBER.finditer(text)]


def extract_gsm8k(answer: str) -> tuple[str | None, str]:
    """The model's GSM8K answer: the number after the last ``####``, else the last number; and how."""
    markers = _HASH_MARKER.findall(answer)
    if markers:
        nums = numbers_in(markers[-1])
        if nums:
            # The first number after the marker: "#### 18 dollars (i.e. 9*2)" means 18.
            return nums[0], "hash_marker"
    nums = numbers_in(answer)
    if nums:
        return nums[-1], "last_number"
    return None, "no_number"


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"[{}]")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced; None if there is none.

    Linear in the text: every brace after the first box is matched once, with a stack (the close of
    a ``{`` is the first ``}`` after it where the braces between balance, whatever came before it).
    """
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    close: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE.finditer(text, starts[0] - 1):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            close[stack.pop()] = m.start()
    for s in reversed(starts):
        end = close.get(s - 1)
        if end is not None:
            return text[s:end]
    return None


def aime_integer(boxed: str) -> int | None:
    """The integer a boxed AIME answer states ("033", "204\\text{ minutes}", "m+n=113", "p=17, m=110")."""
    t = _LATEX_TEXT.sub("", boxed)
    for _ in range(3):
        t = _LATEX_UNWRAP.sub(r"\1", t)
    t = _LATEX_SPACE.sub("", t).replace("$", "").strip().rstrip(".").strip()
    # A stated equation gives its value on the right of the last "=" ("m+n=113").
    if "=" in t:
        t = t.rsplit("=", 1)[1].strip()
    t = t.replace(",", "") if re.fullmatch(r"\d{1,3}(?:,\d{3})+", t) else t
    if re.fullmatch(r"[-−]?\d+", t):
        return int(t.replace("−", "-"))
    return None


_LETTER_IN_BOX = re.compile(r"^\(?\s*([A-D])\s*\)?(?:[.:)]|\s|$)")
# "Answer: C", "the correct answer is (C)", "**Answer:** C"; a bare "Option B ..." is discussion, not a choice.
# Each run of whitespace has one quantifier (adjacent ones, as in "\s*(?:\*\*)?\s*", backtrack in
# polynomial time over a long run of spaces).
_ANSWER_PHRASE = re.compile(
    r"(?:answer|choice)(?:\s+is|\s*:)\s*(?:\*\*\s*)?(?:option\s+)?(?:\(\s*)?((?-i:[A-D]))\s*\)?(?![A-Za-z0-9])",
    re.I)  # the phrase in any case, the letter a capital: "the answer is a bit" chooses nothing
_BOLD_LETTER = re.compile(r"\*\*\s*\(?([A-D])\)?(?:[.:)]|\s*[–—-]|\*\*)")
_LONE_LETTER = re.compile(r"^\W*\(?([A-D])\)?\W*$")


def extract_choice(answer: str) -> tuple[str | None, str]:
    """The letter A-D a LongBench-v2 answer chooses: last boxed letter, else a stated answer; and how.

    The study's outputs end with ``\\boxed{C}`` (also ``\\boxed{\\text{C}}``, ``\\boxed{(C)}``); a
    few write ``**Answer: C**`` or a bold ``**C**`` line instead.
    """
    boxed = last_boxed(answer)
    if boxed is not None:
        inner = _LATEX_TEXT.sub(lambda m: m.group()[m.group().index("{") + 1:-1], boxed)
        inner = _LATEX_UNWRAP.sub(r"\1", inner).strip()
        m = _LETTER_IN_BOX.match(inner)
        if m:
            return m.group(1), "boxed"
    found = [(m.start(), m.group(1), "answer_phrase") for m in _ANSWER_PHRASE.finditer(answer)]
    found += [(m.start(), m.group(1), "bold_letter") for m in _BOLD_LETTER.finditer(answer)]
    if found:
        _, letter, how = max(found)
        return letter, how
    m = _LONE_LETTER.match(answer)
    if m:
        return m.group(1), "lone_letter"
    return None, "no_choice"
