"""Crash sweep over keyed commits (issue 22): an append to a table with a primary
key and a merge without ``on`` (through the key index).

As tests/test_lakehouse_data_crash.py does: a faultless run counts the storage
mutations the commit makes (data files, the kvstore's WAL, and with a tiny
memtable its flushes, where the index entries land); then for every crash
point k a copy of the store is opened through ``FaultyStore(crash_before=k)``,
the commit dies there, and the inner store is reopened. The table must be
exactly the old rows at the old version or exactly the new rows at the new
version; no key is live twice; every live key is refused on re-insert, and a
key only the lost commit would have inserted is accepted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_lakehouse_crash import LocalBackend, MemoryBackend
from test_lakehouse_data_crash import KV, SCHEMA, T, _quiet_logs, batch, rows  # noqa: F401

import lakehouse
from kvstore.objstore import FaultyStore, SimulatedCrash

pytestmark = pytest.mark.slow

MODES = {"inline": {}, "parquet": {"inline.max_rows": "0"}}


def build(lh: lakehouse.Lakehouse, mode: str) -> None:
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table(T, SCHEMA, {"compaction.auto": "false", **MODES[mode]}, primary_key=["k"])
    for i in range(3):
        lh.append(T, batch(list(range(i * 10, i * 10 + 10)), "a"))
    lh.delete(T, "k % 7 = 0")
    lh.update(T, "k = 1", {"k": 100})


OPS: dict[str, Callable[[lakehouse.Transaction], object]] = {
    "append": lambda txn: txn.append(T, batch([*list(range(200, 220)), 0, 7], "n")),
    "merge": lambda txn: txn.merge(T, batch([2, 3, 100, 14, 300, 301], "m")),
    "merge_delete": lambda txn: txn.merge(
        T, batch([4, 5, 302], "d"), when_matched="delete", when_not_matched="insert"
    ),
    "update_key": lambda txn: txn.update(T, "k IN (2, 3)", {"k": "k + 500"}),
    "compact": lambda txn: txn.compact(T),  # moves the entries of the rows it rewrites
}
#: keys the operation makes live (new or updated) and keys it removes
NEW_KEYS = {
    "append": {0, 7, *range(200, 220)},
    "merge": {14, 300, 301},
    "merge_delete": {302},
    "update_key": {502, 503},
    "compact": set(),
}
GONE_KEYS = {
    "append": set(),
    "merge": set(),
    "merge_delete": {4, 5},
    "update_key": {2, 3},
    "compact": set(),
}


def check_keys(view_rows: list[tuple[int, str]], re: Any, where: str) -> None:
    """No key live twice; each live key refused, each key of the lost or gone set
    accepted (in a transaction rolled back)."""
    live = [k for k, _ in view_rows]
    dup = [k for k, n in Counter(live).items() if n > 1]
    assert not dup, f"{where}: keys {dup} live twice"
    touched = set().union(*NEW_KEYS.values(), *GONE_KEYS.values())
    free = sorted(set(range(0, 305)) - set(live))[:40] + sorted(touched - set(live))
    for k in sorted(set(live)) + free:
        txn = re.begin()
        try:
            if k in live:
                with pytest.raises(lakehouse.DuplicateKey, match=rf"k={k}\b"):
                    txn.append(T, batch([k], "z"))
            else:
                txn.append(T, batch([k], "z"))
        finally:
            txn.rollback()


def sweep(backend: Any, op: str, mode: str, torn: bool = False) -> dict[str, int]:
    with lakehouse.open(backend.fresh(), kv_options=KV) as lh:
        build(lh, mode)
        v0 = lh.version
        old = rows(lh)
        old_files = len(lh.list_data_files(T))
    probe = FaultyStore(backend.copy())
    lh = lakehouse.open(probe, kv_options=KV)
    start = probe.mutations
    with lh.begin() as txn:
        OPS[op](txn)
    new = rows(lh)
    end = probe.mutations
    if op == "compact":  # the rows stay; their files change
        assert len(lh.list_data_files(T)) < old_files
    lh.close()
    assert (new != old or op == "compact") and end > start
    assert NEW_KEYS[op] <= {k for k, _ in new} and not GONE_KEYS[op] & {k for k, _ in new}
    outcomes = {"old": 0, "new": 0}
    for k in range(start + 1, end + 1):
        inner = backend.copy()
        lh = lakehouse.open(FaultyStore(inner, crash_before=k, torn=torn), kv_options=KV)
        acknowledged = False
        try:
            with lh.begin() as txn:
                OPS[op](txn)
            acknowledged = True
        except SimulatedCrash:
            pass
        with lakehouse.open(inner, kv_options=KV) as re:
            v = re.version
            where = f"{op}, crash point {k}"
            assert v in (v0, v0 + 1), f"{where}: version {v}"
            if acknowledged:
                assert v == v0 + 1, f"{where}: acknowledged commit lost"
            got = rows(re)
            assert got == (new if v == v0 + 1 else old), where  # all or nothing
            assert rows(re.at_version(v0)) == old
            check_keys(got, re, where)
            # the lakehouse keeps working: the operation again (or for the first time)
            with re.begin() as txn:
                if v == v0:
                    OPS[op](txn)
                else:
                    txn.merge(T, batch([2, 999], "again"))
            check_keys(rows(re), re, f"{where}, then one more commit")
            outcomes["new" if v == v0 + 1 else "old"] += 1
    return outcomes


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("op", sorted(OPS))
def test_crash_sweep_keyed_commit_memory(tmp_path: Path, op: str, mode: str) -> None:
    outcomes = sweep(MemoryBackend(tmp_path), op, mode)
    assert outcomes["old"] >= 1 and outcomes["new"] >= 1


@pytest.mark.parametrize("torn", [False, True], ids=["whole", "torn"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("op", ["append", "merge"])
def test_crash_sweep_keyed_commit_local(tmp_path: Path, op: str, mode: str, torn: bool) -> None:
    outcomes = sweep(LocalBackend(tmp_path), op, mode, torn)
    assert outcomes["old"] >= 1
