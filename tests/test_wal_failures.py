"""WAL failures, recovery watermark, checkpoint unpinning, flush orphans, epoch cell.

Regression tests for the fixes of commit "WAL: nothing is appended or
acknowledged after a WAL failure ...". One test per fixed bug; each forces its
interleaving deterministically (hooks and events, no sleeps) and proves:

1. a durable put whose frame a concurrent, failing ``write_out`` took (a
   non-durable writer's journal append failed) raises instead of being
   acknowledged; after a simulated crash the store reopens without it;
2. after one failed journal fdatasync, every later put (durable or not),
   batch, delete, transaction commit and flush raises ``WalFailed``, and
   nothing written after the failure becomes visible (``last_seq`` stays);
3. a failed creation of the next WAL segment during rotation is a WAL
   failure (``WalFailed``), not a fence: no ``FencedError``, ``_fenced`` unset;
4. recovery with age retention persists the watermark its replayed SST
   honoured: ``snapshot(seq)`` between the persisted and the age watermark
   raises ``SnapshotTooOld`` instead of reading a dropped version;
5. ``delete_checkpoint`` unpins under the GC lock: a concurrent GC pass cannot
   delete the checkpoint's files before their fresh grace period;
6. a flush whose manifest write failed cleanly releases its SST: once a retry
   flush succeeded, ``collect_garbage(grace_seconds=0)`` deletes the orphan;
7. an epoch cell left higher than the writer's epoch (by something else) costs
   one manifest listing, not one per non-durable put, and a real newer writer
   still fences the old one.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

import kvstore
from kvstore import paths
from kvstore.compaction import plan_full
from kvstore.objstore import DurabilityUnknown, FaultyStore, LocalStore
from kvstore.objstore import local as local_store
from kvstore.options import Options
from kvstore.wal import WalFailed

#: no background threads: every store call happens on the test's thread
QUIET: dict[str, Any] = {"fsync": False, "background_flush": False, "background_compaction": False}
LIVENESS_S = 30.0  # only catches a hang: each wait returns when its event happens


@pytest.fixture(autouse=True)
def _quiet_kvstore_logs() -> Iterator[None]:
    # injected failures are logged as errors; keep the output readable
    logger = logging.getLogger("kvstore")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(old)


def close_zombie(db: kvstore.DB) -> None:
    """Close a writer whose WAL failed or that was fenced (its close may fail)."""
    with suppress(Exception):
        db.close()


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sst_ids(store: Any) -> set[str]:
    ids = {paths.parse_sst_name(n) for n in store.list(paths.SST_DIR)}
    return {i for i in ids if i is not None}


# ---------------------------------------------------------------------------
# 1. a leader whose frame a failed write_out dropped does not acknowledge
# ---------------------------------------------------------------------------
def test_durable_put_whose_frame_a_failed_write_out_dropped_raises(tmp_path: Path) -> None:
    """A durable put's leader is held before its sync (in ``_gather``) while a
    non-durable writer's ``write_out`` takes every buffered frame, the durable one
    included, and its journal append fails. The durable put must raise (before the
    fix it returned its seq: acknowledged, yet never written); after a simulated
    crash (reopen of the inner store) the store opens, the key is absent and the
    write acknowledged before the failure is there."""
    path = tmp_path / "db"
    fs = FaultyStore(LocalStore(path, fsync=False))
    db = kvstore.open(fs, **QUIET, wal_buffer_bytes=4096)
    db2 = None
    try:
        db.put(b"base", b"0")  # durable, acknowledged before any failure
        wal = db.parts.commit.wal
        in_gather = threading.Event()
        failed = threading.Event()
        orig_gather = wal._gather

        def held_gather() -> None:  # the leader owns the sync, has not taken frames yet
            in_gather.set()
            assert failed.wait(LIVENESS_S)
            orig_gather()

        wal._gather = held_gather
        result: dict[str, Any] = {}

        def durable_put() -> None:
            try:
                result["seq"] = db.put(b"durable-key", b"ACKED", durable=True)
            except BaseException as exc:
                result["error"] = exc

        db.put(b"nd1", b"x", durable=False)  # buffered, not written out
        leader = threading.Thread(target=durable_put)
        leader.start()
        try:
            assert in_gather.wait(LIVENESS_S)
            fs.fail_before = fs.mutations + 1  # the next journal append fails
            with pytest.raises(OSError, match="injected failure"):
                db.put(b"nd2", b"y" * 5000, durable=False)  # >= wal_buffer_bytes: write_out
            assert fs.log[-1][1] == "append"
        finally:
            failed.set()
            leader.join(LIVENESS_S)
        assert not leader.is_alive()
        assert "seq" not in result, f"durable put acknowledged as seq {result.get('seq')}"
        assert isinstance(result["error"], (kvstore.KvError, OSError)), result["error"]

        # crash: the handle is abandoned, the inner store reopened as after a restart
        db2 = kvstore.open(LocalStore(path, fsync=False), **QUIET)
        assert db2.get(b"durable-key") is None
        assert db2.get(b"base") == b"0"
    finally:
        if db2 is not None:
            db2.close()
        close_zombie(db)


# ---------------------------------------------------------------------------
# 2. nothing is given a seq or published after a WAL I/O error
# ---------------------------------------------------------------------------
def test_no_write_is_published_after_a_failed_journal_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One journal fdatasync fails with EIO (the disk then 'recovers'). Every later
    durable and non-durable put, batch, delete, transaction commit and flush raises
    ``WalFailed``; none of them gets a seq or becomes visible through ``get``. Before
    the fix the writes were applied to the memtable and published before failing in
    the sync (and a non-durable put even succeeded)."""
    db = kvstore.open(tmp_path / "db", **QUIET)
    try:
        db.put(b"k", b"v1")
        orig_sync = local_store._FileJournal.sync
        calls = [0]

        def sync_fails_once(self: Any) -> None:
            calls[0] += 1
            if calls[0] == 1:
                raise OSError(errno.EIO, "fdatasync: Input/output error (injected)")
            orig_sync(self)

        monkeypatch.setattr(local_store._FileJournal, "sync", sync_fails_once)
        with pytest.raises(OSError) as info:
            db.put(b"k", b"v2")
        assert info.value.errno == errno.EIO
        visible = db.get(b"k")  # whatever the failed put left: it must not change now
        seq = db.last_seq

        def txn_commit() -> None:
            txn = db.transaction()
            txn.put(b"k", b"txn")
            txn.commit()

        batch = kvstore.WriteBatch()
        batch.put(b"k", b"batch")
        attempts = {
            "durable put": lambda: db.put(b"k", b"v3", durable=True),
            "non-durable put": lambda: db.put(b"k", b"v4", durable=False),
            "new key": lambda: db.put(b"new", b"x", durable=False),
            "delete": lambda: db.delete(b"k", durable=False),
            "batch": lambda: db.write(batch),
            "transaction commit": txn_commit,
            "flush": db.flush,
        }
        for what, attempt in attempts.items():
            with pytest.raises(WalFailed):
                attempt()
            assert db.get(b"k") == visible, what
            assert db.get(b"new") is None, what
            assert db.last_seq == seq, what
    finally:
        close_zombie(db)


