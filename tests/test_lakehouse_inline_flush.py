"""Flushing inlined rows: compaction moves inline files into Parquet files.

Explicit ``txn.compact`` always moves them (a lone inline file too), grouped
with their partition's small files, partitioned and sorted as the table
says; automatic compaction does once a table's inline files hold
``inline.flush_rows`` live rows or number ``compaction.min-files``. A flush
changes no row, records where every row went (a concurrent delete follows
it), and ``changes`` reports nothing for it. Every check reads the bytes
independently: inline payloads decoded, Parquet files read with pyarrow.
"""

from __future__ import annotations

import datetime as dt
import logging
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap
from test_lakehouse_compaction import D0, SCHEMA, rows  # the same table as compaction's tests

import lakehouse
from lakehouse.data import compaction, rewrites
from lakehouse.data import inline as inline_mod
from lakehouse.data.compaction import Candidate, plan
from lakehouse.data.table import file_key_id
from lakehouse.model import DataOp

T = "ns.t"
#: writes of up to 20 rows are inlined; no automatic compaction
SMALL = {"inline.max_rows": "20", "compaction.auto": "false"}


@pytest.fixture
def lh(tmp_path):
    h = lakehouse.open(str(tmp_path / "lh"))
    with h.begin() as t:
        t.create_namespace("ns")
    yield h
    h.close()


def create(h, props=SMALL, **kw) -> None:
    with h.begin() as t:
        t.create_table(T, SCHEMA, dict(props), **kw)


def content(view, **kw) -> list[tuple[int, str]]:
    t = view.read(T, **kw)
    return sorted(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), strict=True))


def inline_files(view):
    return [f for f, _ in view.file_states(T) if f.is_inline]


def file_rows(h, f) -> list[dict]:
    """Every row of a data file, deleted ones included, in position order: an inline
    file's payload decoded, a Parquet file read from the data directory."""
    if f.is_inline:
        return inline_mod.decode(f.inline, f.path).to_pylist()
    base = h.data_url.removeprefix("file://")
    return pq.read_table(os.path.join(base, f.path)).to_pylist()


def mixed_table(h, **kw) -> None:
    """Parquet files (30 rows each) and inline files (a few rows each), with deletions
    in both kinds."""
    create(h, **kw)
    h.append(T, rows(range(0, 30), tag="p"))
    h.append(T, rows(range(100, 105)))
    h.append(T, rows(range(30, 60), tag="p"))
    h.append(T, rows([7, 200, 3, 150, 42]))  # unsorted, and keys met in the files
    h.append(T, rows([999]))
    h.delete(T, "id = 101 OR id = 31 OR id = 200")


# -- planning (pure) --------------------------------------------------------------------
def c(fid, size=100, lo=None, hi=None, deleted=False, part=(0, ()), inline=False):
    key = (None, None) if lo is None else ((1, lo), (1, hi))
    return Candidate(fid, part, size, deleted, *key, inline=inline)


@pytest.mark.parametrize(
    ("files", "sort", "min_files", "want"),
    [
        # a lone inline file is never done (a lone small Parquet file is)
        ([c("a", inline=True)], False, None, [("a",)]),
        ([c("a")], False, None, []),
        ([c("a", 10, 0, 5, inline=True)], True, None, [("a",)]),
        # grouped with their partition's small files, never across partitions
        ([c("a"), c("b", inline=True), c("c", 900)], False, None, [("a", "b")]),
        (
            [c("a", inline=True, part=(1, (1,))), c("b", inline=True, part=(1, (2,)))],
            False,
            None,
            [("a",), ("b",)],
        ),
        # incremental: they join the first size tier, even below min_files
        ([c("a", 100), c("b", 50, inline=True)], False, 4, [("a", "b")]),
        ([c("a", 50, inline=True)], False, 4, [("a",)]),
        ([c("a", 100), c("b", 100)], False, 4, []),
    ],
)
def test_plan_takes_inline_files(files, sort, min_files, want):
    assert [j.fids for j in plan(files, 1000, sort, min_files)] == want


def test_incremental_flush_keeps_to_the_inline_files_size_tier():
    """Flushed rows are merged with small files of their own size tier, not with
    the larger files of earlier flushes (each row rewritten about once per tier)."""
    tier0 = compaction.TIER_BASE * 4 - 1
    files = [c("a", 30_000), c("b", 100, inline=True), c("c", tier0, inline=True)]
    assert [j.fids for j in plan(files, 10**9, False, 4)] == [("b", "c")]


