"""Compaction: per partition, clustered by the sort keys, automatic, and the record
of where every moved row went (concurrent deletes follow it).

The planning policy is a pure function tested with tables of cases; the rest
runs for real (pyarrow files on a local directory or memory store)."""

from __future__ import annotations

import datetime as dt
import logging
import os
import random
import uuid

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

import lakehouse
from lakehouse.data import compaction, rewrites
from lakehouse.data.compaction import Candidate, plan
from lakehouse.data.record import decode_change, encode_change
from lakehouse.model import DataOp, Rewrite, TableChange

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("v", pa.string())])
NO_AUTO = {"compaction.auto": "false"}
#: every write a Parquet file (no inlined rows), for tests of small Parquet files
PARQUET_ONLY = {**NO_AUTO, "inline.max_rows": "0"}
D0 = dt.date(2024, 1, 1)


def rows(ids, day: int = 0, tag: str = "a") -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": pa.array([D0 + dt.timedelta(days=day)] * len(ids), pa.date32()),
            "v": pa.array([f"{tag}{i}" for i in ids]),
        },
        schema=SCHEMA,
    )


@pytest.fixture
def lh(tmp_path):
    h = lakehouse.open(str(tmp_path / "lh"))
    with h.begin() as t:
        t.create_namespace("ns")
    yield h
    h.close()


def create(lh, props=NO_AUTO, **kw) -> None:
    with lh.begin() as t:
        t.create_table("ns.t", SCHEMA, dict(props), **kw)


def content(view, **kw) -> list[tuple[int, str]]:
    t = view.read("ns.t", **kw)
    return sorted(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), strict=True))


def ranges(lh) -> list[tuple[int, int]]:
    return sorted((f.stats["id"].min, f.stats["id"].max) for f in lh.list_data_files("ns.t"))


def disjoint(rs: list[tuple[int, int]]) -> bool:
    return all(a[1] < b[0] for a, b in zip(rs, rs[1:], strict=False))


def random_appends(lh, n_files: int, per_file: int, seed: int, day: int = 0) -> None:
    rng = random.Random(seed)
    for _ in range(n_files):
        lh.append("ns.t", rows(rng.sample(range(100_000), per_file), day))


# -- planning (pure) ----------------------------------------------------------------
def c(fid, size=100, lo=None, hi=None, deleted=False, part=(0, ())):
    key = None if lo is None else ((1, lo), (1, hi))
    return Candidate(fid, part, size, deleted, *(key or (None, None)))


PLAN_CASES = [
    # (name, files, target, sort, min_files, expected groups)
    ("two small files merge", [c("a"), c("b")], 1000, False, None, [("a", "b")]),
    ("one small file alone stays", [c("a"), c("b", 900)], 1000, False, None, []),
    (
        "a file with deletions is rewritten alone",
        [c("a", 900, deleted=True)],
        1000,
        False,
        None,
        [("a",)],
    ),
    (
        "bins of about the target",
        [c(x, 400) for x in "abcd"],
        1000,
        False,
        None,
        [("a", "b"), ("c", "d")],
    ),
    (
        "partitions never merge",
        [c("a", part=(1, (1,))), c("b", part=(1, (2,)))],
        1000,
        False,
        None,
        [],
    ),
    (
        "overlapping big files are clustered",
        [c("a", 900, 0, 50), c("b", 900, 40, 90)],
        1000,
        True,
        None,
        [("a", "b")],
    ),
    (
        "disjoint big files are left alone",
        [c("a", 900, 0, 30), c("b", 900, 40, 90)],
        1000,
        True,
        None,
        [],
    ),
    (
        "a big file between small ones ends a run",
        [c("a", 10, 0, 5), c("b", 10, 6, 9), c("big", 900, 10, 20), c("d", 10, 30, 40)],
        1000,
        True,
        None,
        [("a", "b")],
    ),
    (
        "neighbouring small files merge",
        [c("a", 10, 0, 5), c("b", 10, 6, 9)],
        1000,
        True,
        None,
        [("a", "b")],
    ),
    (
        "touching ranges overlap",
        [c("a", 900, 0, 5), c("b", 900, 5, 9)],
        1000,
        True,
        None,
        [("a", "b")],
    ),
    ("tiers: too few small files", [c(x, 10) for x in "abc"], 1000, False, 4, []),
    (
        "tiers: enough of one tier",
        [c(x, 10) for x in "abcd"],
        1 << 20,
        False,
        4,
        [("a", "b", "c", "d")],
    ),
    (
        "tiers: sizes of other tiers stay",
        [*(c(x, 10) for x in "abcd"), c("e", 20_000)],
        1 << 20,
        False,
        4,
        [("a", "b", "c", "d")],
    ),
]


