"""The data conflict matrix on a table holding inlined rows and Parquet files at once.

tests/test_lakehouse_data_conflicts.py runs every cell of
:data:`lakehouse.conflicts.DATA` on a table whose rows are all inlined (small
writes) or all in Parquet files. Here every cell (my operation x theirs, on
disjoint and on overlapping rows, SNAPSHOT and SERIALIZABLE; the matrix holds
both orders of every pair) runs on an *interleaved* table: each region an
operation touches holds rows of a Parquet file and rows of an inline file, so
both transactions of a pair change, read, follow or compact both kinds. The
same cell then runs on a table of the same rows written as Parquet files only,
and the two must agree: the same commit/conflict decision, the same rows after
the pair, and the same rows after a retried transaction is re-run. Inlining
is a storage decision; it must change no outcome.

The operations' own writes are inlined in one variant (``ops-inline``: the
rows an append, update, merge or overwrite writes become inline files next to
the Parquet ones) and written as Parquet in the other (``ops-parquet``); in
``ops-inline-dv`` every small file of the base, of either kind, already has a
deleted row, so the pair's deletion vectors merge with existing ones.

Where a compaction commits, it flushes every inline file it saw: none of the
base table's inline files is live at the version it made. The one cell where
inlining changes the decision is two compactions of *disjoint* Parquet files:
both flush the table's inline files (always compaction candidates), so the
second retries (:func:`test_disjoint_compactions_both_flush_the_inline_files`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import test_lakehouse_data_conflicts as matrix
from parquet_files import PARQUET
from test_lakehouse_data_conflicts import (
    CELLS,
    MINE,
    R1,
    REBASE_CELLS,
    SCHEMA,
    SCHEMA_CELLS,
    SCHEMA_CHANGES,
    SER,
    SNAP,
    THEIRS,
    Base,
    Rows,
    assert_files_live,
    assert_nothing_of_mine,
    assert_rows,
    base_rows,
    build_op,
    cell_id,
    compact_compact_disjoint,
    effects,
    make_base,
    model,
    overlap_expectation,
    regions,
    rerun,
    rows_of,
    run_pair,
    table_of,
)

import lakehouse
from lakehouse.conflicts import COMPATIBLE, REBASE, RETRYABLE

T = "ns.t"

#: the base table's writes: (keys, inline?). Regions R1 (10..29) and R2 (30..49)
#: hold one Parquet row and one inlined row each; RC (10000..10009) holds rows
#: of the large Parquet file C and of an inline file; every small file (A..E)
#: is split into a Parquet half and an inlined half.
C_INLINE = [10_004, 10_008]
PARTS: list[tuple[list[int], bool]] = [
    ([10, 30], False),
    ([20, 40], True),
    ([50, 70], False),
    ([60, 80], True),
    ([k for k in range(10_000, 18_000, 2) if k not in C_INLINE], False),
    (C_INLINE, True),
    ([90, 110], False),
    ([100, 120], True),
    ([130, 150], False),
    ([140, 160], True),
]
#: inline.max_rows while the base is written: 2-row (3 with DELETED) writes inline,
#: C is Parquet
BASE_MAX_ROWS = "3"
#: inline.max_rows for the operations' own writes, by variant; "-dv": every small
#: file of the base (Parquet and inline) also holds a deleted row (a deletion
#: vector the operations' deletes merge with and their rebases follow)
OPS_MAX_ROWS = {"ops-inline": "100", "ops-parquet": "0", "ops-inline-dv": "100"}
#: the key of the deleted row of the i-th small file ("-dv"), outside every region
DELETED = 1_000_000


def set_max_rows(lh: lakehouse.Lakehouse, value: str) -> None:
    with lh.begin() as txn:
        txn.alter_table(T, set_properties={"inline.max_rows": value})


def make_layout(lh: lakehouse.Lakehouse, interleaved: bool, ops: str) -> Base:
    """The base table: PARTS written inline where marked (``interleaved``) or all as
    Parquet; then ``inline.max_rows`` set for the operations' writes."""
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table(T, SCHEMA, {"compaction.auto": "false", "inline.max_rows": "0"})
    states: dict[int, Rows] = {lh.version: []}
    cur: Rows = []
    v_a = 0
    for i, (keys, inlined) in enumerate(PARTS):
        if interleaved and inlined:
            set_max_rows(lh, BASE_MAX_ROWS)
        written = [*keys, DELETED + i] if ops.endswith("-dv") and len(keys) < 10 else keys
        with lh.begin() as txn:
            txn.append(T, table_of(base_rows(written)))
        cur = sorted(cur + base_rows(written))
        states[lh.version] = cur
        if keys == [20, 40]:
            v_a = lh.version  # file A (both halves) only
        if interleaved and inlined:
            set_max_rows(lh, "0")
            states[lh.version] = cur
    if ops.endswith("-dv"):
        with lh.begin() as txn:
            txn.delete(T, f"k >= {DELETED}")
        cur = [r for r in cur if r[0] < DELETED]
        states[lh.version] = cur
    set_max_rows(lh, OPS_MAX_ROWS[ops])
    states[lh.version] = cur
    assert rows_of(lh) == cur
    files = lh.list_data_files(T)
    inline = [f for f in files if f.is_inline]
    assert len(files) == len(PARTS)
    assert len(inline) == (sum(1 for _, i in PARTS if i) if interleaved else 0)
    assert lh.table_stats(T).inlined_rows == sum(f.rows - f.deleted_rows for f in inline)
    dv = [f for f in files if f.deleted_rows]
    assert len(dv) == (len(PARTS) - 1 if ops.endswith("-dv") else 0)
    return Base(lh, states, v_a)


