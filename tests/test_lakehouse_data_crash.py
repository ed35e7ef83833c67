"""Crash sweep over table-data commits: append, delete, merge, compaction.

As tests/test_lakehouse_crash.py does for definitions: a faultless run counts
the storage mutations an operation makes (data files written under the
store's ``lakehouse-data/`` prefix, then the kvstore's WAL and, with a tiny
memtable, its flush); then for every crash point k a copy of the store is
opened through ``FaultyStore(crash_before=k)``, the operation dies there, and
the inner store is reopened. The table must be exactly the old rows at the
old version or exactly the new rows at the new version; an acknowledged
commit is never lost; the files a crash left behind are orphans that
``remove_orphan_files`` deletes without touching a live file; the lakehouse
keeps working.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from parquet_files import PARQUET

# the same backends as the definitions' crash sweep
from test_lakehouse_crash import LocalBackend, MemoryBackend

import lakehouse
from kvstore.objstore import FaultyStore, SimulatedCrash
from lakehouse.model import DataOp

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])
T = "ns.t"
KV = {
    "background_flush": False,
    "background_compaction": False,
    "memtable_bytes": 1024,  # commits also flush the memtable
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


def batch(keys: list[int], tag: str) -> pa.Table:
    return pa.table({"k": keys, "v": [f"{tag}{k}" for k in keys]}, schema=SCHEMA)


def rows(view) -> list[tuple[int, str]]:
    t = view.read(T)
    return sorted(zip(t.column("k").to_pylist(), t.column("v").to_pylist(), strict=True))


def state(view) -> tuple[list[tuple[int, str]], frozenset[str]]:
    """The rows and the files holding them (a compaction changes only the files)."""
    return rows(view), frozenset(f.path for f in view.list_data_files(T))


def same(got, want, new: bool) -> bool:
    """Equal states; a new version's new files are named afresh by each run."""
    if not new:
        return got == want
    return got[0] == want[0] and len(got[1]) == len(want[1])


def build(lh) -> None:
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table(T, SCHEMA)
    for i in range(3):
        with lh.begin() as txn:
            txn.append(T, batch(list(range(i * 10, i * 10 + 10)), "a"))
    with lh.begin() as txn:
        txn.delete(T, "k % 7 = 0")


OPS: dict[str, Callable[[lakehouse.Transaction], object]] = {
    "append": lambda txn: txn.append(T, batch(list(range(100, 120)), "n")),
    "delete": lambda txn: txn.delete(T, "k >= 5 AND k < 25"),
    "merge": lambda txn: txn.merge(T, batch([1, 2, 3, 200, 201], "m"), on="k"),
    "compact": lambda txn: txn.compact(T),
}


def live_files(lh) -> set[str]:
    return {f.path for f in lh.list_data_files(T)}


def sweep(backend, op: str) -> dict[str, int]:
    with lakehouse.open(backend.fresh(), kv_options=KV) as lh:
        build(lh)
        v0 = lh.version
        old = state(lh.at_version(v0))
    probe = FaultyStore(backend.copy())
    lh = lakehouse.open(probe, kv_options=KV)
    start = probe.mutations
    with lh.begin() as txn:
        OPS[op](txn)
    new = state(lh)
    end = probe.mutations
    lh.close()
    assert new != old and end > start
    outcomes = {"old": 0, "new": 0}
    for k in range(start + 1, end + 1):
        inner = backend.copy()
        faulty = FaultyStore(inner, crash_before=k)
        lh = lakehouse.open(faulty, kv_options=KV)
        acknowledged = False
        try:
            with lh.begin() as txn:
                OPS[op](txn)
            acknowledged = True
        except SimulatedCrash:
            pass
        with lakehouse.open(inner, kv_options=KV) as re:
            v = re.version
            assert v in (v0, v0 + 1), f"{op}, crash point {k}: version {v}"
            if acknowledged:
                assert v == v0 + 1, f"{op}, crash point {k}: acknowledged commit lost"
            assert same(state(re), new if v == v0 + 1 else old, v == v0 + 1), f"{op}, {k}"
            assert state(re.at_version(v0)) == old
            live = live_files(re) | {f.path for f in re.at_version(v0).list_data_files(T)}
            removed = re.remove_orphan_files(older_than=dt.timedelta(0))
            assert not set(removed) & live, f"{op}, crash point {k}: a live file was removed"
            assert same(state(re), new if v == v0 + 1 else old, v == v0 + 1)
            with re.begin() as txn:  # and it keeps working
                txn.append(T, batch([999], "z"))
            assert (999, "z999") in rows(re)
            outcomes["new" if v == v0 + 1 else "old"] += 1
    return outcomes


@pytest.mark.parametrize("op", sorted(OPS))
def test_crash_sweep_data_operation_memory(tmp_path, op):
    outcomes = sweep(MemoryBackend(tmp_path), op)
    assert outcomes["old"] >= 1 and outcomes["new"] >= 1


@pytest.mark.parametrize("op", ["append", "compact"])
def test_crash_sweep_data_operation_local(tmp_path, op):
    outcomes = sweep(LocalBackend(tmp_path), op)
    assert outcomes["old"] >= 1


# -- automatic compaction: a crash in the background compaction loses nothing --------------
AUTO_APPENDS = [batch([15, 1], "n"), batch([25, 2], "m")]


def build_auto(lh, partition_by: list[str] | None = None) -> None:
    with lh.begin() as txn:
        txn.create_namespace("ns")
        # the compactions of Parquet files (inlined rows: test_lakehouse_inline.py)
        props = {"compaction.min-files": "2", **PARQUET}
        txn.create_table(T, SCHEMA, props, sort_keys=["k"], partition_by=partition_by)
    with lh.begin() as txn:
        txn.append(T, batch([30, 5, 20], "a"))