@pytest.mark.parametrize(
    "files,target,sort,min_files,expected",
    [case[1:] for case in PLAN_CASES],
    ids=[case[0] for case in PLAN_CASES],
)
def test_plan(files, target, sort, min_files, expected):
    got = [j.fids for j in plan(files, target, sort, min_files)]
    assert got == expected


def test_plan_converges_on_its_own_output():
    """What a clustering writes (disjoint target-size files plus a small tail) is
    left alone by the next plan."""
    out = [c("x1", 900, 0, 10), c("x2", 900, 11, 20), c("x3", 100, 21, 30)]
    assert plan(out, 1000, True) == []


# -- the rewrite map ------------------------------------------------------------------------
def test_order_round_trip_and_identity():
    assert rewrites.encode_order(np.arange(10)) == b""
    rng = np.random.default_rng(1)
    perm = rng.permutation(5000)
    raw = rewrites.encode_order(perm)
    assert list(rewrites.decode_order(raw)) == list(perm)
    with pytest.raises(ValueError):
        rewrites.decode_order(b"\x01\x04garbage")
    # sorted sources merged: one source number per row, when smaller
    keys = np.concatenate([np.sort(rng.integers(0, 1000, 500)) for _ in range(4)])
    merged = np.argsort(keys, kind="stable")
    raw = rewrites.encode_order(merged, [500] * 4)
    assert raw[0] == rewrites.MERGE
    assert list(rewrites.decode_order(raw)) == list(merged)
    # a source out of order cannot be stored as a merge
    assert rewrites.encode_order(perm, [2500, 2500])[0] == rewrites.DELTAS


def _random_rewrite(rng: random.Random) -> Rewrite:
    sources = []
    total = 0
    for i in range(rng.randint(1, 4)):
        n = rng.randint(1, 30)
        dv = BitMap(rng.sample(range(n), rng.randint(0, n - 1)))
        sources.append((f"s{i}", n, dv))
        total += n - len(dv)
    order = list(range(total))
    rng.shuffle(order)
    cuts = sorted(rng.sample(range(1, total), min(2, total - 1))) if total > 1 else []
    bounds = [0, *cuts, total]
    outs = tuple((f"o{k}", bounds[k + 1] - bounds[k]) for k in range(len(bounds) - 1))
    from lakehouse.data import dv as dvfmt

    return Rewrite(
        outs[0][0],
        tuple((f, n, dvfmt.encode(dv)) for f, n, dv in sources),
        outs,
        rewrites.encode_order(np.array(order)),
    )


@pytest.mark.parametrize("seed", range(20))
def test_translate_place_gather_untranslate_agree(seed):
    """Every live source row lands on exactly one output row, and back."""
    rng = random.Random(seed)
    r = _random_rewrite(rng)
    seen: set[tuple[str, int]] = set()
    from lakehouse.data import dv as dvfmt

    for src, n, raw in r.sources:
        live = BitMap(range(n)) - dvfmt.decode(raw)
        glob = rewrites.translate(r, src, BitMap(range(n)))  # deleted rows have no place
        assert len(glob) == len(live)
        for out, local in rewrites.place(r, glob).items():
            seen |= {(out, p) for p in local}
            back = rewrites.untranslate(r, rewrites.gather(r, out, local))
            assert set(back) <= {s for s, _, _ in r.sources}
        assert rewrites.untranslate(r, glob) == {src: live}
    assert seen == {(o, p) for o, n in rewrites.outputs(r) for p in range(n)}


def test_record_keeps_outputs_and_order_and_reads_old_records():
    r = _random_rewrite(random.Random(3))
    ch = TableChange("ns.t", (DataOp.COMPACT,), added=("o0",), rewrites=(r,))
    assert decode_change(encode_change(ch)).rewrites == (r,)
    from lakehouse.data import dv as dvfmt

    empty = dvfmt.encode(BitMap())
    old = Rewrite("x", (("a", 3, empty),))  # one output, rows in order: the old form
    enc = encode_change(TableChange("ns.t", (DataOp.COMPACT,), rewrites=(old,)))
    assert len(enc["rewrites"][0]) == 2
    assert decode_change(enc).rewrites == (old,)
    assert rewrites.outputs(old) == (("x", 3),)