@pytest.fixture
def lh_pair() -> Iterator[tuple[lakehouse.Lakehouse, lakehouse.Lakehouse]]:
    a = lakehouse.open(f"memory://inline-conflicts-{uuid.uuid4().hex}")
    b = lakehouse.open(f"memory://inline-conflicts-ref-{uuid.uuid4().hex}")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def inline_fids(lh: Any) -> set[str]:
    return {f.path for f in lh.list_data_files(T) if f.is_inline}


def assert_flushed(base: Base, version: int, before: set[str]) -> None:
    """The compaction that made ``version`` flushed every inline file it saw."""
    with base.lh.at_version(version) as view:
        live = inline_fids(view)
    assert not before & live, f"inline files not flushed by the compaction: {before & live}"


Outcome = tuple[str, Rows, Rows]


def play(base: Base, m: str, t: str, outcome: str, mode: str, iso: Any) -> Outcome:
    """Cell (m, t) on ``base`` as tests/test_lakehouse_data_conflicts.py runs it
    (disjoint or overlapping rows), with its checks; returns the decision, the rows
    after the pair and the rows after a retried transaction is re-run."""
    if mode == "disjoint" and (m, t) == ("compact", "compact"):
        mine_ops, theirs_ops = compact_compact_disjoint(base)
    else:
        rm, rt = regions(m, t, mode)
        mine_ops = [build_op(m, MINE, rm, base)]
        theirs_ops = [build_op(t, THEIRS, rt, base)]
    inline_before = inline_fids(base.lh)
    res = run_pair(base, mine_ops, theirs_ops, iso)
    if t == "compact":
        assert_flushed(base, res.theirs_version, inline_before)
    if m == "compact" and res.error is None:
        assert_flushed(base, base.lh.version, inline_before)
    if mode == "disjoint" and (m, t) == ("compact", "compact"):
        # this layout's small files do not fall into two disjoint size bins (and
        # inline files are in every plan): both compact some file, the second retries
        expect = "retry"
    elif mode == "disjoint":
        expect = {COMPATIBLE: "serial", REBASE: "serial", RETRYABLE: "retry"}.get(outcome, "x")
    else:
        expect = "serial" if outcome == COMPATIBLE else overlap_expectation(m, t, iso)
    after = rows_of(base.lh)
    if expect == "retry":
        assert_nothing_of_mine(base, res)
        rerun(base, mine_ops, iso, res)
        return type(res.error).__name__, after, rows_of(base.lh)
    if expect == "x":
        assert isinstance(res.error, lakehouse.IncompatibleConflict), res.error
        return type(res.error).__name__, after, after
    assert res.error is None, f"{m} vs {t} ({mode}) should commit: {res.error!r}"
    if expect == "serial":
        assert_rows(base, model(mine_ops, res.theirs_state, base.states))
    else:
        assert_rows(base, effects(mine_ops, res.before, res.theirs_state, base.states))
    with base.lh.at_version(res.theirs_version) as view:
        assert rows_of(view) == res.theirs_state
    return "commit", after, after


def compare(
    lh_pair: tuple[lakehouse.Lakehouse, lakehouse.Lakehouse],
    cell: tuple[tuple[str, str], str],
    mode: str,
    ops: str,
    iso: Any,
) -> None:
    (m, t), outcome = cell
    mixed = make_layout(lh_pair[0], True, ops)
    ref = make_layout(lh_pair[1], False, ops)
    got = play(mixed, m, t, outcome, mode, iso)
    want = play(ref, m, t, outcome, mode, iso)
    assert got[0] == want[0], f"{m} vs {t} ({mode}): {got[0]} inlined, {want[0]} not"
    assert got[1] == want[1]
    assert got[2] == want[2]
    assert_files_live(mixed.lh)


ISO = pytest.mark.parametrize("iso", [SNAP, SER], ids=["snapshot", "serializable"])
OPS = pytest.mark.parametrize("ops", sorted(OPS_MAX_ROWS))


@OPS
@ISO
@pytest.mark.parametrize("cell", CELLS, ids=[cell_id(c) for c in CELLS])
def test_interleaved_cell_disjoint(
    lh_pair: Any, cell: tuple[tuple[str, str], str], iso: Any, ops: str
) -> None:
    compare(lh_pair, cell, "disjoint", ops, iso)


