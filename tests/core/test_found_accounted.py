"""Found = loaded + skipped for every reader: files that are not files, empty or gzip files, malformed fields, Parquet parts.

Each case copies the engines' fixture folders (tests/core/fixtures/engines) or writes flat records,
damages one file, one field or one part, and loads the result in a worker process with a time limit.
Asserted for every case: the load returns (no hang, no traceback); every entry found is loaded or
listed as skipped (``n_found == loaded + skipped``); the damage is listed with its file (and line
or request) and a reason naming the field or the problem; and the rest loads: a damaged file or
record costs only itself, never the source or the report.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
from pathlib import Path

import pytest

from . import damaged
from .engine_fixtures import ROOT
from .isolated import CallFailed, Isolated
from .test_damaged_inputs import assert_same_cells

SUMMARY = f"{damaged.__name__}:summary"
LIMIT_S = 60
pytestmark = pytest.mark.timeout(300)

#: format -> (fixture folder, the relaxed arm's folder inside it, its record file, the reader's options)
ENGINES = {
    "vllm": ("vllm", "fly", "responses.jsonl", {}),
    "sglang": ("sglang", "cactus", "outputs.jsonl", {}),
    "aiperf": ("aiperf", "fly", "profile_export.jsonl", {}),
    "vllm-bench": ("vllm_bench", "", "openai-chat-infqps-concurrency4-Qwen3-8B-fly.json", {"max_new_tokens": 64}),
}


@pytest.fixture(scope="module")
def worker():
    w = Isolated()
    yield w
    w.close()


def _load(worker, sources: list[Path], fmt: str | None = None, options: dict | None = None) -> dict:
    kwargs = {"format": fmt, "format_options": options or None} if fmt else {}
    try:
        got = worker.call(SUMMARY, [str(s) for s in sources], timeout=LIMIT_S, **kwargs)
    except CallFailed as exc:
        assert exc.kind == "LoadError" and "Traceback" not in exc.message, exc.trace
        raise
    read = [s for s in got["skipped"] if s[2] != "pairing"]
    assert got["n_found"] == got["n_loaded"] + got["n_not_loaded"], (got["n_found"], got["n_loaded"], read)
    return got


def _skips(got: dict) -> list[tuple[str, str]]:
    return [(p, r) for p, r, stage in got["skipped"] if stage != "pairing"]


def _new_skips(got: dict, ref: dict) -> list[tuple[str, str]]:
    """Skips of ``got`` that ``ref`` (another copy of the same files) does not have, compared by folder and file name."""
    rel = lambda p: (Path(p).parent.name, Path(p).name)  # noqa: E731
    old = {(rel(p), r) for p, r in _skips(ref)}
    return sorted((p, r) for p, r in _skips(got) if (rel(p), r) not in old)


@pytest.fixture(scope="module")
def clean(tmp_path_factory, worker) -> dict[str, dict]:
    """Each engine fixture folder loaded as it is (the reference)."""
    out = {}
    for fmt, (folder, _, _, opts) in ENGINES.items():
        out[fmt] = _load(worker, [ROOT / folder], fmt, opts)
    return out


def _copy(tmp_path: Path, fmt: str) -> tuple[Path, Path]:
    folder, arm, name, _ = ENGINES[fmt]
    root = tmp_path / folder
    shutil.copytree(ROOT / folder, root)
    return root, root / arm / name


# ------------------------------------------------------------------------------------------------
# Files that are not records: each is one entry found and listed with what it is.
# ------------------------------------------------------------------------------------------------

def _extra(record_file: Path, fmt: str) -> Path:
    """Where an extra file the reader would pick up goes (AIPerf reads only files named profile_export.jsonl)."""
    if fmt == "aiperf":
        d = record_file.parent / "extra"
        d.mkdir()
        return d / "profile_export.jsonl"
    return record_file.with_name("extra" + record_file.suffix)


FILE_DAMAGE = {
    "fifo": (lambda p: os.mkfifo(p), "FIFO"),
    "folder": (lambda p: p.mkdir(), "it is a folder"),
    "dev_zero": (lambda p: p.symlink_to("/dev/zero"), "character device"),
    "dangling_link": (lambda p: p.symlink_to("/nonexistent/x"), "points to nothing"),
    "empty": (lambda p: p.write_bytes(b""), "empty"),
    "blank_lines": (lambda p: p.write_bytes(b"\n  \n"), "empty"),
    "bad_gzip": (lambda p: p.with_name(p.name + ".gz").write_bytes(b"\x1f\x8b\x08garbage"), "gzip"),
}


@pytest.mark.parametrize("damage", sorted(FILE_DAMAGE))
@pytest.mark.parametrize("fmt", sorted(ENGINES))
def test_a_file_that_is_not_records_is_named_and_the_rest_loads(worker, clean, tmp_path, fmt, damage):
    root, record_file = _copy(tmp_path, fmt)
    victim = _extra(record_file, fmt)
    make, reason = FILE_DAMAGE[damage]
    make(victim)
    got = _load(worker, [root], fmt, ENGINES[fmt][3])
    named = [(p, r) for p, r in _skips(got) if p.startswith(str(victim))]
    assert len(named) == 1 and reason in named[0][1], _skips(got)
    assert got["n_found"] == clean[fmt]["n_found"] + 1 and got["n_loaded"] == clean[fmt]["n_loaded"]
    assert_same_cells(got["cells"], clean[fmt]["cells"])


def _gzip_or_bom(record_file: Path, how: str) -> None:
    """Replace a record file by its gzip-compressed copy (``name.gz``), or prefix it with a UTF-8 byte-order mark."""
    data = record_file.read_bytes()
    if how == "gzip":
        record_file.unlink()
        record_file.with_name(record_file.name + ".gz").write_bytes(gzip.compress(data))
    else:
        record_file.write_bytes(b"\xef\xbb\xbf" + data)


@pytest.mark.parametrize("fmt", sorted(ENGINES))
@pytest.mark.parametrize("how", ["gzip", "bom"])
def test_gzip_and_bom_files_read_as_the_plain_file(worker, clean, tmp_path, fmt, how):
    root, record_file = _copy(tmp_path, fmt)
    _gzip_or_bom(record_file, how)
    got = _load(worker, [root], fmt, ENGINES[fmt][3])
    assert (got["n_found"], got["n_loaded"]) == (clean[fmt]["n_found"], clean[fmt]["n_loaded"])
    strip = lambda s: sorted(((Path(p).parent.name, Path(p).name.replace(".gz", "")), r) for p, r in s)  # noqa: E731
    assert strip(_skips(got)) == strip(_skips(clean[fmt]))
    assert_same_cells(got["cells"], clean[fmt]["cells"])


# ------------------------------------------------------------------------------------------------
# Malformed fields: the record is skipped, naming file, line and field; the file's other records load.
# ------------------------------------------------------------------------------------------------

def _edit_line(path: Path, index: int, edit) -> int:
    """Apply ``edit`` to the JSON object on the ``index``-th line; return its line number."""
    lines = path.read_text().splitlines()
    obj = json.loads(lines[index])
    edit(obj)
    lines[index] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")
    return index + 1


def _set(*keys, value):
    def edit(obj):
        d = obj
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return edit


def _drop(*keys):
    def edit(obj):
        d = obj
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]
    return edit


# (format, edit of the relaxed arm's second record, the field the reason names)
FIELD_CASES = [
    ("vllm", _set("response", "usage", value=[54]), "usage"),
    ("vllm", _set("response", "metrics", value="fast"), "metrics"),
    ("vllm", _set("response", "metrics", "speculative_decoding", value=[16, 37, 48]), "speculative_decoding"),
    ("vllm", _drop("response", "metrics", "speculative_decoding", "num_spec_steps"), "num_spec_steps"),
    ("vllm", _set("response", "metrics", "time_to_first_token_ms", value=math.inf), "time_to_first_token_ms"),
    ("vllm", _set("response", "metrics", "generation_time_ms", value="455 ms"), "generation_time_ms"),
    ("vllm", _set("response", "metrics", "generation_time_ms", value=-3.0), "generation_time_ms"),
    ("vllm", _set("response", "choices", value=["The answer"]), "choices"),
    ("vllm", _set("response", "usage", "completion_tokens", value=math.nan), "completion_tokens"),
    ("vllm", _set("response", "usage", "completion_tokens", value=-54), "output_tokens"),
    ("sglang", _set("response", "sglext", "spec_tokens_details", "spec_verify_ct", value=-16), "draft_rounds"),
    ("aiperf", _set("spec_decode_acceptance", "num_spec_steps", value=-16), "draft_rounds"),
    ("sglang", _set("response", "usage", value="54"), "usage"),
    ("sglang", _set("response", "sglext", "spec_tokens_details", value="fast"), "spec_tokens_details"),
    ("sglang", _drop("response", "sglext", "spec_tokens_details", "spec_verify_ct"), "spec_verify_ct"),
    ("sglang", _set("response", "sglext", value=[1]), "sglext"),
    ("aiperf", _set("metrics", "request_latency", "value", value=math.inf), "request_latency"),
    ("aiperf", _set("metrics", "request_latency", "value", value="495"), "request_latency"),
    ("aiperf", _set("metrics", "request_latency", value=[495.0]), "request_latency"),
    ("aiperf", _set("spec_decode_acceptance", value=[16, 37]), "spec_decode_acceptance"),
    ("aiperf", _set("metadata", value=["conv-q1"]), "metadata"),
    ("aiperf", _set("metrics", value=[]), "metrics"),
]


@pytest.mark.parametrize("fmt,edit,field", FIELD_CASES, ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(FIELD_CASES)])
def test_a_malformed_field_skips_its_record_naming_the_field(worker, clean, tmp_path, fmt, edit, field):
    root, record_file = _copy(tmp_path, fmt)
    line = _edit_line(record_file, 1, edit)
    got = _load(worker, [root], fmt, ENGINES[fmt][3])
    new = _new_skips(got, clean[fmt])
    assert len(new) == 1, new
    where, reason = new[0]
    assert where.endswith(f"{record_file.name}:{line}") and field in reason, new
    assert got["n_found"] == clean[fmt]["n_found"] and got["n_loaded"] == clean[fmt]["n_loaded"] - 1


def test_vllm_bench_a_nan_total_is_named_and_a_bad_request_skips_only_itself(worker, clean, tmp_path):
    root, result = _copy(tmp_path, "vllm-bench")
    data = json.loads(result.read_text())
    data["spec_decode_num_drafts"] = math.nan
    data["output_lens"][2] = 12.5
    data["latencies"][1] = math.inf
    result.write_text(json.dumps(data))
    got = _load(worker, [root], "vllm-bench", ENGINES["vllm-bench"][3])
    new = _new_skips(got, clean["vllm-bench"])
    assert [Path(p).name for p, _ in new] == [f"{result.name}#request1", f"{result.name}#request2"]
    assert "latencies" in new[0][1] and "output_lens" in new[1][1]
    assert any(result.name in w and "spec_decode_num_drafts nan" in w for w in got["warnings"])
    assert got["n_loaded"] == clean["vllm-bench"]["n_loaded"] - 2


# ------------------------------------------------------------------------------------------------
# Flat records: BOM and gzip JSONL, Parquet parts one by one.
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def flat(tmp_path_factory, worker) -> dict:
    base = tmp_path_factory.mktemp("flat")
    rows = damaged.flat_rows(damaged.clean_tree(base / "runs"))
    plain = damaged.write_jsonl(base / "runs.jsonl", rows)
    return {"rows": rows, "base": base, "plain": _load(worker, [plain])}


@pytest.mark.parametrize("how", ["bom", "gzip_named", "gzip_unnamed"])
def test_bom_and_gzip_jsonl_read_as_the_plain_file(worker, flat, tmp_path, how):
    data = damaged.write_jsonl(tmp_path / "x.jsonl", flat["rows"]).read_bytes()
    target = {"bom": tmp_path / "runs.jsonl", "gzip_named": tmp_path / "runs.jsonl.gz",
              "gzip_unnamed": tmp_path / "runs.jsonl"}[how]
    (tmp_path / "x.jsonl").unlink()
    target.write_bytes(b"\xef\xbb\xbf" + data if how == "bom" else gzip.compress(data))
    got = _load(worker, [target])
    assert (got["n_found"], got["n_loaded"]) == (flat["plain"]["n_found"], flat["plain"]["n_loaded"])
    assert_same_cells(got["cells"], flat["plain"]["cells"])


def test_a_bom_csv_reads_as_the_plain_file(worker, flat, tmp_path):
    import polars as pl

    plain = tmp_path / "plain.csv"
    # reference_answer left out: a CSV column of numbers is typed as numbers, and the record wants text.
    pl.DataFrame(flat["rows"]).drop("reference_answer").write_csv(plain)
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    want, got = _load(worker, [plain]), _load(worker, [bom])
    assert (got["n_found"], got["n_loaded"]) == (want["n_found"], want["n_loaded"]) == (flat["plain"]["n_found"],
                                                                                         flat["plain"]["n_loaded"])
    assert_same_cells(got["cells"], want["cells"])


def _parts(folder: Path, rows: list[dict], n: int = 3) -> list[Path]:
    import polars as pl

    folder.mkdir()
    size = -(-len(rows) // n)
    out = []
    for k in range(n):
        p = folder / f"part-{k}.parquet"
        pl.DataFrame(rows[k * size:(k + 1) * size]).write_parquet(p)
        out.append(p)
    return out


def test_parquet_parts_with_another_type_a_bad_part_and_a_missing_column(worker, flat, tmp_path):
    import polars as pl

    parts = _parts(tmp_path / "parts", flat["rows"])
    whole = _load(worker, [tmp_path / "parts"])
    assert whole["n_loaded"] == flat["plain"]["n_loaded"]
    assert_same_cells(whole["cells"], flat["plain"]["cells"])
    # A part whose counts are floats (whole numbers): cast, not a reason to drop the folder.
    df = pl.read_parquet(parts[0])
    df.with_columns(pl.col("output_tokens").cast(pl.Float64)).write_parquet(parts[0])
    got = _load(worker, [tmp_path / "parts"])
    assert got["n_loaded"] == whole["n_loaded"]
    assert_same_cells(got["cells"], whole["cells"])
    # A damaged part, a FIFO part, an empty file named as a part, a marker file: each named, the rest loads.
    parts[1].write_bytes(parts[1].read_bytes()[:100])
    os.mkfifo(tmp_path / "parts" / "part-9.parquet")
    (tmp_path / "parts" / "part-8.parquet").write_bytes(b"")
    (tmp_path / "parts" / "_SUCCESS").write_bytes(b"")
    got = _load(worker, [tmp_path / "parts"])
    named = {Path(p).name: r for p, r in _skips(got)}
    assert set(named) == {"part-1.parquet", "part-8.parquet", "part-9.parquet"}, named
    assert "FIFO" in named["part-9.parquet"] and "Parquet" in named["part-1.parquet"]
    assert got["n_loaded"] == whole["n_loaded"] - _rows(parts, 1, flat)
    assert any("_SUCCESS" in w and "not read" in w for w in got["warnings"])
    # A part without output_tokens: its runs load, and a warning names the part.
    pl.read_parquet(parts[2]).drop("output_tokens").write_parquet(parts[2])
    got = _load(worker, [tmp_path / "parts"])
    assert any("part-2.parquet" in w and "no output_tokens" in w for w in got["warnings"])
    assert any("have no output_tokens" in w and "part-2.parquet" in w for w in got["warnings"])


def _rows(parts: list[Path], k: int, flat: dict) -> int:
    size = -(-len(flat["rows"]) // len(parts))
    return len(flat["rows"][k * size:(k + 1) * size])


# ------------------------------------------------------------------------------------------------
# The readers of the real tools' files: saved streams (JSON list, JSON lines, server-sent events), inspect_ai logs,
# and grades files. The same accounting: every file found is loaded or named, a malformed field costs its record.
# ------------------------------------------------------------------------------------------------

TOOLS = Path(__file__).resolve().parent / "fixtures" / "tools"
#: reader -> (fixture folder under tools/, the relaxed arm's folder, its record file (a glob), the --format)
TOOL_READERS = {
    "stream-json": ("stream/json", "fly", "chunks.json", "vllm"),
    "stream-jsonl": ("stream/jsonl", "fly", "chunks.jsonl", "vllm"),
    "stream-sse": ("stream/sse", "fly", "curl.sse", "vllm"),
    "inspect": ("inspect", "fly", "*.eval", "inspect"),
}


def _load_tool(worker, root: Path, reader: str) -> dict:
    got = worker.call(SUMMARY, [str(root)], timeout=LIMIT_S, format=TOOL_READERS[reader][3], run_graders=False)
    assert got["n_found"] == got["n_loaded"] + got["n_not_loaded"], (got["n_found"], got["n_loaded"], _skips(got))
    return got


@pytest.fixture(scope="module")
def clean_tools(worker) -> dict[str, dict]:
    """Each tool fixture folder loaded as it is (the reference)."""
    return {r: _load_tool(worker, TOOLS / TOOL_READERS[r][0], r) for r in TOOL_READERS}


def _copy_tool(tmp_path: Path, reader: str) -> tuple[Path, Path]:
    folder, arm, pattern, _ = TOOL_READERS[reader]
    root = tmp_path / "fixture"
    shutil.copytree(TOOLS / folder, root)
    (record_file,) = (root / arm).glob(pattern)
    return root, record_file


@pytest.mark.parametrize("damage", sorted(FILE_DAMAGE))
@pytest.mark.parametrize("reader", sorted(TOOL_READERS))
def test_tool_readers_name_a_file_that_is_not_records_and_the_rest_loads(worker, clean_tools, tmp_path, reader, damage):
    root, record_file = _copy_tool(tmp_path, reader)
    victim = record_file.with_name("extra" + record_file.suffix)
    make, reason = FILE_DAMAGE[damage]
    make(victim)
    got = _load_tool(worker, root, reader)
    named = [(p, r) for p, r in _skips(got) if p.startswith(str(victim))]
    assert len(named) == 1 and reason in named[0][1], _skips(got)
    ref = clean_tools[reader]
    assert got["n_found"] == ref["n_found"] + 1 and got["n_loaded"] == ref["n_loaded"]
    assert_same_cells(got["cells"], ref["cells"])


@pytest.mark.parametrize("reader", sorted(TOOL_READERS))
@pytest.mark.parametrize("how", ["gzip", "bom"])
def test_tool_readers_read_gzip_and_bom_files_as_the_plain_file(worker, clean_tools, tmp_path, reader, how):
    root, record_file = _copy_tool(tmp_path, reader)
    _gzip_or_bom(record_file, how)
    got = _load_tool(worker, root, reader)
    ref = clean_tools[reader]
    assert (got["n_found"], got["n_loaded"]) == (ref["n_found"], ref["n_loaded"]), _skips(got)
    assert_same_cells(got["cells"], ref["cells"])


def _chunk_lines(path: Path) -> tuple[list[bytes], list[int]]:
    """The file's lines, and the indexes of those holding a chunk of the file's third request (its id's lines)."""
    lines = path.read_bytes().split(b"\n")
    ids: list[str] = []
    at: dict[str, list[int]] = {}
    for i, line in enumerate(lines):
        text = line.decode().removeprefix("data:").strip()
        if text.startswith("{"):
            rid = json.loads(text)["id"]
            if rid not in at:
                ids.append(rid)
            at.setdefault(rid, []).append(i)
    return lines, at[ids[2]]


# (edit of one chunk of the third request: its second chunk, or "last" for the final usage chunk; the field named)
STREAM_CASES = [
    (1, _set("choices", value="The answer"), "choices"),
    (1, _set("choices", value=[7]), "choices"),
    (1, lambda c: c["choices"][0].__setitem__("delta", ["w"]), "delta"),
    (1, lambda c: c["choices"][0]["delta"].__setitem__("reasoning", {"text": "w"}), "reasoning"),
    (1, lambda c: c["choices"][0].__setitem__("index", "0"), "index"),
    ("last", _set("usage", value=[54]), "usage"),
    ("last", _set("metrics", value="fast"), "metrics"),
]


@pytest.mark.parametrize("reader", ["stream-jsonl", "stream-sse"])
@pytest.mark.parametrize("k,edit,field", STREAM_CASES, ids=[f"{c[2]}-{i}" for i, c in enumerate(STREAM_CASES)])
def test_a_malformed_stream_chunk_skips_its_request_naming_the_field(worker, clean_tools, tmp_path, reader, k, edit, field):
    root, record_file = _copy_tool(tmp_path, reader)
    lines, members = _chunk_lines(record_file)
    if k == "last" and not any(b'"usage"' in lines[i] for i in members):
        pytest.skip("this saved stream has no usage chunk")
    i = members[-1] if k == "last" else members[k]
    prefix, text = (b"data: ", lines[i][5:].strip()) if lines[i].startswith(b"data:") else (b"", lines[i])
    obj = json.loads(text)
    edit(obj)
    lines[i] = prefix + json.dumps(obj).encode()
    record_file.write_bytes(b"\n".join(lines))
    got = _load_tool(worker, root, reader)
    ref = clean_tools[reader]
    new = _new_skips(got, ref)
    assert len(new) == 1, new
    where, reason = new[0]
    assert where.endswith(f"{record_file.name}:{members[0] + 1}") and field in reason, new
    assert got["n_found"] == ref["n_found"] and got["n_loaded"] == ref["n_loaded"] - 1


def _rewrite_eval(path: Path, edit) -> str:
    """Apply ``edit`` to the log's second sample (members rewritten deflated); return the sample's member name."""
    import io
    import zipfile

    from lengthlens.data.readers.inspect_log import _member

    data = path.read_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        members = {n: _member(z, data, n) for n in z.namelist()}
    victim = sorted(n for n in members if n.startswith("samples/"))[1]
    sample = json.loads(members[victim])
    edit(sample)
    members[victim] = json.dumps(sample).encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in members.items():
            z.writestr(n, b)
    return victim


def _model_response(*keys, value):
    def edit(sample):
        call = next(e for e in sample["events"] if e.get("event") == "model")["call"]
        _set("response", *keys, value=value)(call)
    return edit


INSPECT_CASES = [
    (_set("scores", value=["C"]), "scores"),
    (lambda s: s["scores"].__setitem__(next(iter(s["scores"])), "C"), "scores."),
    (_set("epoch", value="one"), "epoch"),
    (_set("events", value="model"), "events"),
    (_set("attachments", value=["x"]), "attachments"),
    (_model_response("usage", value=[54]), "usage"),
    (_model_response("metrics", value="fast"), "metrics"),
    (_model_response("choices", value=["The answer"]), "choices"),
]


@pytest.mark.parametrize("edit,field", INSPECT_CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(INSPECT_CASES)])
def test_a_malformed_inspect_sample_skips_itself_naming_the_field(worker, clean_tools, tmp_path, edit, field):
    root, record_file = _copy_tool(tmp_path, "inspect")
    victim = _rewrite_eval(record_file, edit)
    got = _load_tool(worker, root, "inspect")
    ref = clean_tools["inspect"]
    new = _new_skips(got, ref)
    assert len(new) == 1, new
    where, reason = new[0]
    assert where.endswith(f"{record_file.name}#{victim}") and field in reason, new
    assert got["n_found"] == ref["n_found"] and got["n_loaded"] == ref["n_loaded"] - 1


