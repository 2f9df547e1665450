"""Scale past one file: a folder of Parquet parts or a glob reads as one table, with only the columns it needs."""

from __future__ import annotations

import polars as pl
import pytest

import lengthlens as ll
from lengthlens.data.errors import LoadError


@pytest.fixture(scope="module")
def parts(tmp_path_factory, example_flat):
    d = tmp_path_factory.mktemp("parts")
    whole = example_flat
    df = pl.read_parquet(whole).with_columns(pl.lit(1).alias("not_a_field"))
    folder = d / "parts"
    folder.mkdir()
    for i, part in enumerate(df.partition_by(["target", "dataset"], maintain_order=True)):
        part.write_parquet(folder / f"part-{i}.parquet")
    return whole, folder


def _same(a: ll.RunSet, b: ll.RunSet) -> None:
    cols = [c for c in a.table.columns if c != "source"]
    key = ["target", "draft", "dataset", "method", "params", "item_id", "seed"]
    assert a.table.select(cols).sort(key).equals(b.table.select(cols).sort(key))
    assert a.n_found == b.n_found and a.skipped.height == b.skipped.height


def test_a_folder_of_parts_reads_as_the_one_file(parts):
    whole, folder = parts
    one, split = ll.load(whole, run_graders=False), ll.load(folder, run_graders=False)
    _same(one, split)
    assert split.table["source"].str.contains(r"part-\d\.parquet:\d+$").all()  # each run's place: part and row
    assert any("not_a_field" in w for w in split.warnings)  # an unknown column is named, not kept


def test_a_glob_reads_its_matches(parts):
    whole, folder = parts
    _same(ll.load(whole, run_graders=False), ll.load(str(folder / "part-*.parquet"), run_graders=False))
    with pytest.raises(LoadError, match="no file matches"):
        ll.load(str(folder / "nothing-*.parquet"))


def test_without_text_the_text_column_is_not_read(parts):
    _, folder = parts
    runs = ll.load(folder, run_graders=False, with_text=False)
    assert runs.table["text"].null_count() == runs.table.height
    assert ll.cells(runs, n_resamples=200).to_frame()["lambda"].notna().all()
