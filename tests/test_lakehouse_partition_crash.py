"""Crash sweep over partitioned-table commits, and kill -9 during automatic compaction.

As tests/test_lakehouse_data_crash.py does for unpartitioned tables: a faultless
run counts the storage mutations one operation makes (data files, then the
kvstore's WAL and, with a tiny memtable, its flush); then for every crash point
k a copy of the store is opened through ``FaultyStore(crash_before=k)``, the
operation dies there, and the inner store is reopened. Operations: an append
whose rows fall in several partitions (one file each), ``replace_partitions`` of
two partitions, a compaction of one partition. After every crash point:

* the table is exactly the old rows at the old version or the new rows at the
  new version (an acknowledged commit is never lost), every live file holds one
  partition;
* ``lakehouse verify`` (:func:`lakehouse.cli.verify.verify`) finds no problem;
* no uncommitted file is visible: the store's data files that no version
  references are exactly what ``remove_orphan_files`` deletes, and it deletes
  no live file; the lakehouse keeps working.

Then a writer subprocess appending to a partitioned table with automatic
compaction on is killed with SIGKILL at random moments: every acknowledged
append is there exactly once, verify is clean.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakehouse
from kvstore.objstore import FaultyStore, MemoryStore, SimulatedCrash
from lakehouse.cli.target import Target
from lakehouse.cli.verify import verify

pytestmark = pytest.mark.slow

SCHEMA = pa.schema(
    [pa.field("k", pa.int64(), nullable=False), ("v", pa.string()), ("p", pa.string())]
)
T = "ns.t"
SPEC = ["p", "bucket(2, k)"]
KV = {
    "background_flush": False,
    "background_compaction": False,
    "memtable_bytes": 1024,  # commits also flush the memtable
    "l0_compaction_trigger": 2,
    "l0_slowdown_ssts": 2,
    "l0_max_ssts": 3,
}
DATA_PREFIX = "lakehouse-data/"


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    logger = logging.getLogger("kvstore")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(old)


def batch(keys: list[int], p: str, tag: str) -> pa.Table:
    return pa.table(
        {"k": keys, "v": [f"{tag}{k}" for k in keys], "p": [p] * len(keys)}, schema=SCHEMA
    )


Rows = list[tuple[int, str, str]]
State = tuple[Rows, list[Any]]


def rows(view: Any) -> Rows:
    t = view.read(T)
    cols = [t.column(c).to_pylist() for c in ("k", "v", "p")]
    return sorted(zip(*cols, strict=True))


def state(view: Any) -> State:
    """The rows, and the files holding them by partition (a compaction changes only
    the files; new files are named afresh by each run, so compare their partitions)."""
    parts = sorted(
        (tuple(sorted(f.partition.items())), f.spec_id, f.rows - f.deleted_rows)
        for f in view.list_data_files(T)
    )
    return rows(view), parts


def build(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table(T, SCHEMA, {"compaction.auto": "false"}, partition_by=SPEC)
    for i, p in enumerate(("us", "fr", "us", "de", "fr")):
        with lh.begin() as txn:
            txn.append(T, batch(list(range(i * 10, i * 10 + 6)), p, "a"))
    with lh.begin() as txn:
        txn.delete(T, "p = 'us' AND k % 4 = 0")


OPS: dict[str, Callable[[lakehouse.Transaction], object]] = {
    # several partitions (three countries x two buckets) in one commit
    "append": lambda txn: txn.append(
        T,
        pa.concat_tables(
            [
                batch([100, 101, 102], "us", "n"),
                batch([103, 104], "fr", "n"),
                batch([105], "it", "n"),
            ]
        ),
    ),
    "replace_partitions": lambda txn: txn.replace_partitions(
        T, pa.concat_tables([batch([0, 1, 2, 3], "us", "r"), batch([10], "fr", "r")])
    ),
    "compact": lambda txn: txn.compact(T, where="p = 'us'"),
}


def assert_one_partition_per_file(lh: Any) -> None:
    for f in lh.list_data_files(T):
        s = f.stats["p"]
        assert s.min == s.max == f.partition["p"], f"{f.path}: {f.partition}, p {s.min}..{s.max}"


def verify_clean(inner: MemoryStore) -> None:
    """``lakehouse verify`` on a copy of ``inner`` laid out as ``memory://<name>``."""
    name = f"partition-crash-verify-{uuid.uuid4().hex}"
    meta, data = MemoryStore.named(f"{name}/meta"), MemoryStore.named(f"{name}/data")
    try:
        for obj, blob in inner.raw().items():
            if obj.startswith(DATA_PREFIX):
                data.put(obj[len(DATA_PREFIX) :], blob)
            else:
                meta.put(obj, blob)
        report = verify(Target(f"memory://{name}"), all_versions=True)
        assert report.ok, [str(p) for p in report.problems]
        assert report.data_files > 0
    finally:
        MemoryStore.drop(f"{name}/meta")
        MemoryStore.drop(f"{name}/data")