# ---------------------------------------------------------------------------
# 3. a failed segment creation is a WAL failure, not a fence
# ---------------------------------------------------------------------------
def test_failed_wal_segment_creation_is_a_wal_failure_not_a_fence(tmp_path: Path) -> None:
    """The creation of the next WAL segment during a rotation reports an error after
    creating the file (``error_after`` on the ``create_journal`` mutation). The put
    that rotates fails with that error; every later put fails with ``WalFailed``,
    never ``FencedError`` (before the fix the next rotation found the left-over
    file and reported a newer writer though none ever existed), and the handle is
    not marked fenced."""
    fs = FaultyStore(LocalStore(tmp_path / "db", fsync=False))
    db = kvstore.open(fs, **QUIET, memtable_bytes=4096)
    try:

        def arm(k: int, op: str, name: str) -> None:
            if op == "create_journal" and fs.error_after is None:
                fs.error_after = k

        fs.on_mutation = arm
        errors: list[BaseException] = []
        for i in range(200):
            try:
                db.put(b"k%03d" % i, b"v" * 100, durable=i % 2 == 0)
            except Exception as exc:
                errors.append(exc)
                if len(errors) >= 20:
                    break
        assert fs.error_after is not None, "no rotation happened"
        assert len(errors) >= 20, f"puts kept succeeding after the failed rotation: {errors}"
        assert not any(isinstance(e, kvstore.FencedError) for e in errors), errors
        assert isinstance(errors[0], OSError) and "create_journal" in str(errors[0])
        assert all(isinstance(e, WalFailed) for e in errors[1:]), errors
        assert db.parts.health.fenced is None
        assert db.stats()["writer_epoch"] == 1
    finally:
        close_zombie(db)


