"""Readers in another process while the writer compacts and collects garbage.

1. A checkpoint reader (``open_reader(dir, checkpoint="cp")``) in a child
   process keeps reading (full scans, reverse scans, point reads) and checks
   every answer against the checkpoint's content (a JSON file from the
   parent), while the parent overwrites and deletes the same keys, runs
   ``db.compact()`` and ``collect_garbage(grace_seconds=0)``. The files the
   checkpoint pins must stay; the child also re-opens the checkpoint now and
   then.
2. A live reader with ``refresh()`` in a child process checks, after every
   refresh, that it sees a consistent prefix of the writer's history: the
   writer only ever writes batches that set *all* keys of a group to the same
   value (or delete them all), so a reader must never see a mix; seqs never go
   back. The writer runs background compaction, ``db.compact()`` and GC with a
   small ``gc_grace_seconds``.

The child reports a JSON line on stdout and exits 0 on success.
"""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kvstore
from kvstore.objstore import LocalStore

REPO = Path(__file__).resolve().parent.parent
CHURN_SECONDS = 2.5


@pytest.fixture(autouse=True)
def _quiet_kvstore_logs():
    logger = logging.getLogger("kvstore")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(old)


CHECKPOINT_CHILD = r"""
import json, os, random, sys, time
import kvstore

path, expected_file, ready_file, stop_file = sys.argv[1:5]
with open(expected_file) as f:
    raw = json.load(f)
expected = {bytes.fromhex(k): bytes.fromhex(v) for k, v in raw["items"].items()}
cp_seq = raw["seq"]
items = sorted(expected.items())
probe = sorted(expected) + [b"k%04d" % i for i in range(0, 1200, 7)] + [b"zzz", b"\x00"]
rng = random.Random(1)
report = {"iterations": 0, "reopens": 0, "reopen_races": 0, "problems": []}


def check(reader, where):
    if reader.last_seq != cp_seq:
        report["problems"].append(f"{where}: seq {reader.last_seq} != {cp_seq}")
    got = list(reader.scan())
    if got != items:
        report["problems"].append(f"{where}: scan differs ({len(got)} vs {len(items)} items)")
    for k in rng.sample(probe, 40):
        if reader.get(k) != expected.get(k):
            report["problems"].append(f"{where}: get({k!r}) differs")
            break
    lo = rng.choice(probe)
    want = [kv for kv in reversed(items) if kv[0] >= lo][:25]
    got = []
    for kv in reader.scan(lo, None, reverse=True):
        got.append(kv)
        if len(got) == 25:
            break
    if got != want:
        report["problems"].append(f"{where}: reverse scan from {lo!r} differs")


try:
    reader = kvstore.open_reader(path, checkpoint="cp")
    check(reader, "first open")
    open(ready_file, "w").close()
    last_reopen = time.monotonic()
    while not os.path.exists(stop_file) and not report["problems"]:
        check(reader, f"iteration {report['iterations']}")
        report["iterations"] += 1
        if time.monotonic() - last_reopen > 0.3:
            last_reopen = time.monotonic()
            # a fresh view of the same checkpoint, opened while GC runs
            try:
                fresh = kvstore.open_reader(path, checkpoint="cp")
            except FileNotFoundError:
                # grace_seconds=0 gives no protection to the latest-manifest lookup
                report["reopen_races"] += 1
            else:
                check(fresh, "re-opened")
                fresh.close()
                report["reopens"] += 1
    check(reader, "last")
    reader.close()
except BaseException as exc:
    report["problems"].append(f"exception: {type(exc).__name__}: {exc}")
print(json.dumps(report))
sys.exit(1 if report["problems"] else 0)
"""