def test_a_deflated_eval_reads_as_the_zstandard_one_and_a_member_past_the_cap_is_named(worker, clean_tools, tmp_path,
                                                                                        monkeypatch):
    root, record_file = _copy_tool(tmp_path, "inspect")
    _rewrite_eval(record_file, lambda s: None)
    got = _load_tool(worker, root, "inspect")
    ref = clean_tools["inspect"]
    assert (got["n_found"], got["n_loaded"]) == (ref["n_found"], ref["n_loaded"])
    assert_same_cells(got["cells"], ref["cells"])
    # A member whose stated size is past the per-file cap is not decompressed: the log is named, nothing hangs.
    import lengthlens.data.readers.inspect_log as il

    monkeypatch.setenv("LENGTHLENS_MAX_FILE_BYTES", str(record_file.stat().st_size + 1))
    _, samples = il.log_contents(record_file)  # the file is under the cap; its members are smaller still
    assert all(bad is None for _, _, bad in samples)
    monkeypatch.setenv("LENGTHLENS_MAX_FILE_BYTES", "2000")
    with pytest.raises(ValueError, match="limit"):
        il.log_contents(record_file)


# --- Grades files (--grades): a one-line error naming file, line and field; gzip and BOM read; nothing hangs. ----

def _aiperf_grades(tmp_path: Path) -> tuple[Path, bytes]:
    """A generic grades file (CSV) for the AIPerf fixture's two arms, and its bytes."""
    from .test_tool_fixtures import ARMS, _aiperf_raw

    rows = [f"{a},{i},{int(int(i[1:]) % (3 if a == 'fly' else 4) != 0)}" for a in ARMS for i in _aiperf_raw(a)]
    return tmp_path / "grades.csv", ("method,item_id,correct\n" + "\n".join(rows) + "\n").encode()