# ---------------------------------------------------------------------------
# 4. recovery persists the watermark its replayed SST honoured
# ---------------------------------------------------------------------------
def test_recovery_with_age_retention_refuses_snapshots_below_the_replay_watermark(
    tmp_path: Path,
) -> None:
    """With ``retention=10`` (seconds) the persisted watermark is 0 but the seq/time
    samples put the age watermark at 5 after 100 s. Recovery replays the WAL into an
    SST with the age watermark (dropping ``k@3``, ``k@4``); it must also persist it:
    ``snapshot(seq=3)`` raises ``SnapshotTooOld`` (before the fix it was accepted and
    read ``v1``, a version that was never current at seq 3), and
    ``retention_watermark`` equals the oldest readable seq."""
    clock = Clock()
    opts = Options(retention=10, takeover=True, **QUIET)  # reopened beside the "dead" one
    crashed = kvstore.DB(LocalStore(tmp_path / "db", fsync=False), opts, clock=clock)
    db = None
    try:
        crashed.put(b"k", b"v1")
        crashed.flush()  # seq 1, SST
        crashed.put(b"x", b"1")
        crashed.flush()  # seq 2, SST
        for value in (b"v2", b"v3", b"v4"):  # seqs 3, 4, 5, one second apart
            clock.now += 1
            crashed.put(b"k", value)
        m = crashed.manifest  # a compaction persists the samples with the manifest
        with crashed.parts.compactor.lock:
            crashed.parts.compactor.compact_once(plan_full(m.l0, m.runs, purge_tombstones=False))
        assert crashed.manifest.retention_seq == 0
        # the process dies (no close); the store is reopened 100 s later
        clock.now += 100
        db = kvstore.DB(LocalStore(tmp_path / "db", fsync=False), opts, clock=clock)
        with pytest.raises(kvstore.SnapshotTooOld):
            db.snapshot(seq=3)
        floor = db.stats()["oldest_readable_seq"]
        assert db.retention_watermark == floor == 5
        with db.snapshot(seq=5) as snap:
            assert snap.get(b"k") == b"v4"
        assert db.get(b"k") == b"v4"
    finally:
        if db is not None:
            db.close()
        close_zombie(crashed)


