"""Automatic compaction rewrites heavily deleted files (``compaction.delete-threshold``).

A commit that deletes rows queues the partition of each file whose deleted
fraction reaches the table's threshold (default 0.5); the background
compactor's incremental compaction rewrites those files (and only what it
merges anyway). Real files on a local directory; ``wait_for_compaction`` makes
the background work deterministic.
"""

from __future__ import annotations

import datetime as dt

import pytest
from test_lakehouse_compaction import D0, SCHEMA, rows  # the same table as compaction's tests

import lakehouse
from lakehouse.data import compaction
from lakehouse.data.compaction import Candidate, plan
from lakehouse.model import DataOp

#: Parquet files only (no inlined rows) and no merge of small files: only deletes queue
PROPS = {"inline.max_rows": "0", "compaction.min-files": "100"}


@pytest.fixture
def lh(tmp_path):
    h = lakehouse.open(str(tmp_path / "lh"))
    with h.begin() as t:
        t.create_namespace("ns")
    yield h
    h.close()


def create(lh, props=PROPS, **kw) -> None:
    with lh.begin() as t:
        t.create_table("ns.t", SCHEMA, dict(props), **kw)


def ids(view) -> list[int]:
    return sorted(view.read("ns.t", columns=["id"]).column("id").to_pylist())


def files(lh) -> dict[str, tuple[int, int]]:
    """path -> (rows, deleted rows)"""
    return {f.path: (f.rows, f.deleted_rows) for f in lh.list_data_files("ns.t")}


def compactions(lh, since: int) -> int:
    return sum(
        c.ops == (DataOp.COMPACT,)
        for v in range(since + 1, lh.version + 1)
        for c in lh.version_info(v).data
    )


def settle(lh) -> None:
    assert lh.wait_for_compaction(60)


# -- below and at the threshold ---------------------------------------------------------
def test_below_the_threshold_nothing_is_rewritten(lh):
    create(lh)
    lh.append("ns.t", rows(range(100)))
    settle(lh)
    before, v = files(lh), lh.version
    lh.delete("ns.t", "id < 49")  # 0.49
    settle(lh)
    assert lh.version == v + 1 and compactions(lh, v) == 0
    assert files(lh) == {p: (100, 49) for p in before}


@pytest.mark.parametrize("deleted", [50, 80])
def test_at_or_above_the_threshold_the_file_is_rewritten(lh, deleted):
    create(lh)
    lh.append("ns.t", rows(range(100)))
    settle(lh)
    (old,) = files(lh)
    lh.delete("ns.t", f"id < {deleted}")
    v = lh.version
    want = ids(lh)
    settle(lh)
    assert compactions(lh, v) == 1
    after = files(lh)
    assert old not in after and list(after.values()) == [(100 - deleted, 0)]
    assert ids(lh) == want == list(range(deleted, 100))
    assert lh.changes("ns.t", v + 1, lh.version).num_rows == 0  # a rewrite: no row changed
    assert ids(lh.at_version(v)) == want


def test_deletes_add_up_across_commits(lh):
    create(lh)
    lh.append("ns.t", rows(range(100)))
    lh.delete("ns.t", "id < 30")
    settle(lh)
    v = lh.version
    assert compactions(lh, 0) == 0
    lh.delete("ns.t", "id >= 30 AND id < 50")  # 30 + 20 of 100
    settle(lh)
    assert compactions(lh, v) == 1
    assert list(files(lh).values()) == [(50, 0)]


def test_updates_count_as_deletes_and_the_property_sets_the_threshold(lh):
    create(lh, {**PROPS, "compaction.delete-threshold": "0.2"})
    lh.append("ns.t", rows(range(100)))
    lh.update("ns.t", "id < 20", {"v": "'x'"})  # 20 of 100 rows replaced
    settle(lh)
    got = lh.read("ns.t")
    assert got.num_rows == 100 and got.column("v").to_pylist().count("x") == 20
    assert all(d == 0 for _, d in files(lh).values())
    assert sorted(r for r, _ in files(lh).values()) == [20, 80]


def test_only_heavy_files_are_rewritten(lh):
    """Of a partition's files only those at the threshold (two heavy ones: merged),
    plus what the incremental compaction merges anyway (here nothing)."""
    create(lh)
    for k in range(4):
        lh.append("ns.t", rows(range(100 * k, 100 * k + 100)))
    settle(lh)
    assert sorted(files(lh).values()) == [(100, 0)] * 4
    v = lh.version
    # file 0: 60 deleted, file 1: 10, file 2: 70, file 3: none
    lh.delete("ns.t", "id < 60 OR (id >= 100 AND id < 110) OR (id >= 200 AND id < 270)")
    want = ids(lh)
    settle(lh)
    assert compactions(lh, v) == 1
    after = sorted(files(lh).values())
    assert after == [(70, 0), (100, 0), (100, 10)]  # files 0 and 2 merged: 40 + 30 live
    assert ids(lh) == want