class MemoryBackend:
    """The pre-operation lakehouse, copied afresh for each crash point."""

    def __init__(self) -> None:
        self.base = MemoryStore()

    def copy(self) -> MemoryStore:
        c = MemoryStore()
        for name, data in self.base.raw().items():
            c.put(name, data)
        return c


#: the automatic-compaction case: the table has compaction.auto on (min-files 2); the
#: operation is an append, after which the writer compacts in the background
AUTO_OP = "append_then_auto_compaction"


def run_op(lh: lakehouse.Lakehouse, op: str) -> None:
    """The operation; for AUTO_OP, also wait for the compaction the append queued."""
    with lh.begin() as txn:
        OPS["append" if op == AUTO_OP else op](txn)
    if op == AUTO_OP:
        assert lh.wait_for_compaction(timeout=120)


def sweep(backend: MemoryBackend, op: str) -> dict[str, int]:
    with lakehouse.open(backend.base, kv_options=KV) as lh:
        build(lh)
        if op == AUTO_OP:
            with lh.begin() as txn:
                txn.alter_table(
                    T, set_properties={"compaction.auto": "true", "compaction.min-files": "2"}
                )
        v0 = lh.version
        old = state(lh.at_version(v0))
    probe = FaultyStore(backend.copy())
    lh = lakehouse.open(probe, kv_options=KV)
    start = probe.mutations
    run_op(lh, op)
    end = probe.mutations
    last = lh.version
    # every version the operation made (the append; then, for AUTO_OP, compactions)
    states = {v: state(lh.at_version(v)) for v in range(v0, last + 1)}
    lh.close()
    assert last > v0 and end > start
    if op == AUTO_OP:
        assert last >= v0 + 2, "the append queued no automatic compaction"
        assert all(states[v][0] == states[v0 + 1][0] for v in range(v0 + 1, last + 1))
    outcomes = {"old": 0, "new": 0}
    for k in range(start + 1, end + 1):
        inner = backend.copy()
        lh = lakehouse.open(FaultyStore(inner, crash_before=k), kv_options=KV)
        acknowledged = False
        try:
            with lh.begin() as txn:
                OPS["append" if op == AUTO_OP else op](txn)
            acknowledged = True
            if op == AUTO_OP:  # a crash in the compactor's thread is logged, not raised
                lh.wait_for_compaction(timeout=120)
        except SimulatedCrash:
            pass
        with lakehouse.open(inner, kv_options=KV) as re:
            v = re.version
            where = f"{op}, crash point {k}"
            assert v0 <= v <= last, f"{where}: version {v}"
            if acknowledged:
                assert v >= v0 + 1, f"{where}: acknowledged commit lost"
            assert state(re) == states[v], where
            assert state(re.at_version(v0)) == old, where
            assert_one_partition_per_file(re)
            verify_clean(inner)
            # no uncommitted file visible: unreferenced files are orphans, and only they go
            live, inline = set(), set()  # (inlined rows live in the kvstore, not in files)
            for u in range(v0, v + 1):
                for f in re.at_version(u).list_data_files(T):
                    (inline if f.is_inline else live).add(f.path)
            stored = set(re.data_store.list(""))
            assert live <= stored, f"{where}: a live file is missing"
            assert not inline & stored, f"{where}: an inline file is in storage"
            removed = set(re.remove_orphan_files(older_than=dt.timedelta(0)))
            assert removed == stored - live, where
            assert state(re) == states[v], where
            with re.begin() as txn:  # and it keeps working
                txn.append(T, batch([999], "zz", "z"))
            assert (999, "z999", "zz") in rows(re)
            outcomes["new" if v > v0 else "old"] += 1
    return outcomes


@pytest.mark.parametrize("op", [*sorted(OPS), AUTO_OP])
def test_crash_sweep_partitioned_operation(op: str) -> None:
    outcomes = sweep(MemoryBackend(), op)
    assert outcomes["old"] >= 1 and outcomes["new"] >= 1


# -- kill -9 during automatic compaction ---------------------------------------------------