# ---------------------------------------------------------------------------
# 5. delete_checkpoint unpins under the GC lock
# ---------------------------------------------------------------------------
class SpyLock:
    """Wraps a (re-entrant) lock; ``progressed`` is set when a caller has to wait."""

    def __init__(self, inner: Any, progressed: threading.Event) -> None:
        self.inner = inner
        self.progressed = progressed

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self.inner.acquire(blocking=False):
            return True
        if not blocking:
            return False
        self.progressed.set()  # about to block: the holder is inside its critical section
        return bool(self.inner.acquire(True, timeout))

    def release(self) -> None:
        self.inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_gc_concurrent_with_delete_checkpoint_keeps_its_files_for_a_fresh_grace(
    tmp_path: Path,
) -> None:
    """A GC pass (another thread) starts right after ``delete_checkpoint`` wrote the
    manifest without the checkpoint, before it released the pins. The test waits
    until that pass either finished or blocked on the GC lock. The checkpoint's
    SSTs, unreferenced for long (their original grace is over), must survive that
    pass (before the fix it deleted them at once) and go only after a fresh
    ``gc_grace_seconds``."""
    clock = Clock()
    store = LocalStore(tmp_path / "db", fsync=False)
    db = kvstore.DB(store, Options(**QUIET, gc_grace_seconds=60), clock=clock)
    gc_thread = None
    try:
        for i in range(3):
            db.put(b"k%d" % i, b"v")
            db.flush()
        db.create_checkpoint("cp")
        cp_ssts = {s.id for s in db.manifest.all_ssts()}
        db.put(b"k9", b"v")
        db.compact()  # the checkpoint's SSTs are now only pinned
        assert not cp_ssts & {s.id for s in db.manifest.all_ssts()}
        assert cp_ssts <= sst_ids(store)
        clock.now += 1000  # their original grace is long over

        progressed = threading.Event()  # GC finished or is blocked on the GC lock
        gc_result: dict[str, Any] = {}

        def gc() -> None:
            try:
                gc_result["counts"] = db.collect_garbage()
            except BaseException as exc:
                gc_result["error"] = exc
            finally:
                progressed.set()

        orig_advance = db.parts.manifests.advance

        def advance_then_gc(change: Any, **kw: Any) -> Any:
            nonlocal gc_thread
            m = orig_advance(change, **kw)
            if gc_thread is None:  # the checkpoint is gone from the manifest; pins not released
                gc_thread = threading.Thread(target=gc)
                gc_thread.start()
                assert progressed.wait(LIVENESS_S)
            return m

        db.parts.manifests.advance = advance_then_gc  # type: ignore[method-assign]
        db.parts.files.lock = SpyLock(db.parts.files.lock, progressed)  # type: ignore[assignment]
        try:
            db.delete_checkpoint("cp")
        finally:
            del db.parts.manifests.advance
            db.parts.files.lock = db.parts.files.lock.inner
        assert gc_thread is not None
        gc_thread.join(LIVENESS_S)
        assert not gc_thread.is_alive()
        assert "error" not in gc_result, gc_result
        assert cp_ssts <= sst_ids(store), "checkpoint files deleted without a fresh grace"
        db.collect_garbage()  # still within the fresh grace
        assert cp_ssts <= sst_ids(store)
        clock.now += 61
        db.collect_garbage()
        assert not cp_ssts & sst_ids(store)
        assert sst_ids(store) == {s.id for s in db.manifest.all_ssts()}
    finally:
        db.close()


# ---------------------------------------------------------------------------
# 6. a flush whose manifest write failed releases its SST to GC
# ---------------------------------------------------------------------------
def test_sst_of_a_flush_whose_manifest_write_failed_is_collected(tmp_path: Path) -> None:
    """The manifest write of a flush fails cleanly (``fail_before`` on its
    ``put_if_absent``: nothing landed). The flush raises, a retry writes a new SST
    and succeeds; the first SST, named by no manifest, must be deleted by
    ``collect_garbage(grace_seconds=0)`` (before the fix it stayed in flight for
    the life of the handle and GC never collected it)."""
    fs = FaultyStore(LocalStore(tmp_path / "db", fsync=False))
    db = kvstore.open(fs, **QUIET)
    try:
        armed = [True]

        def fail_manifest_write(k: int, op: str, name: str) -> None:
            if armed[0] and op == "put_if_absent" and name.startswith(paths.MANIFEST_DIR):
                armed[0] = False
                fs.fail_before = k

        db.put(b"a", b"1")
        fs.on_mutation = fail_manifest_write
        with pytest.raises(OSError, match="injected failure"):
            db.flush()
        assert not armed[0]
        assert db.stats()["stopped"] is None  # the failure was clean: not landed
        assert len(sst_ids(fs)) == 1 and not db.manifest.all_ssts()
        db.flush()  # the retry writes a new SST
        live = {s.id for s in db.manifest.all_ssts()}
        assert len(live) == 1 and len(sst_ids(fs)) == 2
        db.collect_garbage(grace_seconds=0)
        assert sst_ids(fs) == live
        assert db.get(b"a") == b"1"
    finally:
        db.close()
    with kvstore.open(LocalStore(tmp_path / "db", fsync=False), **QUIET) as db:
        assert db.get(b"a") == b"1"


