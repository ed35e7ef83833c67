"""Crash sweep over a flush of inlined rows into Parquet (issue 22).

The table holds rows in Parquet files and in inline files (inlined small
writes kept in the kvstore), some of both with deleted rows. A flush moves
the inline files' live rows into Parquet files and changes no row. As
tests/test_lakehouse_data_crash.py does: a faultless run counts the storage
mutations the operation makes (the Parquet files it writes, the kvstore's WAL
and, with a tiny memtable, its flushes and compactions); then for every crash
point k a copy of the store is opened through ``FaultyStore(crash_before=k)``,
the operation dies there (whole or torn write), and the inner store is
reopened. It must hold:

* the version before or after the flush (after, if the flush was acknowledged);
* exactly the rows it held before (the flush changes no row), at the head and
  at the old version;
* either every inline file it held, each with its live rows, or none of them
  (all flushed; none lost, none kept beside its moved rows);
* ``lakehouse verify`` clean (every version);
* a lakehouse that keeps working: a compaction flushes what is left, rows
  unchanged, and verify is clean again.

Operations: ``compact`` (explicit: every inline file moved), ``flush`` (the
incremental compaction automatic compaction runs, ``min_files``, due because
the table holds enough inline files) and ``auto`` (an append that makes the
flush due, then the automatic compaction thread flushing in the background:
the crash hits the append or the flush).

The sweep over a keyed commit (an append of inlined rows to a table with a
primary key, merges, and a compaction that flushes a keyed table's inline
files) is tests/test_lakehouse_primary_key_crash.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_lakehouse_crash import LocalBackend
from test_lakehouse_partition_crash import verify_clean

import lakehouse
from kvstore.objstore import FaultyStore, MemoryStore, SimulatedCrash

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
T = "ns.t"
KV = {
    "background_flush": False,
    "background_compaction": False,
    "memtable_bytes": 1024,  # commits also flush the memtable (inline records in SSTs)
    "l0_compaction_trigger": 2,
    "l0_slowdown_ssts": 2,
    "l0_max_ssts": 3,
}
#: table layouts: partitioned, a write's rows make one inline file per partition
#: and the flush writes a Parquet file per partition
LAYOUTS: dict[str, list[str]] = {"plain": [], "partitioned": ["bucket(3, k)"]}


def batch(keys: list[int], tag: str) -> pa.Table:
    return pa.table({"k": keys, "v": [f"{tag}{k}" for k in keys]}, schema=SCHEMA)


def rows(view: Any) -> list[tuple[int, str]]:
    t = view.read(T)
    return sorted(zip(t.column("k").to_pylist(), t.column("v").to_pylist(), strict=True))


def inline_state(view: Any) -> dict[str, int]:
    """Live inline files -> their live rows."""
    return {f.path: f.rows - f.deleted_rows for f in view.list_data_files(T) if f.is_inline}


def build(lh: lakehouse.Lakehouse, op: str, layout: str) -> None:
    """Parquet files (one with deletions), then inline files (one with a deleted
    row, one written by an update of Parquet rows); ``compaction.min-files`` makes
    the incremental flush due (``auto``: due after one more inline file)."""
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table(
            T,
            SCHEMA,
            {"compaction.auto": "false", "inline.max_rows": "0"},
            partition_by=LAYOUTS[layout] or None,
        )
    for i in range(3):
        lh.append(T, batch(list(range(i * 100, i * 100 + 60)), "p"))
    lh.delete(T, "k % 9 = 0")
    with lh.begin() as txn:
        txn.alter_table(T, set_properties={"inline.max_rows": "20"})
    lh.append(T, batch([1000, 1001, 1002, 1003], "i"))
    lh.append(T, batch([1010, 1011], "i"))
    lh.delete(T, "k = 1011 OR k = 5")  # a row of an inline file and one of a Parquet file
    lh.update(T, "k >= 100 AND k < 103", {"v": "'u'"})  # inlines the updated rows
    lh.append(T, batch([1020], "i"))
    n = len(inline_state(lh))
    assert n >= 4 and any(f.deleted_rows for f in lh.list_data_files(T) if f.is_inline)
    assert len(lh.list_data_files(T)) > n  # Parquet files too
    props = {"compaction.min-files": str(n), "inline.flush_rows": "1000"}
    if op == "auto":  # the next inline file makes the flush due
        props = {"compaction.min-files": str(n + 1), "inline.flush_rows": "1000"}
        props["compaction.auto"] = "true"
    with lh.begin() as txn:
        txn.alter_table(T, set_properties=props)


def _compact(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as txn:
        txn.compact(T)


def _flush(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as txn:
        n = int(txn.describe_table(T).properties["compaction.min-files"])
        r = txn.compact(T, min_files=n)
    assert r.files_removed >= n


def _auto(lh: lakehouse.Lakehouse) -> None:
    lh.append(T, batch([2000, 2001], "a"))
    assert lh.wait_for_compaction(120)


OPS: dict[str, Callable[[lakehouse.Lakehouse], None]] = {
    "compact": _compact,
    "flush": _flush,
    "auto": _auto,
}
#: rows the operation adds (the flush itself adds none)
ADDED = {"compact": [], "flush": [], "auto": [(2000, "a2000"), (2001, "a2001")]}


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    loggers = [logging.getLogger(n) for n in ("kvstore", "lakehouse")]
    old = [g.level for g in loggers]
    for g in loggers:
        g.setLevel(logging.CRITICAL)  # the automatic compaction logs the crash
    yield
    for g, lv in zip(loggers, old, strict=True):
        g.setLevel(lv)


class MemoryBackend:
    def __init__(self) -> None:
        self.base = MemoryStore()

    def fresh(self) -> MemoryStore:
        return self.base

    def copy(self) -> MemoryStore:
        c = MemoryStore()
        for name, data in self.base.raw().items():
            c.put(name, data)
        return c

    @staticmethod
    def verify(inner: MemoryStore) -> None:
        verify_clean(inner)


class LocalFiles(LocalBackend):
    @staticmethod
    def verify(inner: Any) -> None:
        """verify on a memory copy of the recovered files (laid out as the CLI reads)."""
        mem = MemoryStore()
        for name in inner.list(""):
            mem.put(name, inner.get(name))
        verify_clean(mem)


def check(
    re: lakehouse.Lakehouse,
    where: str,
    v0: int,
    old: list[Any],
    added: list[Any],
    old_inline: dict[str, int],
) -> str:
    """The recovered lakehouse: rows, inline files; returns "old" (the version
    before), "appended" (auto: the append without its flush) or "new" (flushed)."""
    v = re.version
    got = rows(re)
    assert got in (old, added), f"{where}: rows changed"
    with re.at_version(v0) as view:
        assert rows(view) == old, f"{where}: the old version's rows"
        assert inline_state(view) == old_inline
    now = inline_state(re)
    kept = {p: n for p, n in now.items() if p in old_inline}
    assert kept in (old_inline, {}), f"{where}: inline files partly flushed: {kept}"
    if kept:  # not flushed: a new inline file is the append's
        assert not set(now) - set(old_inline) or got == added, where
    else:
        assert v > v0, f"{where}: inline files gone without a commit"
    assert re.table_stats(T).inlined_rows == sum(now.values())
    assert re.table_stats(T).rows == len(got)
    if not kept:
        return "new"
    return "old" if v == v0 else "appended"


def sweep(backend: Any, op: str, layout: str, torn: bool = False) -> dict[str, int]:
    with lakehouse.open(backend.fresh(), kv_options=KV) as lh:
        build(lh, op, layout)
        v0 = lh.version
        old = rows(lh)
        old_inline = inline_state(lh)
    probe = FaultyStore(backend.copy())
    lh = lakehouse.open(probe, kv_options=KV)
    start = probe.mutations
    OPS[op](lh)
    end = probe.mutations
    assert rows(lh) == sorted(old + ADDED[op])
    assert not set(inline_state(lh)) & set(old_inline), "the faultless flush left inline files"
    v_end = lh.version
    lh.close()
    assert end > start
    outcomes = {"old": 0, "appended": 0, "new": 0}
    for k in range(start + 1, end + 1):
        inner = backend.copy()
        lh = lakehouse.open(FaultyStore(inner, crash_before=k, torn=torn), kv_options=KV)
        acknowledged = False
        try:
            OPS[op](lh)
            acknowledged = op != "auto"  # the background flush's crash is not raised
        except SimulatedCrash:
            pass
        if op == "auto":
            lh.wait_for_compaction(120)
        with lakehouse.open(inner, kv_options=KV) as re:
            where = f"{op}, crash point {k}"
            assert v0 <= re.version <= v_end, f"{where}: version {re.version}"
            if acknowledged:
                assert re.version == v_end, f"{where}: acknowledged flush lost"
            new = sorted(old + ADDED[op])
            outcomes[check(re, where, v0, old, new, old_inline)] += 1
            before = rows(re)
            _compact(re)  # keeps working: what is left is flushed, no row changes
            assert rows(re) == before and not inline_state(re), where
        backend.verify(inner)
    return outcomes


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("op", sorted(OPS))
def test_crash_sweep_flush_of_inlined_rows_memory(op: str, layout: str) -> None:
    outcomes = sweep(MemoryBackend(), op, layout)
    assert outcomes["old"] >= 1 and outcomes["new"] >= 1, outcomes
    # auto: some crash points lose the flush only (the append committed)
    assert (outcomes["appended"] >= 1) == (op == "auto"), outcomes


@pytest.mark.parametrize("torn", [False, True], ids=["whole", "torn"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("op", sorted(OPS))
def test_crash_sweep_flush_of_inlined_rows_local(
    tmp_path: Path, op: str, layout: str, torn: bool
) -> None:
    outcomes = sweep(LocalFiles(tmp_path), op, layout, torn)
    assert outcomes["old"] >= 1 and outcomes["new"] >= 1, outcomes
