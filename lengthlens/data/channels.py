"""Split a completion into its thinking part and its answer part, so lengths and grading use the right text.

Three formats are recognised:

``harmony`` (GPT-OSS)
    ``<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...``.
    Thinking is the content of ``analysis`` and ``commentary`` messages (and of any unknown channel,
    which is never treated as an answer); the answer is the content of ``final`` messages. A message
    ends at ``<|end|>``, ``<|return|>``, ``<|call|>``, at the next ``<|start|>`` or ``<|channel|>``
    (the model sometimes re-opens a channel without closing the last one), or at the end of the text.
    Content is counted exactly as written, whitespace included, markers excluded. A header is the
    text between ``<|channel|>`` (or, lacking one, the role after ``<|start|>``) and ``<|message|>``;
    its first word names the channel, and a header that *starts with* ``final`` counts as final (the
    real logs contain ``finalfinal`` and ``final**Answer**`` headers whose message is plainly the
    answer, and ``<|start|>assistant commentary<|message|>``). Headers, roles and a header cut off
    before any ``<|message|>`` belong to neither part; text before the first header has no channel,
    so it counts as thinking. The same format with its special tokens stripped by the detokenizer
    (``analysisWe need...assistantfinal42``) is recognised when the model name says GPT-OSS.

``think_tags`` (Qwen3, DeepSeek-R1, QwQ)
    Thinking is the content of ``<think>...</think>`` blocks; everything outside them is the answer,
    including text *before* ``<think>``, because it is what the reader is shown and an answer must
    never be taken from inside the thinking. A ``</think>`` with no ``<think>`` before it means the
    chat template put ``<think>`` in the prompt: everything before it is thinking; for models whose
    template always does that (DeepSeek-R1 and its distills, QwQ, Qwen3 *-Thinking-2507*), a
    completion with no tag at all is unclosed thinking. An unclosed block is thinking to the end.
    Each block and each answer piece is stripped of surrounding whitespace, because the templates
    write ``\\n`` / ``\\n\\n`` around the tags as layout.

``none`` (Llama style)
    All answer.

When a part has several pieces (e.g. a ``final`` message, a re-opened ``analysis``, and a second
``final``), ``thinking`` / ``answer`` join them with ``"\\n"`` and the ``*_chars`` counts are the sum
of the pieces' own lengths (the joining newlines are not counted). Graders that take the *last*
marker of the answer (``#### N``, ``\\boxed{}``) thus see the model's final word.

The study's generator logged its own counts in run.json; :func:`check_logged_counts` documents
exactly how they were made and reports where they disagree with the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Literal

import polars as pl

Format = Literal["harmony", "think_tags", "none"]

#: Channels whose content is the answer; everything else is thinking.
ANSWER_CHANNEL = "final"
_KNOWN_CHANNELS = ("analysis", "commentary", "final")

_H_START, _H_CHANNEL, _H_MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
_HARMONY_TOKEN = re.compile(r"<\|(?:start|channel|message|end|return|call|constrain)\|>")
# Where a message's content can end: a terminator, or a new message/header starting without one.
_CONTENT_END = re.compile(r"<\|(?:end|return|call|start|channel)\|>")
# A "<|start|>role..." header ends without a message at a terminator or another <|start|>.
_START_HEADER_CUT = re.compile(r"<\|(?:end|return|call|start)\|>")
_HEADER_START = re.compile(r"<\|(?:start|channel)\|>")
# The detokenized form with special tokens skipped: "analysis<text>assistantfinal<text>".
_STRIPPED_HEADER = re.compile(r"(?:^|assistant)(analysis|commentary|final)(?=\S)")

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
#: Model families whose chat template writes ``<think>`` into the prompt, so a completion with no tag
#: at all ended inside its thinking. Qwen3 (hybrid) is not here: it writes ``<think>`` itself.
_PREFILLED_THINK_MODELS = re.compile(r"deepseek[-_]?r1|r1[-_]distill|qwq|thinking-2507", re.I)
_HARMONY_MODELS = re.compile(r"gpt[-_]?oss", re.I)


@dataclass(frozen=True)
class Message:
    """One piece of the completion: its channel and content, with raw offsets for audits."""

    channel: str  # harmony channel name ("analysis", "final", "", ...); "think" / "text" for tags / none
    is_answer: bool  # answer text; everything else (any channel but final) is thinking
    content: str
    #: Raw offset of the piece's header: its ``<|channel|>`` token (else its ``<|start|>``), its
    #: ``<think>`` tag, or (answer text outside tags) its first character.
    start: int
    content_start: int  # raw offset of the first content character
    terminated: bool  # False when the text ended inside this piece


@dataclass(frozen=True)
class ChannelSplit:
    """A completion split into thinking and answer; counts are content characters, markup excluded."""

    format: Format
    thinking: str
    answer: str
    thinking_chars: int
    answer_chars: int
    #: False when the text ended inside a thinking piece (cut at the budget, or stopped mid-thought).
    thinking_closed: bool
    #: Whether any answer piece was opened (harmony: a final header; think_tags/none: non-empty answer).
    reached_answer: bool
    messages: tuple[Message, ...] = field(default=(), repr=False)
    #: Length of the raw text, for audits of logged counts.
    text_chars: int = 0


def detect_format(text: str, model: str | None = None) -> Format:
    """Which format a completion is in: from its markers first, the model name only when it has none."""
    if _HARMONY_TOKEN.search(text):
        return "harmony"
    if _THINK_OPEN in text or _THINK_CLOSE in text:
        return "think_tags"
    if model and _HARMONY_MODELS.search(model) and _STRIPPED_HEADER.match(text):
        return "harmony"
    if model and _PREFILLED_THINK_MODELS.search(model):
        return "think_tags"
    return "none"


def split_channels(text: str, model: str | None = None) -> ChannelSplit:
    """Split ``text`` into thinking and answer; ``model`` only breaks ties when the text has no markers."""
    fmt = detect_format(text, model)
    if fmt == "harmony":
        msgs = _harmony_messages(text) if _HARMONY_TOKEN.search(text) else _stripped_harmony_messages(text)
        reached = any(m.is_answer for m in msgs)
    elif fmt == "think_tags":
        msgs = _think_messages(text, prefilled=bool(model and _PREFILLED_THINK_MODELS.search(model)))
        reached = any(m.is_answer and m.content for m in msgs)
    else:
        msgs = (Message("text", True, text, 0, 0, True),)
        reached = bool(text)
    return _assemble(fmt, msgs, reached, len(text))


def _assemble(fmt: Format, msgs: tuple[Message, ...], reached: bool, n: int) -> ChannelSplit:
    # Empty pieces (a header with no message) add nothing to the joined text.
    think = [m.content for m in msgs if not m.is_answer and m.content]
    ans = [m.content for m in msgs if m.is_answer and m.content]
    # Ended inside thinking: the last piece is a thinking piece that nothing terminated.
    closed = not (msgs and not msgs[-1].is_answer and not msgs[-1].terminated)
    return ChannelSplit(
        format=fmt,
        thinking="\n".join(think),
        answer="\n".join(ans),
        thinking_chars=sum(map(len, think)),
        answer_chars=sum(map(len, ans)),
        thinking_closed=closed,
        reached_answer=reached,
        messages=msgs,
        text_chars=n,
    )


def _channel_name(header: str) -> str:
    """The channel a header names; a header starting with a known name counts as that channel."""
    h = header.strip()
    for name in _KNOWN_CHANNELS:
        if h.startswith(name):
            return name
    return h.split()[0] if h else ""


def _harmony_messages(text: str) -> tuple[Message, ...]:
    msgs: list[Message] = []
    first = _HEADER_START.search(text)
    lead = text[: first.start() if first else len(text)]
    if lead.strip():
        # Content before any header has no channel, so it is thinking (never taken as an answer).
        msgs.append(Message("", False, lead, 0, 0, first is not None))
    pos = first.start() if first else len(text)
    while (h := _HEADER_START.search(text, pos)) is not None:
        is_start = h.group() == _H_START
        # A "<|start|>role<|channel|>x" header is one header; a bare "<|channel|>x" ends at another one.
        cut = (_START_HEADER_CUT if is_start else _CONTENT_END).search(text, h.end())
        # Only a <|message|> before the cut counts, so the search stops there (else each header
        # would scan to the end of the text: quadratic in the number of headers).
        m_at = text.find(_H_MESSAGE, h.end(), cut.start() if cut is not None else len(text))
        if m_at < 0 or (cut is not None and cut.start() < m_at):
            # A header cut before any <|message|> (real logs: "<|channel|>final choosing C<|end|>")
            # is an empty message of that channel.
            stop = cut.start() if cut is not None else len(text)
            hdr_end, c0, c1, terminated = stop, stop, stop, cut is not None
        else:
            hdr_end, c0 = m_at, m_at + len(_H_MESSAGE)
            end = _CONTENT_END.search(text, c0)
            c1, terminated = (end.start(), True) if end else (len(text), False)
        header = text[h.end():hdr_end]
        ch_at = header.rfind(_H_CHANNEL)
        if ch_at >= 0:
            name, start = _channel_name(header[ch_at + len(_H_CHANNEL):]), h.end() + ch_at
        elif is_start:
            # "<|start|>assistant commentary<|message|>": the channel written after the role.
            name, start = _channel_name(" ".join(header.split()[1:])), h.start()
        else:
            name, start = _channel_name(header), h.start()
        msgs.append(Message(name, name == ANSWER_CHANNEL, text[c0:c1], start, c0, terminated))
        pos = max(c1, h.end())
    return tuple(msgs)


def _stripped_harmony_messages(text: str) -> tuple[Message, ...]:
    heads = list(_STRIPPED_HEADER.finditer(text))
    msgs = []
    for i, h in enumerate(heads):
        c1 = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        last = i + 1 == len(heads)
        # Stripped text has no terminators: only a following header proves the message was closed.
        name = h.group(1)
        msgs.append(Message(name, name == ANSWER_CHANNEL, text[h.end():c1], h.start(), h.end(), not last))
    return tuple(msgs)


def _think_messages(text: str, prefilled: bool) -> tuple[Message, ...]:
    msgs: list[Message] = []
    o, c = text.find(_THINK_OPEN), text.find(_THINK_CLOSE)
    inside = (c >= 0 and (o < 0 or c < o)) or (prefilled and o < 0 and c < 0)
    pos, piece_start = 0, 0

    def add(kind: str, raw_from: int, raw_to: int, markup_at: int, terminated: bool) -> None:
        raw = text[raw_from:raw_to]
        stripped = raw.strip()
        lead = len(raw) - len(raw.lstrip())
        if stripped or kind == "think":
            msgs.append(Message(kind, kind == "text", stripped, markup_at, raw_from + lead, terminated))

    while pos <= len(text):
        if inside:
            c = text.find(_THINK_CLOSE, pos)
            if c < 0:
                add("think", pos, len(text), piece_start, False)
                break
            add("think", pos, c, piece_start, True)
            pos, inside = c + len(_THINK_CLOSE), False
        else:
            o = text.find(_THINK_OPEN, pos)
            stop = o if o >= 0 else len(text)
            # A stray "</think>" in the answer is markup, not content.
            seg_from = pos
            for stray in re.finditer(re.escape(_THINK_CLOSE), text[pos:stop]):
                add("text", seg_from, pos + stray.start(), seg_from, True)
                seg_from = pos + stray.end()
            add("text", seg_from, stop, seg_from, True)
            if o < 0:
                break
            piece_start, pos, inside = o, o + len(_THINK_OPEN), True
    return tuple(msgs)


# --------------------------------------------------------------------------------------------
# The study's logged counts (run.json `analysis_chars`, `final_chars`, `reached_final_channel`).
# --------------------------------------------------------------------------------------------

def logged_convention(split: ChannelSplit) -> tuple[int, int, bool]:
    """The (analysis_chars, final_chars, reached_final_channel) the study's generator logged for such a text.

    Established on all 2,495 real runs (runs/ and old_runs/): ``analysis_chars`` is the raw length
    of everything before the first ``<|channel|>final`` header, markup included
    (``<|channel|>analysis<|message|>`` is 30 chars, ``<|end|><|start|>assistant`` 25 more), i.e.
    the whole text when there is no final header; ``final_chars`` is the raw length after the
    *last* final header's ``<|message|>`` to the end of the text, whitespace kept; messages between
    the first and the last final header (a re-opened analysis or commentary, an earlier final) are
    counted in neither. Only meaningful for harmony text.
    """
    finals = [m for m in split.messages if m.is_answer]
    if split.format != "harmony" or not finals:
        return split.text_chars, 0, False
    return finals[0].start, split.text_chars - finals[-1].content_start, True


def check_logged_counts(split: ChannelSplit, analysis_chars: int | None, final_chars: int | None,
                        reached_final_channel: bool | None = None) -> str | None:
    """Compare logged thinking/answer counts with the text; a human-readable disagreement, or None.

    Harmony counts are checked against the generator's own convention (:func:`logged_convention`),
    so only counts that the text cannot explain are reported; other formats are checked against
    ``thinking_chars`` / ``answer_chars``.
    """
    if split.format == "harmony":
        want_a, want_f, _ = logged_convention(split)
        what_a = "raw chars before the first final header (markup included)"
        what_f = "content chars of the last final message"
    else:
        want_a, want_f = split.thinking_chars, split.answer_chars
        what_a, what_f = f"{split.format} thinking chars", f"{split.format} answer chars"
    problems = []
    if analysis_chars is not None and analysis_chars != want_a:
        problems.append(f"logged analysis_chars={analysis_chars} but the text has {want_a} {what_a}")
    if final_chars is not None and final_chars != want_f:
        extra = ""
        if final_chars == split.text_chars and want_f != split.text_chars:
            extra = (" (the logged value is the whole text's length: the generator found no well-formed"
                     " '<|channel|>final<|message|>' header)")
        problems.append(f"logged final_chars={final_chars} but the text has {want_f} {what_f}{extra}")
    if reached_final_channel is not None and reached_final_channel != split.reached_answer:
        problems.append(f"logged reached_final_channel={reached_final_channel} but the text "
                        f"{'has' if split.reached_answer else 'has no'} answer part")
    return "; ".join(problems) or None


# --------------------------------------------------------------------------------------------
# Many texts at once.
# --------------------------------------------------------------------------------------------

def split_channels_many(texts: Iterable[str | None],
                        models: Iterable[str | None] | str | None = None) -> pl.DataFrame:
    """Split a column of texts (list, polars or pandas Series) into a polars frame of counts, one row each.

    Columns: ``channel_format``, ``thinking_chars``, ``answer_chars``, ``thinking_closed``,
    ``reached_answer``, ``answer``; a null text gives a row of nulls.
    """
    texts = list(texts)
    if models is None or isinstance(models, str):
        models = [models] * len(texts)
    else:
        models = list(models)
        if len(models) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(models)} model names")
    cols: dict[str, list] = {k: [] for k in ("channel_format", "thinking_chars", "answer_chars",
                                             "thinking_closed", "reached_answer", "answer")}
    for t, m in zip(texts, models, strict=True):
        s = split_channels(t, m) if isinstance(t, str) else None
        cols["channel_format"].append(s.format if s else None)
        cols["thinking_chars"].append(s.thinking_chars if s else None)
        cols["answer_chars"].append(s.answer_chars if s else None)
        cols["thinking_closed"].append(s.thinking_closed if s else None)
        cols["reached_answer"].append(s.reached_answer if s else None)
        cols["answer"].append(s.answer if s else None)
    return pl.DataFrame(cols, schema={"channel_format": pl.String, "thinking_chars": pl.Int64,
                                      "answer_chars": pl.Int64, "thinking_closed": pl.Boolean,
                                      "reached_answer": pl.Boolean, "answer": pl.String})