# -- clustering -------------------------------------------------------------------------------
def test_clustering_sorts_across_files_into_disjoint_ranges(lh):
    create(lh, sort_keys=["id"])
    random_appends(lh, 30, 200, seed=1)
    before = content(lh)
    with lh.begin() as t:
        r = t.compact("ns.t", target_file_bytes=20_000)
    assert r.files_removed == 30 and r.files_added > 1
    assert content(lh) == before
    assert disjoint(ranges(lh))
    ids = lh.read("ns.t").column("id").to_pylist()
    assert ids == sorted(ids)  # file after file, each sorted
    with lh.begin() as t:  # converged: nothing left to do
        assert t.compact("ns.t", target_file_bytes=20_000).files_removed == 0
    assert lh.version_info(lh.version).data[0].rewrites[0].order  # a permutation recorded


def test_point_read_touches_one_file(lh):
    create(lh, sort_keys=["id"])
    random_appends(lh, 20, 200, seed=2)
    with lh.begin() as t:
        t.compact("ns.t", target_file_bytes=20_000)
    files = lh.list_data_files("ns.t")
    assert len(files) > 2
    probe = files[1].stats["id"].min
    want = content(lh, where=f"id = {probe}")
    base = lh.data_url.removeprefix("file://")
    for f in files:
        if f is not files[1]:
            os.remove(os.path.join(base, f.path))
    assert content(lh, where=f"id = {probe}") == want and want


def test_no_key_value_spans_two_files(lh):
    create(lh, sort_keys=["id"])
    for _ in range(10):
        lh.append("ns.t", rows([1] * 50 + [2] * 50 + [3] * 50))
    with lh.begin() as t:
        t.compact("ns.t", target_file_bytes=600)
    assert disjoint(ranges(lh))
    assert len(lh.read("ns.t")) == 1500


def test_nulls_sort_first(lh):
    create(lh, sort_keys=["id"])
    lh.append("ns.t", pa.table({"id": [5, None], "day": [D0, D0], "v": ["x", "y"]}, SCHEMA))
    lh.append("ns.t", pa.table({"id": [None, 1], "day": [D0, D0], "v": ["z", "w"]}, SCHEMA))
    with lh.begin() as t:
        t.compact("ns.t")
    assert lh.read("ns.t").column("id").to_pylist() == [None, None, 1, 5]


# -- partitions ----------------------------------------------------------------------------
def test_files_of_different_partitions_never_merge(lh):
    create(lh, partition_by=["day"], sort_keys=["id"])
    for day in range(3):
        random_appends(lh, 4, 20, seed=day, day=day)
    before = content(lh)
    with lh.begin() as t:
        r = t.compact("ns.t")
    assert r.files_removed == 12 and r.files_added == 3
    assert content(lh) == before
    assert sorted(f.partition["day"] for f in lh.list_data_files("ns.t")) == [
        D0 + dt.timedelta(days=d) for d in range(3)
    ]


def test_where_and_partition_limit_the_scope(lh):
    create(lh, partition_by=["day"])
    for day in range(3):
        for i in range(3):
            lh.append("ns.t", rows(range(day * 100 + i * 10, day * 100 + i * 10 + 10), day))
    with lh.begin() as t:
        r = t.compact("ns.t", where="day = DATE '2024-01-02'")
    assert r.files_removed == 3 and r.files_added == 1
    with lh.begin() as t:
        r = t.compact("ns.t", partition={"day": D0})
    assert r.files_removed == 3
    assert sorted(
        len(
            [
                f
                for f in lh.list_data_files("ns.t")
                if f.partition["day"] == D0 + dt.timedelta(days=d)
            ]
        )
        for d in range(3)
    ) == [1, 1, 3]
    with lh.begin() as t:
        with pytest.raises(ValueError, match="partition columns"):
            t.compact("ns.t", where="id = 3")
        with pytest.raises(TypeError):
            t.compact("ns.t", partition="day=1")
        with pytest.raises(TypeError):
            t.compact("ns.t", where="day = DATE '2024-01-01'", partition={"day": D0})