def _grades_summary(worker, grades: Path) -> dict:
    return worker.call(SUMMARY, [str(TOOLS / "aiperf")], timeout=LIMIT_S, format="aiperf", grades=[str(grades)])


@pytest.mark.parametrize("how", ["gzip", "bom"])
def test_a_gzip_or_bom_grades_file_grades_as_the_plain_one(worker, tmp_path, how):
    plain, data = _aiperf_grades(tmp_path)
    plain.write_bytes(data)
    want = _grades_summary(worker, plain)
    other = tmp_path / ("g.csv.gz" if how == "gzip" else "g.csv")
    other.write_bytes(gzip.compress(data) if how == "gzip" else b"\xef\xbb\xbf" + data)
    got = _grades_summary(worker, other)
    assert_same_cells(got["cells"], want["cells"])
    assert any(c.get("accuracy_delta_pp") is not None and not math.isnan(c["accuracy_delta_pp"]) for c in got["cells"])


GRADES_DAMAGE = {
    "fifo": (lambda p: os.mkfifo(p), "grades.csv: unusable grade file: not a regular file: it is a FIFO"),
    "dev_zero": (lambda p: p.symlink_to("/dev/zero"), "grades.csv: unusable grade file: not a regular file"),
    "folder": (lambda p: p.mkdir(), "grades.csv: unusable grade file: not a regular file: it is a folder"),
    "bad_gzip": (lambda p: p.write_bytes(b"\x1f\x8b\x08garbage"), "grades.csv: unusable grade file: not a valid gzip"),
}


