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

from pathlib import Path
from typing import Any

from lengthlens.data.safeio import JSONProblem, UnreadableFile, decode_json, iter_lines, kind_of

#: (line number, parsed JSON or None, reason when unreadable) as the response readers take them; no line number for
#: what concerns the whole file.
Line = tuple[int | None, Any, str | None]

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
    """A chunk's piece of text and of reasoning; ValueError naming the field that holds something else than text."""
    delta = choice.get("delta")
    if delta is not None and not isinstance(delta, dict):
        raise ValueError(f"field 'choices[].delta' is {kind_of(delta)}, not an object")
    if isinstance(delta, dict):
        reasoning_key = "reasoning" if delta.get("reasoning") is not None else "reasoning_content"
        for key in ("content", reasoning_key):
            if delta.get(key) is not None and not isinstance(delta[key], str):
                raise ValueError(f"field 'choices[].delta.{key}' is {kind_of(delta[key])}, not text")
        return delta.get("content"), delta.get(reasoning_key)
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
    for c in chunks:
        if c.get("choices") is not None and not isinstance(c["choices"], list):
            raise ValueError(f"field 'choices' is {kind_of(c['choices'])}, not a list")
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
                raise ValueError(f"field 'choices' holds {kind_of(choice)}, not an object")
            i = choice.get("index") if choice.get("index") is not None else 0
            if isinstance(i, bool) or not isinstance(i, int):
                raise ValueError(f"field 'choices[].index' is {kind_of(i)}, not a whole number")
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
    """A saved server-sent-events stream as JSON lines: each ``data:`` payload, ``[DONE]``, ``event:`` and comment lines left out.

    The file is read as every response file is (:func:`lengthlens.data.safeio.iter_lines`: regular files only,
    gzip decompressed, a byte-order mark dropped); a problem of the whole file (not a regular file, no event
    in it) is one ``(None, None, reason)``, as :func:`lengthlens.data.readers.common.json_lines` gives it.
    """
    out: list[Line] = []
    found = False
    try:
        for lineno, raw, bad in iter_lines(path):
            if bad is not None:
                found = True
                out.append((lineno, None, bad))
                continue
            line = raw.strip()
            if not line or line.startswith(b":") or line.split(b":", 1)[0] in (b"event", b"id", b"retry"):
                continue
            found = True
            if not line.strip(b"\x00 \t\r\n"):
                out.append((lineno, None, f"padding of {line.count(0)} NUL bytes, not a record (a file preallocated "
                                          "or cut while it was written)"))
                continue
            if line.startswith(b"data:"):
                line = line[5:].strip()
            if line == b"[DONE]":
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                out.append((lineno, None, f"not UTF-8 (byte {exc.start + 1} of the line)"))
                continue
            try:
                out.append((lineno, decode_json(text), None))
            except JSONProblem as exc:
                out.append((lineno, None, (f"field '{exc.field}': " if exc.field else "") + exc.reason))
    except FileNotFoundError:
        found = True
        out.append((None, None, "gone while it was read"))
    except UnreadableFile as exc:
        found = True
        out.append((None, None, str(exc)))
    if not found:
        out.append((None, None, "an empty file: it holds no event"))
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
            rid = obj.get("id")
            key = ("id", rid if isinstance(rid, (str, int, type(None))) else repr(rid))  # an odd id still groups
            if key not in groups:
                groups[key] = []
                order.append((lineno, key))
            groups[key].append((lineno, obj))
            continue
        if bad is None and isinstance(obj, dict) and isinstance(obj.get("response"), list) and obj["response"] \
                and all(is_chunk(c) for c in obj["response"]):
            try:
                obj = {**obj, "response": assemble(obj["response"])}
            except (ValueError, TypeError, AttributeError) as exc:
                obj, bad = None, f"field 'response': its stream chunks not assembled: {exc}"
        rest[lineno] = (lineno, obj, bad)
        order.append((lineno, None))
    out: list[Line] = []
    for lineno, key in order:
        if key is None:
            out.append(rest[lineno])
            continue
        members = groups[key]
        try:
            resp = assemble([c for _, c in members])
        except (ValueError, TypeError, AttributeError) as exc:  # a malformed chunk skips its request, naming it
            lines_of = ", ".join(str(n) for n, _ in members)
            out.append((lineno, None, f"stream chunks of request id {key[1]!r} (lines {lines_of}) not assembled: {exc}"))
            continue
        resp["stream_lines"] = [n for n, _ in members]
        out.append((lineno, resp, None))
    notes = []
    if groups:
        n_chunks = sum(len(m) for m in groups.values())
        notes.append(f"{n_chunks} stream chunks assembled into {len(groups)} response(s), one per request id")
    return out, notes
