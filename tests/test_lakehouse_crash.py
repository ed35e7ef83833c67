"""Crash-point sweep over one lakehouse commit with the fault-injecting store.

A faultless run counts the store mutations a commit makes (WAL object or
journal append, and with a tiny memtable also the SST, manifest and WAL
deletions of the flush it triggers). Then, for every crash point k inside
that range, a copy of the pre-commit store is opened through
``FaultyStore(crash_before=k)``, the same commit is attempted and dies, and
the *inner* store is reopened: the lakehouse must be at the old version with
the old state, or at the new version with the new state, never in between;
an acknowledged commit is never lost; the recovered lakehouse keeps working.
"""

from __future__ import annotations

import datetime
import logging
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from raw_state import record_raw_file

import lakehouse
from kvstore.objstore import FaultyStore, LocalStore, MemoryStore, SimulatedCrash

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
KV = {
    "background_flush": False,
    "background_compaction": False,
    "memtable_bytes": 2048,  # the commit under test also flushes the memtable
    "l0_compaction_trigger": 2,
    "l0_slowdown_ssts": 2,
    "l0_max_ssts": 3,
}


@pytest.fixture(autouse=True)
def _quiet_logs():
    logger = logging.getLogger("kvstore")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(old)


def state_of(view) -> dict:
    out = {}
    for ns in view.list_namespaces():
        out[ns] = (
            dict(view.describe_namespace(ns).properties),
            {t: dict(view.describe_table(f"{ns}.{t}").properties) for t in view.list_tables(ns)},
            {v: view.describe_view(f"{ns}.{v}").sql for v in view.list_views(ns)},
        )
    return out


def build_base(lh) -> None:
    with lh.begin() as txn:  # version 1
        txn.create_namespace("ns", {"owner": "x"})
        for t in ("a", "b", "c"):
            txn.create_table(f"ns.{t}", SCHEMA, {"n": "0"})
    for i in range(2):  # versions 2, 3
        with lh.begin() as txn:
            txn.alter_table("ns.a", set_properties={"n": str(i + 1), "pad": "p" * 300})


def the_commit(lh) -> int:
    """Version 4: several objects at once, so a partial commit would show."""
    with lh.begin(lakehouse.Isolation.SERIALIZABLE) as txn:
        txn.list_tables("ns")
        txn.create_table("ns.new", SCHEMA, {"n": "new"})
        txn.alter_table("ns.a", set_properties={"n": "4"})
        txn.drop_table("ns.b")
        txn.create_view("ns.view", "SELECT * FROM ns.a")
        txn.alter_namespace("ns", set_properties={"owner": "y"})
    return txn.committed_version


class MemoryBackend:
    def __init__(self, tmp_path: Path) -> None:
        self.base = MemoryStore()

    def fresh(self):
        return self.base

    def copy(self):
        c = MemoryStore()
        for name, data in self.base.raw().items():
            c.put(name, data)
        return c


class LocalBackend:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.n = 0
        self.base_dir = tmp_path / "base"

    def fresh(self):
        return LocalStore(self.base_dir, fsync=False)

    def copy(self):
        self.n += 1
        d = self.tmp / f"copy{self.n}"
        shutil.copytree(self.base_dir, d)
        return LocalStore(d, fsync=False)


def sweep(backend, torn: bool = False) -> dict[str, int]:
    with lakehouse.open(backend.fresh(), kv_options=KV) as lh:
        build_base(lh)
        old_state = state_of(lh.at_version(3))
    # faultless run: which mutations belong to the commit, and the new state
    probe = FaultyStore(backend.copy())
    lh = lakehouse.open(probe, kv_options=KV)
    start = probe.mutations
    assert the_commit(lh) == 4
    end = probe.mutations
    new_state = state_of(lh.at_version(4))
    lh.close()
    assert new_state != old_state and end > start
    outcomes = {"old": 0, "new": 0}
    for k in range(start + 1, end + 1):
        inner = backend.copy()
        faulty = FaultyStore(inner, crash_before=k, torn=torn)
        lh = lakehouse.open(faulty, kv_options=KV)
        assert faulty.mutations == start  # opening makes the same mutations every time
        acknowledged = False
        try:
            the_commit(lh)
            acknowledged = True
        except SimulatedCrash:
            pass
        # the process "died": reopen the inner store
        with lakehouse.open(inner, kv_options=KV) as re:
            v = re.version
            assert v in (3, 4), f"crash point {k}: version {v}"
            if acknowledged:
                assert v == 4, f"crash point {k}: acknowledged commit lost"
            assert state_of(re.at_version(v)) == (new_state if v == 4 else old_state)
            assert state_of(re.at_version(3)) == old_state
            assert [h.version for h in re.history()] == list(range(v, -1, -1))
            outcomes["new" if v == 4 else "old"] += 1
            with re.begin() as txn:  # and it keeps working
                txn.create_table("ns.after", SCHEMA)
            assert re.version == v + 1
    return outcomes


def test_crash_sweep_memory_store(tmp_path):
    outcomes = sweep(MemoryBackend(tmp_path))
    assert outcomes["old"] >= 1 and outcomes["new"] >= 1


@pytest.mark.parametrize("torn", [False, True])
def test_crash_sweep_local_journal(tmp_path, torn):
    outcomes = sweep(LocalBackend(tmp_path), torn=torn)
    assert outcomes["old"] >= 1


NO_GRACE = datetime.timedelta(0)  # the queued file may go at once (and at the next open)


def test_crash_sweep_over_expire_versions(tmp_path):
    """Expiration is several steps; a crash anywhere leaves a consistent lakehouse,
    and a data file queued for deletion is deleted by the next open."""
    backend = MemoryBackend(tmp_path)
    with lakehouse.open(backend.fresh(), kv_options=KV) as lh:
        build_base(lh)
        lh.data_store.put("b/part-0.parquet", b"data")
        with lh.begin() as txn:  # version 4: a file in table b
            f = lakehouse.DataFile("b/part-0.parquet", 4, 1)
            record_raw_file(lh, txn, "ns.b", "part-0", f)
        with lh.begin() as txn:  # version 5: b dropped, the file only in old versions
            txn.drop_table("ns.b")
        states = {v: state_of(lh.at_version(v)) for v in range(6)}
    probe = FaultyStore(backend.copy())
    lh = lakehouse.open(probe, kv_options=KV)
    start = probe.mutations
    assert lh.expire_versions(keep_last=1, grace=NO_GRACE) == 5
    end = probe.mutations
    assert any(op == "delete" and "part-0" in name for _, op, name in probe.log[start:])
    lh.close()
    seen = set()
    for k in range(start + 1, end + 1):
        inner = backend.copy()
        lh = lakehouse.open(FaultyStore(inner, crash_before=k), kv_options=KV)
        try:
            lh.expire_versions(keep_last=1, grace=NO_GRACE)
        except SimulatedCrash:
            pass
        with lakehouse.open(inner, kv_options=KV) as re:
            oldest = re.oldest_version
            assert oldest in (0, 5), f"crash point {k}"
            seen.add(oldest)
            assert re.version == 5
            for v in range(oldest, 6):
                assert state_of(re.at_version(v)) == states[v]
            assert [h.version for h in re.history()] == list(range(5, oldest - 1, -1))
            data_exists = inner.exists("lakehouse-data/b/part-0.parquet")
            assert data_exists == (oldest == 0), f"crash point {k}"
    assert seen == {0, 5}