def test_old_spec_files_are_rewritten_into_the_current_spec(lh):
    create(lh, props=PARQUET_ONLY)  # a lone small Parquet file stays (inline ones never do)
    for day in range(3):
        lh.append("ns.t", rows(range(day * 10, day * 10 + 10), day))
    with lh.begin() as t:
        t.alter_table("ns.t", partition_by=["day"])
    lh.append("ns.t", rows([1000], 1))
    before = content(lh)
    with lh.begin() as t:  # the old spec's partition (all three) into the new days
        r = t.compact("ns.t")
    assert r.files_removed == 3 and r.files_added == 3
    assert content(lh) == before
    files = lh.list_data_files("ns.t")
    assert {f.spec_id for f in files} == {lh.describe_table("ns.t").spec_id}
    with lh.begin() as t:  # day 1 now has two small files of the current spec
        r = t.compact("ns.t")
    assert r.files_removed == 2
    assert len(lh.list_data_files("ns.t")) == 3  # one per day
    assert content(lh) == before
    # the change feed sees a compaction: nothing changed
    assert lh.changes("ns.t", lh.version, lh.version).num_rows == 0


# -- concurrent writers follow the rows a clustering moved -------------------------------------
@pytest.mark.parametrize("compaction_first", [True, False])
@pytest.mark.parametrize("op", ["delete", "update"])
def test_row_change_racing_a_clustering_lands_on_the_right_rows(lh, compaction_first, op):
    create(lh, sort_keys=["id"])
    random_appends(lh, 12, 100, seed=7)
    lh.delete("ns.t", "id % 11 = 0")  # deletions before the compaction shift positions
    all_ids = [i for i, _ in content(lh)]
    victims = all_ids[::37]
    where = f"id IN ({', '.join(map(str, victims))})"
    comp, writer = lh.begin(), lh.begin()
    r = comp.compact("ns.t", target_file_bytes=8_000)
    assert r.files_added > 1
    if op == "delete":
        writer.delete("ns.t", where)
    else:
        writer.update("ns.t", where, {"v": "'changed'"})
    first, second = (comp, writer) if compaction_first else (writer, comp)
    first.commit()
    second.commit()
    got = content(lh)
    if op == "delete":
        assert [i for i, _ in got] == [i for i in all_ids if i not in set(victims)]
    else:
        assert [i for i, _ in got] == all_ids
        assert sorted(i for i, v in got if v == "changed") == sorted(victims)
    # the change feed of the writer's version reports exactly the victims
    feed = lh.changes("ns.t", lh.version - 1, lh.version)
    kinds = {"delete": "delete", "update": "update_preimage"}[op]
    hit = feed.filter(pa.compute.equal(feed.column("_change_type"), kinds))
    assert sorted(hit.column("id").to_pylist()) == sorted(victims)
    # a later delete through the new files still lands right
    lh.delete("ns.t", f"id = {all_ids[1]}")
    assert all_ids[1] not in [i for i, _ in content(lh)]


def test_delete_after_compaction_in_the_same_transaction(lh):
    create(lh, sort_keys=["id"])
    random_appends(lh, 6, 50, seed=9)
    ids = [i for i, _ in content(lh)]
    other = lh.begin()
    with lh.begin() as t:
        t.compact("ns.t", target_file_bytes=2_000)
        t.delete("ns.t", f"id IN ({ids[0]}, {ids[-1]})")
    other.delete("ns.t", f"id = {ids[5]}")  # rebased over the compaction and the delete
    other.commit()
    assert [i for i, _ in content(lh)] == [i for i in ids if i not in (ids[0], ids[5], ids[-1])]


# -- automatic compaction -------------------------------------------------------------------
def test_auto_compaction_keeps_small_files_few(lh):
    create(lh, props={"compaction.min-files": "4"}, sort_keys=["id"])
    random_appends(lh, 20, 50, seed=4)
    assert lh.wait_for_compaction(60)
    assert len(lh.list_data_files("ns.t")) < 8
    assert len(content(lh)) == 1000
    ops = [c.ops for v in range(1, lh.version + 1) for c in lh.version_info(v).data]
    assert (DataOp.COMPACT,) in ops


def test_auto_compaction_is_on_by_default_and_off_by_property(lh):
    create(lh, props={})
    with lh.begin() as t:
        t.create_table("ns.off", SCHEMA, NO_AUTO)
    for i in range(compaction_min_files()):
        lh.append("ns.t", rows([i]))
        lh.append("ns.off", rows([i]))
    assert lh.wait_for_compaction(60)
    assert len(lh.list_data_files("ns.t")) == 1
    assert len(lh.list_data_files("ns.off")) == compaction_min_files()