@OPS
@ISO
@pytest.mark.parametrize("cell", REBASE_CELLS, ids=[cell_id(c) for c in REBASE_CELLS])
def test_interleaved_cell_overlapping(
    lh_pair: Any, cell: tuple[tuple[str, str], str], iso: Any, ops: str
) -> None:
    compare(lh_pair, cell, "overlap", ops, iso)


def test_layout_interleaves_both_kinds_in_every_region(lh_pair: Any) -> None:
    """The premise: each region's rows are in a Parquet file and in an inline file,
    and the operations' writes are inlined in the ops-inline variant."""
    base = make_layout(lh_pair[0], True, "ops-inline")
    lh = base.lh
    kinds = {k: inlined for keys, inlined in PARTS for k in keys}
    for lo, hi in ((10, 29), (30, 49), (10_000, 10_009)):
        assert {kinds[k] for k in kinds if lo <= k <= hi} == {True, False}
    by_rows = sorted((f.rows, f.is_inline) for f in lh.list_data_files(T))
    assert by_rows == sorted((len(keys), inlined) for keys, inlined in PARTS)
    with lh.begin() as txn:
        txn.append(T, table_of([(11, 1)]))
    assert any(f.is_inline and f.rows == 1 for f in lh.list_data_files(T))
    assert lh.table_stats(T).inlined_rows == 2 * 5 + 1


@pytest.mark.parametrize("with_inline", [False, True], ids=["parquet", "one-inline-file"])
def test_disjoint_compactions_both_flush_the_inline_files(lh_pair: Any, with_inline: bool) -> None:
    """Two compactions of disjoint Parquet files (the base of
    tests/test_lakehouse_data_conflicts.py: target 2000, groups {A, B} and {D, E})
    both commit; one inline file in the table is in both plans (an inline file is
    always a candidate), so the second retries, and re-run it commits and flushes."""
    lh = lh_pair[0]
    base = make_base(lh, PARQUET)
    if with_inline:
        with lh.begin() as txn:
            txn.alter_table(T, set_properties={"inline.max_rows": "100"})
            txn.append(T, table_of([(11, 7), (13, 9)]))
        base.states[lh.version] = rows_of(lh)
        assert len(inline_fids(lh)) == 1
    mine_ops, theirs_ops = compact_compact_disjoint(base)
    inline_before = inline_fids(lh)
    res = run_pair(base, mine_ops, theirs_ops)
    assert_flushed(base, res.theirs_version, inline_before)
    if not with_inline:
        assert res.error is None, res.error
        assert_rows(base, model(mine_ops, res.theirs_state, base.states))
        return
    assert_nothing_of_mine(base, res)
    assert "compacted data file" in str(res.error)
    rerun(base, mine_ops, SNAP, res)
    assert not inline_fids(lh)
    assert lh.table_stats(T).inlined_rows == 0


@OPS
@pytest.mark.parametrize("change", sorted(SCHEMA_CHANGES))
@pytest.mark.parametrize("cell", SCHEMA_CELLS, ids=[f"{m}-{o}" for m, o in SCHEMA_CELLS])
def test_interleaved_vs_schema_cell(
    lh_pair: Any, cell: tuple[str, str], change: str, ops: str
) -> None:
    """DATA_VS_SCHEMA: my operation on rows of both kinds vs a concurrent change of
    the table's definition decides as on Parquet files, with the same rows."""
    m, outcome = cell
    seen = []
    for lh, interleaved in ((lh_pair[0], True), (lh_pair[1], False)):
        base = make_layout(lh, interleaved, ops)
        mine_ops = [build_op(m, MINE, R1, base)]
        res = run_pair(base, mine_ops, [], SNAP, theirs_fn=SCHEMA_CHANGES[change])
        if outcome == COMPATIBLE:
            assert res.error is None, f"{m} vs a concurrent {change}: {res.error!r}"
            assert_rows(base, model(mine_ops, res.theirs_state, base.states))
        else:
            assert_nothing_of_mine(base, res)
            rerun(base, mine_ops, SNAP, res)
        names = lh.describe_table(T).schema.names
        seen.append((type(res.error).__name__, rows_of(lh), names, lh.table_stats(T).rows))
    assert seen[0] == seen[1]


@OPS
@pytest.mark.parametrize("seed", range(1, 9))
def test_many_concurrent_disjoint_changes_with_flushing_compactions(
    lh_pair: Any, seed: int, ops: str
) -> None:
    """tests/test_lakehouse_data_conflicts.py's twelve transactions deleting or
    updating disjoint rows of every file, with two compactions committed in between,
    on the interleaved table: the compactions flush the inline files under the
    row changes; all commit with the rows of a serial execution."""
    base = make_layout(lh_pair[0], True, ops)
    matrix.test_many_concurrent_disjoint_deletes_and_updates_with_compactions(base, seed)
    if ops == "ops-parquet":  # the updates wrote Parquet: every inline file was flushed
        assert not inline_fids(base.lh)