LIVE_CHILD = r"""
import json, os, sys
import kvstore

path, ready_file, stop_file, group = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
prefix = b"inv/"
report = {"refreshes": 0, "distinct_values": 0, "problems": [], "last_seq": 0, "last_value": None}
seen = set()


def check(reader, where):
    seq = reader.last_seq
    if seq < report["last_seq"]:
        report["problems"].append(f"{where}: seq went back {report['last_seq']} -> {seq}")
    report["last_seq"] = seq
    got = list(reader.scan_prefix(prefix))
    values = {v for _, v in got}
    if got and (len(got) != group or len(values) != 1):
        report["problems"].append(
            f"{where}: torn state at seq {seq}: {len(got)} keys, {len(values)} values"
        )
        return
    value = got[0][1] if got else None
    # point reads come from the same loaded state
    for i in (0, group // 2, group - 1):
        if reader.get(prefix + b"%04d" % i) != value:
            report["problems"].append(f"{where}: get disagrees with scan at seq {seq}")
            break
    if value is not None:
        n = int(value[:10])
        if report["last_value"] is not None and n < report["last_value"]:
            report["problems"].append(f"{where}: value went back {report['last_value']} -> {n}")
        report["last_value"] = n
    seen.add(value)


try:
    reader = kvstore.open_reader(path)
    check(reader, "open")
    open(ready_file, "w").close()
    while not os.path.exists(stop_file) and not report["problems"]:
        reader.refresh()
        report["refreshes"] += 1
        check(reader, f"refresh {report['refreshes']}")
    reader.refresh()  # the writer closed before it wrote stop_file: everything is durable
    check(reader, "final")
    with open(stop_file) as f:
        final = json.load(f)
    if reader.last_seq != final["seq"]:
        report["problems"].append(f"final seq {reader.last_seq} != {final['seq']}")
    if report["last_value"] != final["value"]:
        report["problems"].append(f"final value {report['last_value']} != {final['value']}")
    reader.close()
except BaseException as exc:
    report["problems"].append(f"exception: {type(exc).__name__}: {exc}")
report["distinct_values"] = len(seen)
print(json.dumps(report))
sys.exit(1 if report["problems"] else 0)
"""


