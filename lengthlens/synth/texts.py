"""Synthetic completion texts with the thinking/answer split and answer formats each grader expects."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from lengthlens.synth.spec import Dataset, Style

_THINK_PHRASES = (
    "we need to check the next step carefully", "let me verify the intermediate result again",
    "compare it with the condition in the statement", "so the value stays consistent",
    "wait, reconsider the case where the assumption fails", "recompute the total from the parts",
    "hmm, that matches the earlier estimate", "double check the edge case before moving on",
    "alternatively, look at it from the other side", "the constraint still holds here",
    "but the previous step might have dropped a term", "write the relation once more",
    "then simplify both sides", "that seems off, so go back one step", "the pieces fit together now",
)
_ANSWER_PHRASES = (
    "the result follows from the steps above", "the check confirms it", "here is a short summary",
    "each part of the reasoning is stated once", "the final answer is given below",
    "the approach handles the edge cases", "nothing else needs to change",
)
_BASE_CHARS = 1 << 18  # one copy of the filler; longer texts repeat it


@lru_cache(maxsize=4)
def _filler(phrases: tuple[str, ...], salt: int) -> tuple[str, np.ndarray]:
    """A fixed pseudo-text of plain sentences (no digits, no markup) and the offsets where its words start."""
    rng = np.random.Generator(np.random.PCG64(salt))
    # Drawn in bulk: sentences of 1-3 phrases; enough of them for _BASE_CHARS (phrases are >= 20 chars).
    n_sent = _BASE_CHARS // 20
    sizes = rng.integers(1, 4, n_sent).tolist()
    picks = rng.integers(0, len(phrases), 3 * n_sent).tolist()
    out: list[str] = []
    pos = 0
    for n in sizes:
        sentence = ", ".join(phrases[i] for i in picks[pos:pos + n])
        pos += n
        out.append(sentence[0].upper() + sentence[1:] + ".")
    text = " ".join(out)[:_BASE_CHARS]
    starts = np.flatnonzero(np.frombuffer(text.encode("ascii"), dtype=np.uint8)[:-1] == 32) + 1
    return text, starts[starts < _BASE_CHARS // 2]


def words(kind: str, aux: int, n: int) -> str:
    """``n`` characters of filler starting at a word boundary chosen by ``aux``; never ends in a space."""
    if n <= 0:
        return ""
    text, starts = _filler(_THINK_PHRASES if kind == "think" else _ANSWER_PHRASES, 7 if kind == "think" else 11)
    off = int(starts[aux % len(starts)])
    if off + n > len(text):
        text = text * (1 + (off + n) // len(text))
    s = text[off:off + n]
    return s[:-1] + "." if s[-1] == " " else s


def answer_core(ds: Dataset, item: int, ref_num: int, correct: bool, aux: int) -> tuple[str, str | None]:
    """The graded part of an answer in the dataset's style, and the answer string a grader extracts."""
    if ds.kind == "gsm8k":
        ans = ref_num if correct else ref_num + 1 + aux % 50
        return f"#### {ans}", str(ans)
    if ds.kind == "boxed":
        ans = ref_num if correct else (ref_num + 1 + aux % 999) % 1000
        return f"\\[\n\\boxed{{{ans}}}\n\\]", str(ans)
    if ds.kind == "choice":
        ans = "ABCD"[ref_num if correct else (ref_num + 1 + aux % 3) % 4]
        return f"The correct answer is ({ans})", ans
    if ds.kind == "code":
        body = f"    return _reference_{item + 1:03d}(*args)" if correct else "    return None  # incomplete"
        return f"```python\ndef {entry_point(item)}(*args):\n{body}\n```", None
    return "", None


def entry_point(item: int) -> str:
    return f"task_{item + 1:03d}"


H_OPEN = "<|channel|>analysis<|message|>"
H_CLOSE = "<|end|><|start|>assistant"
_H_FINAL = "<|channel|>final<|message|>"


def compose(style: Style, thinking: str, answer: str | None) -> tuple[str, int, int]:
    """output.txt text and its logged (analysis_chars, final_chars), the study's counting convention.

    Harmony: analysis_chars is everything before the final header, markup included; final_chars
    the final message's content. Think tags: content lengths of thinking and answer (no
    surrounding whitespace is written, so stripping changes nothing). ``answer=None``: censored.
    """
    if style == "harmony":
        if answer is None:
            text = H_OPEN + thinking
            return text, len(text), 0
        head = H_OPEN + thinking + H_CLOSE
        return head + _H_FINAL + answer, len(head), len(answer)
    if answer is None:
        return "<think>" + thinking, len(thinking), 0
    return "<think>" + thinking + "</think>" + answer, len(thinking), len(answer)