def test_an_explicit_full_compaction_is_unchanged(lh):
    create(lh, {**PROPS, "compaction.auto": "false"})
    lh.append("ns.t", rows(range(100)))
    lh.delete("ns.t", "id < 10")  # far below the threshold
    with lh.begin() as t:
        res = t.compact("ns.t")  # full: every file with deletions
    assert res.files_removed == 1
    assert list(files(lh).values()) == [(90, 0)]


def test_auto_off_queues_nothing(lh):
    create(lh, {**PROPS, "compaction.auto": "false"})
    lh.append("ns.t", rows(range(100)))
    lh.delete("ns.t", "id < 90")
    settle(lh)
    assert list(files(lh).values()) == [(100, 90)]


# -- partitions ------------------------------------------------------------------------
def test_partitioned_table_rewrites_only_that_partition(lh):
    create(lh, {**PROPS, "compaction.auto": "false"}, partition_by=["day"])
    lh.append("ns.t", rows(range(100), day=0))
    lh.append("ns.t", rows(range(100, 200), day=1))
    lh.delete("ns.t", "id >= 100 AND id < 180")  # day 1 heavy while auto was off
    with lh.begin() as t:
        t.alter_table("ns.t", set_properties={"compaction.auto": "true"})
    v = lh.version
    lh.delete("ns.t", "id < 60")  # day 0 heavy: queues day 0 only
    want = ids(lh)
    settle(lh)
    assert compactions(lh, v) == 1
    by_day = {f.partition["day"]: (f.rows, f.deleted_rows) for f in lh.list_data_files("ns.t")}
    assert by_day == {D0: (40, 0), D0 + dt.timedelta(days=1): (100, 80)}
    assert ids(lh) == want


# -- a delete committed while the rewrite runs -------------------------------------------
def test_delete_committed_during_the_rewrite_is_kept(tmp_path):
    """The compaction's first commit attempt finds a delete committed meanwhile (made
    from its commit hook, on the compactor's thread): its commit rebases over it and
    the new file carries the delete."""
    box: dict[str, lakehouse.Lakehouse] = {}
    done: list[int] = []

    def hook(intent, attempt):
        ops = {op for w in intent.table_writes.values() for op in w.ops}
        if ops == {DataOp.COMPACT} and not done:
            done.append(attempt)
            box["h"].delete("ns.t", "id = 77")  # a row of the file being rewritten

    h = box["h"] = lakehouse.open(str(tmp_path / "lh"), commit_hook=hook)
    try:
        with h.begin() as t:
            t.create_namespace("ns")
            t.create_table("ns.t", SCHEMA, dict(PROPS))
        h.append("ns.t", rows(range(100)))
        h.delete("ns.t", "id < 50")
        settle(h)
        assert done == [1]
        assert ids(h) == [i for i in range(50, 100) if i != 77]
        (f,) = h.list_data_files("ns.t")
        assert (f.rows, f.deleted_rows) == (50, 1)  # the concurrent delete, carried over
        v = h.version
        assert compactions(h, v - 2) == 1  # delete, then the compaction rebased over it
    finally:
        h.close()


# -- the property ------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["0", "-0.1", "1.5", "abc", "nan", "", "inf"])
def test_bad_threshold_is_refused_and_nothing_is_written(lh, bad):
    v = lh.version
    with pytest.raises(ValueError, match=r"compaction\.delete-threshold"):
        create(lh, {**PROPS, "compaction.delete-threshold": bad})
    assert lh.version == v and not lh.table_exists("ns.t")
    create(lh)
    v = lh.version
    with pytest.raises(ValueError, match=r"compaction\.delete-threshold"), lh.begin() as t:
        t.alter_table("ns.t", set_properties={"compaction.delete-threshold": bad})
    assert lh.version == v
    assert "compaction.delete-threshold" not in lh.describe_table("ns.t").properties


@pytest.mark.parametrize("good", ["1", "0.25", " 0.5 ", "1e-3"])
def test_good_thresholds(lh, good):
    create(lh, {**PROPS, "compaction.delete-threshold": good})
    d = lh.describe_table("ns.t")
    assert compaction.delete_threshold(d) == float(good)


def test_default_threshold():
    assert compaction.DELETE_THRESHOLD == 0.5


# -- planning (pure) ---------------------------------------------------------------------
def cand(fid, size=1000, dead=0.0):
    return Candidate(fid, (0, ()), size, dead > 0, dead=dead)


def test_plan_adds_heavy_files_to_the_incremental_merge():
    big = 1 << 20
    files = [
        cand("a", big, 0.5),  # heavy
        cand("b", big, 0.4),  # below
        cand("c", big, 0.9),  # heavy
        cand("d", big),
    ]
    jobs = plan(files, 4 * big, sort=False, min_files=16, delete_threshold=0.5)
    assert [j.fids for j in jobs] == [("a", "c")]
    assert plan(files, 4 * big, sort=False, min_files=16) == []  # no threshold: nothing
    # small files of a full tier are merged as before; a heavy one in it is not repeated
    smalls = [cand(f"s{i}", 100) for i in range(3)] + [cand("s9", 100, 0.7)]
    jobs = plan(smalls, 4 * big, sort=False, min_files=4, delete_threshold=0.5)
    assert [j.fids for j in jobs] == [("s0", "s1", "s2", "s9")]