def spawn(tmp_path: Path, script: str, *args: str) -> subprocess.Popen:
    child = tmp_path / "child.py"
    child.write_text(script)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(
        [sys.executable, str(child), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_ready(proc: subprocess.Popen, ready: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"child exited early ({proc.returncode}): {out}\n{err}")
        assert time.monotonic() < deadline, "child never got ready"
        time.sleep(0.01)


def finish(proc: subprocess.Popen) -> dict:
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"child hung: {out}\n{err}")
    lines = out.strip().splitlines()
    assert lines, f"child printed nothing (exit {proc.returncode}): {err}"
    report = json.loads(lines[-1])
    assert proc.returncode == 0 and not report["problems"], (report, err[-3000:])
    return report


def sst_count(path: Path) -> int:
    return sum(1 for f in os.listdir(path / "sst") if f.endswith(".sst"))


def test_checkpoint_reader_process_during_compaction_and_gc(tmp_path):
    path = tmp_path / "db"
    db = kvstore.open(
        LocalStore(path, fsync=False),
        fsync=False,
        memtable_bytes=8 << 10,
        l0_compaction_trigger=2,
        gc_grace_seconds=0,
    )
    rng = random.Random(2)
    proc = None
    try:
        for _i in range(1500):
            k = b"k%04d" % rng.randrange(1000)
            if rng.random() < 0.1:
                db.delete(k, durable=False)
            else:
                db.put(k, rng.randbytes(rng.choice([4, 40, 120])), durable=False)
        cp = db.create_checkpoint("cp")
        expected = dict(db.scan())
        assert cp["seq"] == db.last_seq
        # the checkpoint's own manifest: a background compaction may already have
        # moved the live manifest on since create_checkpoint returned
        pinned = {m.id for m in db.parts.manifests.mstore.load(int(cp["manifest_id"])).all_ssts()}
        expected_file = tmp_path / "expected.json"
        expected_file.write_text(
            json.dumps({"seq": cp["seq"], "items": {k.hex(): v.hex() for k, v in expected.items()}})
        )
        ready, stop = tmp_path / "ready", tmp_path / "stop"
        proc = spawn(
            tmp_path, CHECKPOINT_CHILD, str(path), str(expected_file), str(ready), str(stop)
        )
        wait_ready(proc, ready)
        deleted_before = db.stats()["gc_deleted_ssts"]
        end = time.monotonic() + CHURN_SECONDS
        rounds = 0
        while time.monotonic() < end or rounds < 3:  # a slow machine still churns enough
            for _ in range(300):
                k = b"k%04d" % rng.randrange(1200)
                if rng.random() < 0.2:
                    db.delete(k, durable=False)
                else:
                    db.put(k, rng.randbytes(rng.choice([4, 40, 120])), durable=False)
            db.compact()
            db.collect_garbage(grace_seconds=0)
            rounds += 1
            assert proc.poll() is None, finish(proc)
        stop.touch()
        report = finish(proc)
        proc = None
        assert report["iterations"] >= 5, report
        assert rounds >= 3
        # the churn replaced every pinned SST and GC deleted other files meanwhile
        live = {m.id for m in db.manifest.all_ssts()}
        assert not (live & pinned)
        assert db.stats()["gc_deleted_ssts"] > deleted_before
        assert sst_count(path) == len(live | pinned)
        with kvstore.open_reader(str(path), checkpoint="cp") as reader:
            assert dict(reader.scan()) == expected
    finally:
        if proc is not None:
            proc.kill()
            proc.communicate()
        db.close()


def test_live_reader_process_sees_consistent_prefixes(tmp_path):
    path = tmp_path / "db"
    group = 40
    db = kvstore.open(
        LocalStore(path, fsync=False),
        fsync=False,
        memtable_bytes=32 << 10,
        l0_compaction_trigger=2,
        gc_grace_seconds=0.2,
        wal_buffer_bytes=4096,
    )
    proc = None
    rng = random.Random(3)
    try:

        def write_group(n: int, *, delete: bool, durable: bool) -> int:
            batch = kvstore.WriteBatch()
            value = b"%010d" % n + rng.randbytes(rng.choice([0, 50, 150]))
            for i in range(group):
                key = b"inv/%04d" % i
                if delete:
                    batch.delete(key)
                else:
                    batch.put(key, value)
            # noise outside the group, so compaction has other keys to merge
            batch.put(b"noise/%05d" % rng.randrange(3000), rng.randbytes(80))
            return db.write(batch, durable=durable)

        write_group(0, delete=False, durable=True)
        ready, stop = tmp_path / "ready", tmp_path / "stop"
        proc = spawn(tmp_path, LIVE_CHILD, str(path), str(ready), str(stop), str(group))
        wait_ready(proc, ready)
        end = time.monotonic() + CHURN_SECONDS
        n = 0
        last_value = 0
        cap = end + 60  # a slow machine goes on until GC has deleted something
        while time.monotonic() < end or (
            db.stats()["gc_deleted_ssts"] == 0 and time.monotonic() < cap
        ):
            n += 1
            delete = n % 17 == 0
            write_group(n, delete=delete, durable=rng.random() < 0.3)
            if not delete:
                last_value = n
            if n % 60 == 0:
                db.compact()
                db.collect_garbage()
            if n % 40 == 0:
                time.sleep(0.002)
            assert proc.poll() is None, finish(proc)
        if n % 17 == 0:  # end on a put so the final value is known
            n += 1
            write_group(n, delete=False, durable=True)
            last_value = n
        final_seq = db.last_seq
        stats = db.stats()
        db.close()
        tmp = tmp_path / "stop.tmp"
        tmp.write_text(json.dumps({"seq": final_seq, "value": last_value}))
        tmp.rename(stop)  # atomically: the child reads it as soon as it exists
        report = finish(proc)
        proc = None
        assert report["refreshes"] >= 10, report
        assert report["distinct_values"] >= 5, report
        assert stats["compactions"] > 0 and stats["flushes"] > 5
        assert stats["gc_deleted_ssts"] > 0  # files went away while the reader ran
    finally:
        if proc is not None:
            proc.kill()
            proc.communicate()
        db.close()