# ---------------------------------------------------------------------------
# 7. a stale high epoch cell falls back to the manifest probe
# ---------------------------------------------------------------------------
def test_stale_high_epoch_cell_costs_one_listing_and_still_fences(tmp_path: Path) -> None:
    """The epoch cell is raised above the writer's epoch by something else (no newer
    writer exists). 2,000 non-durable puts must read the latest manifest only a
    few times (before the fix: once per put), and a real second writer opening the
    store still fences the first: its next writes raise ``FencedError``."""
    path = tmp_path / "db"
    a = kvstore.open(LocalStore(path, fsync=False), **QUIET)
    b = None
    try:
        assert a.parts.manifests.epoch_cell is not None
        a.parts.manifests.epoch_cell.raise_to(a.parts.manifests.epoch + 5)
        calls = [0]
        orig_load_latest = a.parts.manifests.mstore.load_latest

        def counted_load_latest() -> Any:
            calls[0] += 1
            return orig_load_latest()

        a.parts.manifests.mstore.load_latest = counted_load_latest
        for i in range(2000):
            a.put(b"k%04d" % i, b"v", durable=False)
        assert calls[0] <= 3, f"load_latest called {calls[0]} times for 2000 puts"
        a.put(b"synced", b"1")  # durable: everything before it is in the WAL

        b = kvstore.open(LocalStore(path, fsync=False), takeover=True, **QUIET)  # fences a
        assert b.get(b"k1999") == b"v" and b.get(b"synced") == b"1"
        with pytest.raises(kvstore.FencedError):
            a.put(b"lost", b"x", durable=False)
        with pytest.raises(kvstore.FencedError):
            a.put(b"lost2", b"x", durable=True)
        b.put(b"b", b"1")
        assert b.get(b"lost") is None and b.get(b"lost2") is None
    finally:
        close_zombie(a)
        if b is not None:
            b.close()


def test_a_manifest_whose_directory_fsync_failed_stops_the_writer(tmp_path, monkeypatch):
    """The manifest is linked, then fsync of manifest/ fails: it can be read back now
    but may vanish after a power loss, so the writer must not go on as if it were
    durable (a flush would delete the WAL segments it replaces). It stops; the WAL
    keeps everything; a reopen recovers it."""
    from kvstore.objstore import local

    path = tmp_path / "db"
    db = kvstore.open(path, background_compaction=False, background_flush=False)
    db.put(b"k", b"v")
    wal_before = sorted(os.listdir(path / "wal"))
    real = local.LocalStore._fsync_dir
    armed = [True]

    def failing(self, p):
        if armed[0] and p.endswith("manifest"):
            armed[0] = False
            raise OSError(errno.EIO, "Input/output error (injected)")
        return real(self, p)

    monkeypatch.setattr(local.LocalStore, "_fsync_dir", failing)
    with pytest.raises(DurabilityUnknown):
        db.flush()
    assert db.stats()["stopped"] is not None
    assert set(wal_before) <= set(os.listdir(path / "wal"))  # nothing deleted
    with pytest.raises(kvstore.KvError, match="open the store again"):
        db.put(b"x", b"y")
    db.close()
    with kvstore.open(path) as db2:
        assert db2.get(b"k") == b"v"