def sweep_auto(backend, partition_by: list[str] | None = None) -> dict[str, int]:
    """Two small appends by a fresh writer, each followed by the automatic
    (clustering) compaction it queues (waited for, so the order is fixed); at
    every crash point of the appends and the background compactions the store
    holds a version of that sequence with exactly its rows, and every
    acknowledged append."""
    with lakehouse.open(backend.fresh(), kv_options=KV) as lh:
        build_auto(lh, partition_by)
        v0 = lh.version
    probe = FaultyStore(backend.copy())
    lh = lakehouse.open(probe, kv_options=KV)
    start = probe.mutations
    acked = []  # the version of each append
    for data in AUTO_APPENDS:
        lh.append(T, data)
        acked.append(lh.version)
        assert lh.wait_for_compaction(60)
    last = lh.version
    compactions = [
        v for v in range(v0 + 1, last + 1) if lh.version_info(v).data[0].ops == (DataOp.COMPACT,)
    ]
    assert compactions  # the first append queued one (its file and the older one)
    states = {v: rows(lh.at_version(v)) for v in range(v0, last + 1)}
    end = probe.mutations
    lh.close()
    outcomes = {"old": 0, "appended": 0, "compacted": 0}
    for k in range(start + 1, end + 1):
        inner = backend.copy()
        lh = lakehouse.open(FaultyStore(inner, crash_before=k), kv_options=KV)
        acknowledged = 0
        try:
            for data in AUTO_APPENDS:
                lh.append(T, data)
                acknowledged += 1
                assert lh.wait_for_compaction(60)  # a crash there is logged, never raised
        except SimulatedCrash:
            pass
        with lakehouse.open(inner, kv_options=KV) as re:
            v = re.version
            assert v0 <= v <= last, f"crash point {k}: version {v}"
            if acknowledged:
                assert v >= acked[acknowledged - 1], f"crash point {k}: acknowledged append lost"
            assert rows(re) == states[v], f"crash point {k}"
            live = live_files(re) | {f.path for f in re.at_version(v0).list_data_files(T)}
            removed = re.remove_orphan_files(older_than=dt.timedelta(0))
            assert not set(removed) & live, f"crash point {k}: a live file was removed"
            assert rows(re) == states[v]
            with re.begin() as txn:  # and it keeps working
                txn.append(T, batch([999], "z"))
            assert (999, "z999") in rows(re)
            kind = "old" if v == v0 else "compacted" if v in compactions else "appended"
            outcomes[kind] += 1
    return outcomes


@pytest.mark.parametrize("partition_by", [None, ["truncate(20, k)"]], ids=["flat", "partitioned"])
def test_crash_sweep_auto_compaction_memory(tmp_path, partition_by):
    outcomes = sweep_auto(MemoryBackend(tmp_path), partition_by)
    assert outcomes["appended"] >= 1 and outcomes["compacted"] >= 1


def test_crash_sweep_auto_compaction_local(tmp_path):
    outcomes = sweep_auto(LocalBackend(tmp_path))
    assert outcomes["appended"] >= 1


# -- kill -9 while automatic compaction runs ----------------------------------------------
AUTO_WRITER = Path(__file__).with_name("auto_compaction_writer.py")


def _acks(path: Path) -> tuple[list[int], int]:
    """The acknowledged keys and how many compactions reached their commit."""
    keys, compactions = [], 0
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("A "):
                keys.append(int(line[2:]))
            elif line == "C":
                compactions += 1
    return keys, compactions


def _run_and_kill(url: str, acklog: Path, rng: random.Random) -> None:
    """Start the writer, wait for a background compaction to reach its commit (or a
    random number of appends), SIGKILL it there."""
    proc = subprocess.Popen(
        [sys.executable, str(AUTO_WRITER), url, str(acklog)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).parent.parent,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != b"READY":
            _, err = proc.communicate(timeout=30)
            raise AssertionError(f"writer did not start: {err.decode()[-3000:]}")
        _, seen = _acks(acklog)
        want = seen + rng.randint(1, 3)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _acks(acklog)[1] < want:
            assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
            time.sleep(0.002)
        time.sleep(rng.choice([0, 0, 0.001, 0.005]))  # right at the commit, or just after
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()


@pytest.mark.parametrize("trial", range(3))
def test_kill_during_auto_compaction(tmp_path, trial):
    """SIGKILL while the writer's background compaction commits (twice, restarting
    on the same directory): every acknowledged append is there exactly once, no row
    the writer never wrote, and removing orphans leaves every live file."""
    rng = random.Random(trial)
    url, acklog = str(tmp_path / "lh"), tmp_path / "acks"
    for _ in range(2):
        _run_and_kill(url, acklog, rng)
    acked, compactions = _acks(acklog)
    assert compactions >= 2 and acked
    with lakehouse.open(url) as lh:
        t = lh.read(T)
        got = t.column("k").to_pylist()
        assert len(got) == len(set(got)), "a row appears twice"
        assert set(acked) <= set(got), "an acknowledged append was lost"
        # beyond the acknowledged: only an append in flight when a kill came
        assert len(set(got) - set(acked)) <= 2
        assert t.column("v").to_pylist() == [f"v{k}" for k in got]
        live = {f.path for f in lh.list_data_files(T)}
        removed = lh.remove_orphan_files(older_than=dt.timedelta(0))
        assert not set(removed) & live
        assert sorted(lh.read(T).column("k").to_pylist()) == sorted(got)
        ops = {c.ops for v in range(1, lh.version + 1) for c in lh.version_info(v).data}
        assert (DataOp.COMPACT,) in ops