def compaction_min_files() -> int:
    from lakehouse.autocompact import MIN_FILES

    return MIN_FILES


def test_auto_compaction_per_partition(lh):
    create(lh, props={"compaction.min-files": "3"}, partition_by=["day"])
    for i in range(3):
        lh.append("ns.t", rows([i], day=0))
    lh.append("ns.t", rows([100], day=1))
    lh.append("ns.t", rows([101], day=1))
    assert lh.wait_for_compaction(60)
    by_day = sorted(f.partition["day"] for f in lh.list_data_files("ns.t"))
    assert by_day == [D0, D0 + dt.timedelta(days=1), D0 + dt.timedelta(days=1)]


def test_bad_property_never_fails_a_writer(lh, caplog):
    create(lh, props={"compaction.min-files": "lots"})
    with caplog.at_level(logging.WARNING, logger="lakehouse"):
        for i in range(3):
            assert lh.append("ns.t", rows([i])) == 1
    assert lh.wait_for_compaction(60)
    assert "compaction.min-files" in caplog.text


def test_writer_begun_before_an_auto_compaction_commits(lh):
    """A delete begun before the background compaction moved its rows commits
    after it, on the right rows."""
    create(lh, props={"compaction.min-files": "3"}, sort_keys=["id"])
    lh.append("ns.t", rows([5, 1, 9]))
    hold = lh.begin()
    hold.delete("ns.t", "id = 9")
    lh.append("ns.t", rows([4, 8]))
    lh.append("ns.t", rows([2, 7]))
    assert lh.wait_for_compaction(60)
    assert len(lh.list_data_files("ns.t")) == 1  # compacted meanwhile
    hold.commit()
    assert [i for i, _ in content(lh)] == [1, 2, 4, 5, 7, 8]


def test_auto_compaction_conflict_is_dropped_and_retried_later(tmp_path, caplog):
    """A conflict at the compaction's commit is logged, never raised; the partition
    is compacted again after a later commit."""
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
            # small Parquet files: a partition's count (tests/test_lakehouse_inline_flush.py
            # has the same for a table's inlined rows)
            t.create_table("ns.t", SCHEMA, {"inline.max_rows": "0", "compaction.min-files": "2"})
        with caplog.at_level(logging.INFO, logger="lakehouse"):
            h.append("ns.t", rows([1]))
            h.append("ns.t", rows([2]))
            assert h.wait_for_compaction(60)
            assert failed and "deferred" in caplog.text
            assert len(h.list_data_files("ns.t")) == 2
            h.append("ns.t", rows([3]))  # the count was kept: queued again at once
            assert h.wait_for_compaction(60)
        assert len(h.list_data_files("ns.t")) == 1
        assert [i for i, _ in content(h)] == [1, 2, 3]
    finally:
        h.close()


def test_close_stops_auto_compaction(tmp_path):
    url = str(tmp_path / "lh")
    with lakehouse.open(url) as h:
        with h.begin() as t:
            t.create_namespace("ns")
            t.create_table("ns.t", SCHEMA, {"compaction.min-files": "2"})
        for i in range(10):
            h.append("ns.t", rows([i]))
    with lakehouse.open(url) as h:  # closed cleanly: every row there, nothing half-done
        assert [i for i, _ in content(h)] == list(range(10))
        h.remove_orphan_files(older_than=dt.timedelta(0))
        assert [i for i, _ in content(h)] == list(range(10))


def test_readers_never_compact(tmp_path):
    url = str(tmp_path / "lh")
    with lakehouse.open(url) as h:
        with h.begin() as t:
            t.create_namespace("ns")
            t.create_table("ns.t", SCHEMA, NO_AUTO)
        for i in range(4):
            h.append("ns.t", rows([i]))
    r = lakehouse.open_reader(url)
    try:
        assert not hasattr(r, "wait_for_compaction")
    finally:
        r.close()


def test_target_file_bytes_property(lh):
    # Parquet files only: an inline file is always rewritten, whatever the target
    create(lh, props={**PARQUET_ONLY, "compaction.target-file-bytes": "1"})
    lh.append("ns.t", rows([1]))
    lh.append("ns.t", rows([2]))
    with lh.begin() as t:  # every file is "big" for a 1-byte target
        assert t.compact("ns.t").files_removed == 0
    with lh.begin() as t, pytest.raises(ValueError, match="target_file_bytes"):
        t.compact("ns.t", target_file_bytes=0)