# -- explicit compaction ------------------------------------------------------------------
def test_compact_moves_inline_and_parquet_rows_keeping_every_row_and_position(lh):
    mixed_table(lh)
    v0 = lh.version
    before = {file_key_id(f): (f, dv) for f, dv in lh.file_states(T)}
    assert sum(f.is_inline for f, _ in before.values()) == 3
    rows_before = content(lh)
    with lh.begin() as t:
        r = t.compact(T)
    assert r.files_removed == 5 and r.files_added == 1 and r.rows == len(rows_before)
    assert content(lh) == rows_before
    assert not inline_files(lh) and lh.table_stats(T).inlined_rows == 0
    after = {file_key_id(f): f for f, _ in lh.file_states(T)}
    # the record: every live source row maps to the output row holding the same values
    (rw,) = lh.version_info(lh.version).data[0].rewrites
    assert {fid for fid, _, _ in rw.sources} == set(before)
    checked = 0
    for fid, (f, dv) in before.items():
        live = BitMap(range(f.record_count)) - dv
        src = file_rows(lh, f)
        out_pos = rewrites.translate(rw, fid, live)
        assert len(out_pos) == len(live)
        for out_fid, local in rewrites.place(rw, out_pos).items():
            got = file_rows(lh, after[out_fid])
            back = rewrites.untranslate(rw, rewrites.gather(rw, out_fid, local))[fid]
            for p_src, p_out in zip(back, local, strict=True):
                assert got[p_out] == src[p_src]
                checked += 1
    assert checked == len(rows_before)
    # the old version still reads its inline files
    assert content(lh.at_version(v0)) == rows_before
    assert len(inline_files(lh.at_version(v0))) == 3


def test_a_lone_small_inline_file_is_flushed(lh):
    create(lh)
    lh.append(T, rows([5]))
    with lh.begin() as t:
        r = t.compact(T)
    assert (r.files_removed, r.files_added, r.rows) == (1, 1, 1)
    (f,) = lh.list_data_files(T)
    assert not f.is_inline and f.path.endswith(".parquet")
    assert content(lh) == [(5, "a5")]
    with lh.begin() as t:  # a Parquet file alone: nothing more to do
        assert t.compact(T).files_removed == 0


def test_an_inline_file_with_every_row_deleted_goes_away(lh):
    create(lh)
    lh.append(T, rows([1000, 1001]))
    lh.delete(T, "id >= 1000")
    with lh.begin() as t:
        r = t.compact(T)
    assert (r.files_removed, r.files_added) == (1, 0)
    assert lh.list_data_files(T) == [] and content(lh) == []
    # beside a small Parquet file: merged with it, nothing of it written
    lh.append(T, rows(range(0, 30), tag="p"))
    lh.append(T, rows([1000, 1001]))
    lh.delete(T, "id >= 1000")
    with lh.begin() as t:
        r = t.compact(T)
    assert (r.files_removed, r.files_added, r.rows) == (2, 1, 30)
    assert [f.is_inline for f in lh.list_data_files(T)] == [False]
    assert len(content(lh)) == 30


def test_the_flush_shows_nothing_in_changes(lh):
    mixed_table(lh)
    v = lh.version
    with lh.begin() as t:
        t.compact(T)
    assert lh.version == v + 1
    assert lh.changes(T, v + 1, v + 1).num_rows == 0
    lh.delete(T, "id = 999")  # a row that was inlined, deleted after the flush
    ch = lh.changes(T, v + 1, lh.version)
    assert ch.column("_change_type").to_pylist() == ["delete"]
    assert ch.column("id").to_pylist() == [999]


@pytest.mark.parametrize("delete_first", [True, False])
def test_concurrent_delete_of_inlined_rows_lands_on_the_moved_rows(lh, delete_first):
    """A delete begun before the flush commits after it (or commits while the flush
    is open): either way the deleted rows are gone from the Parquet file they moved
    to, and no other row. Sort keys make the move a permutation."""
    mixed_table(lh, sort_keys=["id"])
    want = [r for r in content(lh) if r[0] not in (3, 150, 104)]
    deleter = lh.begin()
    deleter.delete(T, "id = 3 OR id = 150 OR id = 104")  # inline rows only
    flusher = lh.begin()
    r = flusher.compact(T)
    assert r.files_removed == 5
    if delete_first:
        deleter.commit()
        flusher.commit()
    else:
        flusher.commit()
        deleter.commit()
    assert content(lh) == want
    assert not inline_files(lh)
    assert lh.version_info(lh.version - (0 if delete_first else 1)).data[0].rewrites
    ids = lh.read(T).column("id").to_pylist()
    assert ids == sorted(ids)  # one sorted file