#: the writer: appends small batches to a few partitions of a table with automatic
#: compaction on (compaction.min-files 2: a compaction after nearly every commit),
#: acknowledging each committed append on one line of the ack log
WRITER = r"""
import json, os, sys, time
import pyarrow as pa
import lakehouse
from lakehouse.data import compaction

url, acklog, run, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "pause"
schema = pa.schema(
    [pa.field("k", pa.int64(), nullable=False), ("v", pa.string()), ("p", pa.string())]
)
compact = compaction.compact


def compact_then_report(*args, **kwargs):
    # the compaction's files are written, its transaction not committed yet
    result = compact(*args, **kwargs)
    if result.files_added:
        print("COMPACTION-WRITTEN", flush=True)
        if pause:
            time.sleep(60)  # killed here, before the commit
    return result


compaction.compact = compact_then_report
lh = lakehouse.open(url)
if not lh.list_namespaces():
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table("ns.t", schema, {"compaction.min-files": "2"},
                         partition_by=["p", "bucket(2, k)"], sort_keys=["k"])
fd = os.open(acklog, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
print("READY", flush=True)
i = 0
while True:
    i += 1
    keys = [run * 1_000_000 + i * 10 + j for j in range(4)]
    ps = ["p%d" % (i % 3)] * 2 + ["p%d" % ((i + 1) % 3)] * 2
    lh.append("ns.t", pa.table({"k": keys, "v": ["v%d" % k for k in keys], "p": ps}, schema=schema))
    os.write(fd, (json.dumps(list(zip(keys, ps))) + "\n").encode())
"""


def read_acks(path: Path) -> list[tuple[int, str]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().split(b"\n")[:-1]:  # one os.write per line
        out += [(k, p) for k, p in json.loads(line)]
    return out


def test_kill_during_automatic_compaction_loses_nothing(tmp_path: Path) -> None:
    """Runs of the writer on one lakehouse, each SIGKILLed: odd runs once an automatic
    compaction has written its files but not committed (the writer reports it and
    waits), even runs 0.3-1.5 s after it is ready (compactions run in its background
    thread all the while). After each kill: every acknowledged row is there exactly
    once with its value, no row appears that was never written, verify is clean, the
    killed compaction's files are orphans; the next run goes on."""
    url = str(tmp_path / "lh")
    acklog = tmp_path / "acks"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    rng = random.Random(20261127)
    runs = 6
    compactions = 0
    for run in range(1, runs + 1):
        mid_compaction = run % 2 == 1
        mode = "pause" if mid_compaction else "run"
        proc = subprocess.Popen(
            [sys.executable, str(script), url, str(acklog), str(run), mode],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "READY"
            if mid_compaction:  # the writer waits after this line until killed
                while (line := proc.stdout.readline()) and line.strip() != "COMPACTION-WRITTEN":
                    pass
                assert line, "the writer died before a compaction wrote its files"
            else:
                time.sleep(rng.uniform(0.3, 1.5))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        acked = read_acks(acklog)
        with lakehouse.open_reader(url) as r:
            t = r.read(T)
            got = list(zip(t.column("k").to_pylist(), t.column("v").to_pylist(), strict=True))
            keys = [k for k, _ in got]
            assert len(keys) == len(set(keys)), f"run {run}: a row is there twice"
            assert all(v == f"v{k}" for k, v in got), f"run {run}: a garbled row"
            parts = dict(zip(keys, t.column("p").to_pylist(), strict=True))
            missing = [(k, p) for k, p in acked if parts.get(k) != p]
            assert not missing, f"run {run}: acknowledged rows lost: {missing[:5]}"
            # rows of an append killed before its ack may be there (committed, not acked)
            assert len(keys) - len(acked) <= 4 * run, f"run {run}: rows nobody wrote"
            compactions = sum(any(c.op == "compact" for c in h.changes) for h in r.history())
            for f in r.list_data_files(T):
                s = f.stats["p"]
                assert s.min == s.max == f.partition["p"]
        report = verify(Target(url), all_versions=True)
        assert report.ok, [str(p) for p in report.problems]
        if mid_compaction:  # the killed compaction's files: written, never committed
            with lakehouse.open(url) as lh:
                referenced = set()
                for v in range(lh.oldest_version, lh.version + 1):
                    try:
                        referenced |= {f.path for f in lh.at_version(v).list_data_files(T)}
                    except lakehouse.NotFound:  # before the table was created
                        continue
                orphans = set(lh.data_store.list("")) - referenced
                assert orphans, f"run {run}: the killed compaction left no file"
                removed = set(lh.remove_orphan_files(older_than=dt.timedelta(0)))
                assert removed == orphans
                assert lh.read(T).num_rows == len(keys)
    assert read_acks(acklog), "the writer acknowledged nothing"
    assert compactions >= 1, "no automatic compaction ran in any run"
