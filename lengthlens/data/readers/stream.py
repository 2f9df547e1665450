"""Saved streams of OpenAI-compatible servers, assembled into one response per request before reading.

A streamed request (``"stream": true``) arrives as chunks: ``chat.completion.chunk`` objects whose
choices carry a ``delta`` (``content``, ``reasoning``), or ``text_completion`` objects whose choices
carry a piece of ``text``, each with the request's ``id``. With ``stream_options.include_usage`` (or
the server's ``--enable-force-include-usage``) the last chunk has ``choices: []`` and the request's
``usage``; vLLM puts the per-request ``metrics`` (speculative counters and timings) on that chunk
only (``vllm/entrypoints/openai/{chat_completion,completion}/serving.py``, 0.29 and later). A stream
may be saved as a ``.json`` list of chunks, as JSON lines, or as the server's own server-sent events
(``data: {...}`` lines, ``data: [DONE]`` at the end; ``.sse`` files, or such lines in ``.jsonl``).

:func:`assemble` joins the chunks of each request id, in the order they came, into the response the
same request would have had without streaming: the text and reasoning of each choice concatenated,
the last finish reason, and the final chunk's ``usage`` and ``metrics``. A request whose only saved
chunk is the final usage chunk becomes a response with no choice text: its counters are still read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: (line number, parsed JSON or None, reason when unreadable) as the response readers take them.
Line = tuple[int, Any, str | None]

CHUNK_OBJECTS = frozenset({"chat.completion.chunk"})


def is_chunk(obj: Any) -> bool:
    """Whether ``obj`` is one chunk of a stream: a ``chat.completion.chunk``, a choice with a ``delta``, or the final usage chunk."""
    if not isinstance(obj, dict):
        return False
    if obj.get("object") in CHUNK_OBJECTS:
        return True
    choices = obj.get("choices")
    if choices == [] and ("usage" in obj or "metrics" in obj):
        return True
    return isinstance(choices, list) and any(isinstance(c, dict) and "delta" in c for c in choices)


def _text_piece(choice: dict[str, Any]) -> tuple[str | None, str | None]:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        reasoning = delta.get("reasoning") if delta.get("reasoning") is not None else delta.get("reasoning_content")
        return delta.get("content"), reasoning
    text = choice.get("text")
    return (text if isinstance(text, str) else None), None


def assemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """One response from the chunks of one request, in order: texts joined per choice, the final usage and metrics.

    Parameters
    ----------
    chunks : the stream's chunk objects of one request id, in the order they were sent.

    Returns
    -------
    A ``chat.completion`` (chunks with a ``delta``) or ``text_completion`` response as JSON, with
    ``choices`` (``message`` with ``content`` and ``reasoning``, or ``text``; ``finish_reason``), and
    the last ``usage``, ``metrics`` and ``model`` the chunks carried; ``stream_chunks``: how many.

    Examples
    --------
    >>> chunks = [{"id": "r1", "object": "chat.completion.chunk", "model": "m",
    ...            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "4"}}]},
    ...           {"id": "r1", "object": "chat.completion.chunk", "model": "m",
    ...            "choices": [{"index": 0, "delta": {"content": "2"}, "finish_reason": "stop"}]},
    ...           {"id": "r1", "object": "chat.completion.chunk", "model": "m", "choices": [],
    ...            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}]
    >>> r = assemble(chunks)
    >>> r["choices"][0]["message"]["content"], r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"]
    ('42', 'stop', 2)
    """
    chat = any(c.get("object") in CHUNK_OBJECTS or any(isinstance(x, dict) and "delta" in x for x in c.get("choices") or [])
               for c in chunks)
    texts: dict[int, list[str]] = {}
    thoughts: dict[int, list[str]] = {}
    finish: dict[int, Any] = {}
    out: dict[str, Any] = {"id": chunks[0].get("id"), "object": "chat.completion" if chat else "text_completion",
                           "stream_chunks": len(chunks)}
    for c in chunks:
        for key in ("model", "created", "usage", "metrics", "system_fingerprint"):
            if c.get(key) is not None:
                out[key] = c[key]
        for choice in c.get("choices") or []:
            if not isinstance(choice, dict):
                raise ValueError(f"a stream chunk's choice is not an object: {choice!r}")
            i = choice.get("index", 0)
            text, reasoning = _text_piece(choice)
            texts.setdefault(i, [])
            if text:
                texts[i].append(text)
            if reasoning:
                thoughts.setdefault(i, []).append(reasoning)
            if choice.get("finish_reason") is not None:
                finish[i] = choice["finish_reason"]
    choices = []
    for i in sorted(texts):
        body = "".join(texts[i])
        if chat:
            msg: dict[str, Any] = {"role": "assistant", "content": body}
            if i in thoughts:
                msg["reasoning"] = "".join(thoughts[i])
            choices.append({"index": i, "message": msg, "finish_reason": finish.get(i)})
        else:
            choices.append({"index": i, "text": body, "finish_reason": finish.get(i)})
    out["choices"] = choices
    return out


def sse_lines(path: Path) -> list[Line]:
    """A saved server-sent-events stream as JSON lines: each ``data:`` payload, ``[DONE]``, ``event:`` and comment lines left out."""
    out: list[Line] = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = raw.strip()
            if not line or line.startswith(b":") or line.split(b":", 1)[0] in (b"event", b"id", b"retry"):
                continue
            if line.startswith(b"data:"):
                line = line[5:].strip()
            if line == b"[DONE]":
                continue
            try:
                out.append((lineno, json.loads(line.decode("utf-8")), None))
            except UnicodeDecodeError as exc:
                out.append((lineno, None, f"not UTF-8 (byte {exc.start + 1} of the line)"))
            except json.JSONDecodeError as exc:
                out.append((lineno, None, f"invalid JSON ({exc.msg}, column {exc.colno})"))
            except RecursionError:
                out.append((lineno, None, "JSON nested too deeply"))
    return out


def assemble_lines(lines: list[Line]) -> tuple[list[Line], list[str]]:
    """The objects of one file with every stream assembled, and a note per file that held streams.

    Chunks are grouped by request ``id`` (chunks without one form one request); the assembled
    response stands at its first chunk's line and keeps the numbers of all its lines in
    ``stream_lines``. Other objects (whole responses, wrapper lines, unreadable lines) pass through
    in place. A wrapper whose ``response`` is a list of chunks is assembled where it stands.
    """
    groups: dict[Any, list[tuple[int, dict[str, Any]]]] = {}
    order: list[tuple[int, Any]] = []  # (line, key) of every output object in file order
    rest: dict[int, Line] = {}
    for lineno, obj, bad in lines:
        if bad is None and is_chunk(obj):
            key = ("id", obj.get("id"))
            if key not in groups:
                groups[key] = []
                order.append((lineno, key))
            groups[key].append((lineno, obj))
            continue
        if bad is None and isinstance(obj, dict) and isinstance(obj.get("response"), list) and obj["response"] \
                and all(is_chunk(c) for c in obj["response"]):
            obj = {**obj, "response": assemble(obj["response"])}
        rest[lineno] = (lineno, obj, bad)
        order.append((lineno, None))
    out: list[Line] = []
    for lineno, key in order:
        if key is None:
            out.append(rest[lineno])
            continue
        members = groups[key]
        resp = assemble([c for _, c in members])
        resp["stream_lines"] = [n for n, _ in members]
        out.append((lineno, resp, None))
    notes = []
    if groups:
        n_chunks = sum(len(m) for m in groups.values())
        notes.append(f"{n_chunks} stream chunks assembled into {len(groups)} response(s), one per request id")
    return out, notes