def test_partitioned_sorted_flush(lh):
    create(lh, partition_by=["day"], sort_keys=["id"])
    lh.append(T, rows([50, 10, 30], day=0))
    lh.append(T, rows([20, 5], day=0))
    lh.append(T, rows([9, 1], day=1))
    lh.append(T, rows(range(100, 130), day=1, tag="p"))  # a Parquet file of day 1
    before = content(lh)
    with lh.begin() as t:
        r = t.compact(T)
    assert r.files_removed == 4 and r.files_added == 2
    assert content(lh) == before
    files = lh.list_data_files(T)
    assert not any(f.is_inline for f in files)
    by_day = {f.partition["day"]: f for f in files}
    assert sorted(by_day) == [D0, D0 + dt.timedelta(days=1)]
    for day, f in by_day.items():
        ids = [row["id"] for row in file_rows(lh, f)]
        assert ids == sorted(ids)
        assert {row["day"] for row in file_rows(lh, f)} == {day}
    assert [row["id"] for row in file_rows(lh, by_day[D0])] == [5, 10, 20, 30, 50]


def test_where_limited_compaction_flushes_only_those_partitions(lh):
    create(lh, partition_by=["day"])
    lh.append(T, rows([1], day=0))
    lh.append(T, rows([2], day=1))
    with lh.begin() as t:
        assert t.compact(T, where=f"day = DATE '{D0 + dt.timedelta(days=1)}'").files_removed == 1
    assert [f.partition["day"] for f in lh.list_data_files(T) if f.is_inline] == [D0]


def test_incremental_compaction_flushes_only_when_due(lh):
    create(lh, {**SMALL, "inline.flush_rows": "10"})
    lh.append(T, rows([1, 2, 3]))
    lh.append(T, rows([4, 5, 6]))
    with lh.begin() as t:  # 6 live inlined rows, 2 files: below both thresholds
        assert t.compact(T, min_files=4).files_removed == 0
    lh.append(T, rows([7, 8, 9, 10]))
    with lh.begin() as t:  # 10 rows: due
        r = t.compact(T, min_files=4)
    assert r.files_removed == 3 and r.files_added == 1
    assert not inline_files(lh)
    # by count: four inline files of one row each
    for i in range(4):
        lh.append(T, rows([100 + i]))
    with lh.begin() as t:  # with the small Parquet file of the first flush (tier 0)
        r = t.compact(T, min_files=4)
    assert (r.files_removed, r.files_added) == (5, 1)
    assert not inline_files(lh)
    assert [i for i, _ in content(lh)] == [*range(1, 11), 100, 101, 102, 103]


def test_flush_due_counts_live_rows_only(lh):
    create(lh, {**SMALL, "inline.flush_rows": "5"})
    lh.append(T, rows([1, 2, 3, 4, 5]))
    d = lh.describe_table(T)
    assert compaction.flush_due(d, lh.file_states(T), 16)
    lh.delete(T, "id = 1")
    assert not compaction.flush_due(d, lh.file_states(T), 16)
    assert compaction.flush_due(d, lh.file_states(T), 1)


# -- automatic compaction ---------------------------------------------------------------------
def test_auto_compaction_flushes_once_enough_rows_are_inlined(lh):
    create(lh, {"inline.max_rows": "20", "inline.flush_rows": "40"})
    lh.append(T, rows(range(0, 20)))
    lh.append(T, rows(range(20, 39)))
    assert lh.wait_for_compaction(60)
    assert len(inline_files(lh)) == 2  # 39 rows: not yet
    lh.append(T, rows([39]))
    assert lh.wait_for_compaction(60)
    assert not inline_files(lh)
    assert [i for i, _ in content(lh)] == list(range(40))
    files = lh.list_data_files(T)
    assert len(files) == 1 and files[0].record_count == 40
    assert lh.changes(T, lh.version, lh.version).num_rows == 0


def test_auto_compaction_flushes_once_enough_inline_files(lh):
    create(lh, {"inline.max_rows": "20", "compaction.min-files": "3"})  # default flush_rows
    assert compaction.flush_rows(lh.describe_table(T)) == 200
    lh.append(T, rows([1]))
    lh.append(T, rows([2]))
    assert lh.wait_for_compaction(60)
    assert len(inline_files(lh)) == 2
    lh.append(T, rows([3]))
    assert lh.wait_for_compaction(60)
    assert not inline_files(lh)
    assert [i for i, _ in content(lh)] == [1, 2, 3]


def test_auto_compaction_off_never_flushes(lh):
    create(lh, {"inline.max_rows": "20", "inline.flush_rows": "0", "compaction.auto": "false"})
    for i in range(5):
        lh.append(T, rows([i]))
    assert lh.wait_for_compaction(60)
    assert len(inline_files(lh)) == 5


def test_flush_rows_zero_flushes_every_inlined_write(lh):
    create(lh, {"inline.max_rows": "20", "inline.flush_rows": "0"})
    lh.append(T, rows([1, 2]))
    assert lh.wait_for_compaction(60)
    assert not inline_files(lh)
    assert content(lh) == [(1, "a1"), (2, "a2")]