@pytest.mark.parametrize("damage", sorted(GRADES_DAMAGE))
def test_a_grades_file_that_is_not_a_file_is_one_line_naming_it(worker, tmp_path, damage):
    path = tmp_path / "grades.csv"
    make, message = GRADES_DAMAGE[damage]
    make(path)
    with pytest.raises(CallFailed) as err:
        _grades_summary(worker, path)
    assert err.value.kind == "LoadError" and message in err.value.message and "\n" not in err.value.message.strip()


@pytest.mark.parametrize("name,body,where", [
    ("g.jsonl", b'{"item_id": "q01", "correct": true}\n\n\n{"item_id": "q02", "correct": "maybe"}\n',
     "g.jsonl: invalid grades file: line 4: field 'correct'"),
    ("g.jsonl", b'{"item_id": "0", "correct": true, "correct": false}\n',
     "g.jsonl: invalid grades file: line 1: field 'correct': key 'correct' appears twice"),
    ("g.jsonl", b'{"item_id": "0", "correct": true}\n[1]\n', "g.jsonl: invalid grades file: line 2: expected a JSON object"),
    ("g.csv", b"item_id,seed,correct\n0,0,1\n1,x,0\n", "g.csv: invalid grades file: line 3: field 'seed'"),
])
def test_a_malformed_grade_is_one_line_naming_file_line_and_field(worker, tmp_path, name, body, where):
    path = tmp_path / name
    path.write_bytes(body)
    with pytest.raises(CallFailed) as err:
        _grades_summary(worker, path)
    assert err.value.kind == "LoadError" and where in err.value.message, err.value.message