def test_memory_store_auto_compaction_round_trip():
    h = lakehouse.open(f"memory://compaction-{uuid.uuid4().hex}")
    try:
        with h.begin() as t:
            t.create_namespace("ns")
            t.create_table("ns.t", SCHEMA, {"compaction.min-files": "2"}, sort_keys=["id"])
        for i in (5, 3, 9, 1):
            h.append("ns.t", rows([i, i + 100]))
        assert h.wait_for_compaction(60)
        assert [i for i, _ in content(h)] == [1, 3, 5, 9, 101, 103, 105, 109]
    finally:
        h.close()


def test_compaction_module_default_target():
    assert compaction.TARGET_FILE_BYTES == 64 << 20


def test_a_new_writer_compacts_small_files_earlier_writers_left(tmp_path):
    url = str(tmp_path / "lh")
    with lakehouse.open(url) as h:
        with h.begin() as t:
            t.create_namespace("ns")
            t.create_table("ns.t", SCHEMA, {"compaction.min-files": "4"})
        for i in range(3):  # below the threshold: left for later
            h.append("ns.t", rows([i]))
        assert h.wait_for_compaction(60)
        assert len(h.list_data_files("ns.t")) == 3
    with lakehouse.open(url) as h:  # its first small file there queues a look
        h.append("ns.t", rows([3]))
        assert h.wait_for_compaction(60)
        assert len(h.list_data_files("ns.t")) == 1
        assert [i for i, _ in content(h)] == [0, 1, 2, 3]


@pytest.mark.parametrize("matching", [False, True])
def test_overwrite_checks_rows_a_later_compaction_moved(lh, matching):
    """Rows appended concurrently with an overwrite and then compacted are checked
    where the compaction put them: an overwrite commits when none match its
    predicate, and conflicts (because of those rows) when one does."""
    create(lh, props={"compaction.min-files": "2"})
    lh.append("ns.t", rows([1, 2]))
    assert lh.wait_for_compaction(60)
    mine = lh.begin()
    mine.overwrite("ns.t", rows([3]), where="id < 100")
    lh.append("ns.t", rows([50 if matching else 500]))
    lh.append("ns.t", rows([600]))
    assert lh.wait_for_compaction(60)
    assert lh.version_info(lh.version).data[0].ops == (DataOp.COMPACT,)
    if matching:
        with pytest.raises(lakehouse.RetryableConflict, match="inserted rows matching"):
            mine.commit()
    else:
        mine.commit()
        assert [i for i, _ in content(lh)] == [3, 500, 600]


def test_clustered_files_have_small_row_groups(lh):
    """A point read of a clustered file decodes one row group (the dataset scan skips
    the others by their statistics), so a clustered file has many small ones."""
    import pyarrow.parquet as pq

    create(lh, sort_keys=["id"])
    n = compaction.CLUSTERED_ROW_GROUP_ROWS
    lh.append("ns.t", rows(range(3 * n, 0, -1)))
    lh.append("ns.t", rows([0]))
    with lh.begin() as t:
        t.compact("ns.t")
    (f,) = lh.list_data_files("ns.t")
    meta = pq.ParquetFile(os.path.join(lh.data_url.removeprefix("file://"), f.path)).metadata
    assert meta.num_row_groups == 4
    assert content(lh, where=f"id = {n + 5}") == [(n + 5, f"a{n + 5}")]


def test_overwrite_over_a_chain_of_compactions(lh):
    """An overwrite begun before two compactions in a row, the second merging the
    first's outputs: it removes the last output (every row in it came from files
    the overwrite removes) and commits."""
    create(lh)
    for i in range(4):
        lh.append("ns.t", rows([i, 10 + i]))
    size = max(f.size for f in lh.list_data_files("ns.t"))
    mine = lh.begin()
    mine.overwrite("ns.t", rows([100]))
    with lh.begin() as t:  # two files per group: two outputs
        r = t.compact("ns.t", target_file_bytes=2 * size + size // 2)
    assert (r.files_removed, r.files_added) == (4, 2)
    with lh.begin() as t:  # the two outputs into one
        assert t.compact("ns.t").files_removed == 2
    mine.commit()
    assert content(lh) == [(100, "a100")]
    assert len(lh.list_data_files("ns.t")) == 1