def test_a_new_writer_flushes_what_earlier_ones_left(tmp_path):
    """The first look at a table (the first small or inline file this writer adds)
    flushes inline files earlier writers left once they are due."""
    path = str(tmp_path / "lh")
    h = lakehouse.open(path)
    with h.begin() as t:
        t.create_namespace("ns")
        t.create_table(T, SCHEMA, {"inline.max_rows": "20", "compaction.auto": "false"})
    for i in range(20):
        h.append(T, rows([i]))
    with h.begin() as t:
        t.alter_table(T, set_properties={"compaction.auto": "true"})
    h.close()
    h = lakehouse.open(path)
    try:
        h.append(T, rows([20]))
        assert h.wait_for_compaction(60)
        assert not inline_files(h)
        assert [i for i, _ in content(h)] == list(range(21))
    finally:
        h.close()


# -- the property ----------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["-1", "x", "1.5", "", " ", "1e3", "٣"])
def test_flush_rows_must_be_a_non_negative_integer(lh, bad):
    with pytest.raises(ValueError, match=r"inline\.flush_rows"), lh.begin() as t:
        t.create_table(T, SCHEMA, {"inline.flush_rows": bad})
    assert not lh.table_exists(T)
    create(lh, {"inline.flush_rows": "7"})
    with pytest.raises(ValueError, match=r"inline\.flush_rows"), lh.begin() as t:
        t.alter_table(T, set_properties={"inline.flush_rows": bad})
    assert lh.describe_table(T).properties["inline.flush_rows"] == "7"
    assert compaction.flush_rows(lh.describe_table(T)) == 7


def test_flush_rows_default_follows_max_rows(lh):
    create(lh, {})
    d = lh.describe_table(T)
    assert compaction.flush_rows(d) == compaction.FLUSH_FACTOR * inline_mod.max_rows(d)
    with lh.begin() as t:
        t.alter_table(T, set_properties={"inline.max_rows": "0"})
    assert compaction.flush_rows(lh.describe_table(T)) == 0


# -- primary keys ------------------------------------------------------------------------------
def test_flush_of_a_keyed_table_keeps_its_key_index_right(lh):
    """The key index moves with the flushed rows: every key points at its row in
    the Parquet file, and a duplicate of a flushed key is still refused."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    with lh.begin() as t:
        t.create_table(T, schema, SMALL, primary_key=["id"], sort_keys=["id"])
    lh.append(T, pa.table({"id": [5, 3], "v": ["a", "b"]}, schema))
    lh.append(T, pa.table({"id": [4, 1], "v": ["c", "d"]}, schema))
    with lh.begin() as t:
        assert t.compact(T).files_removed == 2
    (f,) = lh.list_data_files(T)
    assert not f.is_inline
    with lh.begin() as t:
        found = t.lookup_keys(T, pa.table({"id": [1, 3, 4, 5]}))
    in_file = file_rows(lh, f)
    for key, path, pos in zip(*(found.column(n).to_pylist() for n in ("id", "path", "position"))):
        assert path == f.path and in_file[pos]["id"] == key
    with pytest.raises(lakehouse.DuplicateKey):
        lh.append(T, pa.table({"id": [3], "v": ["x"]}, schema))


def test_a_failed_automatic_flush_is_logged_and_done_by_a_later_commit(tmp_path, caplog):
    """A conflict at the flush's commit is never raised; the table keeps its count
    and the next inlined write queues the flush again."""
    failed: list[int] = []

    def hook(intent, attempt):
        ops = {op for w in intent.table_writes.values() for op in w.ops}
        if ops == {DataOp.COMPACT} and not failed:
            failed.append(attempt)
            raise lakehouse.RetryableConflict("injected: another compaction won")

    h = lakehouse.open(str(tmp_path / "lh"), commit_hook=hook)
    try:
        with h.begin() as t:
            t.create_namespace("ns")
            t.create_table(T, SCHEMA, {"inline.max_rows": "20", "compaction.min-files": "3"})
        with caplog.at_level(logging.INFO, logger="lakehouse"):
            h.append(T, rows([1]))
            assert h.wait_for_compaction(60)  # the first look: one inline file, not due
            h.append(T, rows([2]))
            h.append(T, rows([3]))  # three inline files: the flush, which fails
            assert h.wait_for_compaction(60)
            assert failed and "deferred" in caplog.text
            assert len(inline_files(h)) == 3
            h.append(T, rows([4]))  # the count was kept: queued again at once
            assert h.wait_for_compaction(60)
        assert not inline_files(h)
        assert [i for i, _ in content(h)] == [1, 2, 3, 4]
    finally:
        h.close()
