"""Garbage collection across processes (issue 13, items 8, 11 and 12).

* item 8: the grace period counts from when a file became obsolete, which
  the manifest records, not from when the collecting process opened;
* item 11: a checkpoint created (and then compacted away from the live
  tree) while a GC pass lists the SSTs keeps its files;
* item 12: WAL objects a crash left below ``wal_replay_from`` are deleted.
"""

from __future__ import annotations

import linecache
import sys
import threading
import time
from typing import Any

import pytest

import kvstore
from kvstore import paths
from kvstore.compaction import plan_full
from kvstore.db import DB
from kvstore.format.wal import decode_object
from kvstore.manifest_store import ManifestStore
from kvstore.objstore import FaultyStore, MemoryStore, SimulatedCrash
from kvstore.options import Options
from kvstore.wal import list_wal_ids


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _db(store: Any, clock: Clock, **opts: Any) -> DB:
    base: dict[str, Any] = {
        "background_flush": False,
        "background_compaction": False,
        "l0_compaction_trigger": 2,
        "gc_grace_seconds": 60.0,
    }
    return DB(store, Options(**{**base, **opts}), clock=clock)


def _ssts(store: MemoryStore) -> set[str]:
    return {n for n in store.list(paths.SST_DIR)}


# ---------------------------------------------------------------------------
# item 8
# ---------------------------------------------------------------------------
def test_grace_counts_from_when_the_file_became_obsolete() -> None:
    store = MemoryStore()
    clock = Clock(1_000_000.0)
    db = _db(store, clock)
    for round_ in range(2):
        for i in range(10):
            db.put(b"k%02d" % i, b"v%d" % round_)
        db.flush()
    before = _ssts(store)
    db.compact()  # replaces both L0 SSTs; its GC keeps them (grace 60 s)
    assert before <= _ssts(store)
    m = ManifestStore(store).load_latest()
    assert m is not None and {i for i, _ in m.obsolete} == {paths.parse_sst_name(n) for n in before}
    assert {t for _, t in m.obsolete} == {1_000_000_000}
    db.close()

    clock.now += 30  # a new process, 30 s later: not yet
    db = _db(store, clock)
    assert db.collect_garbage()["ssts"] == 0
    db.close()

    clock.now += 31  # 61 s after the compaction: due, although this process just opened
    db = _db(store, clock)
    result = db.collect_garbage()
    assert result["ssts"] == 2
    assert result["manifests"] > 0  # superseded more than 60 s ago too
    assert not before & _ssts(store)
    assert db.get(b"k05") == b"v1"
    db.close()


def test_files_found_unreferenced_count_from_when_first_seen() -> None:
    """A crash leftover has no recorded time: the first process to see it records it."""
    store = MemoryStore()
    clock = Clock(2_000_000.0)
    db = _db(store, clock)
    db.put(b"k", b"v")
    db.close()
    store.put(paths.sst_name("01LEFTOVERFROMACRASH000000"), b"junk")
    db = _db(store, clock)  # sees it
    db.put(b"k", b"w")
    db.close()  # the clean-close manifest records it
    clock.now += 61
    db = _db(store, clock)
    assert db.collect_garbage()["ssts"] == 1
    db.close()


def test_kvstore_gc_cli_deletes_files_obsolete_for_long(tmp_path: Any) -> None:
    """The one-shot CLI (a fresh process each time) deletes what is overdue."""
    from kvstore.cli.main import main

    path = tmp_path / "db"
    clock = Clock(time.time() - 3600)  # the compaction ran an hour ago
    store = kvstore.objstore.LocalStore(path)
    db = _db(store, clock)
    for round_ in range(2):
        db.put(b"k", b"v%d" % round_)
        db.flush()
    db.compact()
    db.close()
    n_before = len(store.list(paths.SST_DIR))
    assert n_before == 3
    assert main(["gc", str(path)]) == 0
    assert len(store.list(paths.SST_DIR)) == 1


# ---------------------------------------------------------------------------
# item 11
# ---------------------------------------------------------------------------
class ListHookStore(MemoryStore):
    """Runs ``hook`` once, right after listing ``sst/`` (inside a GC pass)."""

    hook: Any = None

    def list(self, prefix: str = "") -> list[str]:
        out = super().list(prefix)
        if prefix == paths.SST_DIR and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return out


def _waiting_at(thread: threading.Thread, text: str) -> bool:
    """Whether ``thread``'s innermost Python frame is on a source line containing ``text``."""
    frame = sys._current_frames().get(thread.ident or -1)
    return frame is not None and text in linecache.getline(frame.f_code.co_filename, frame.f_lineno)


def test_checkpoint_created_during_a_gc_pass_keeps_its_files() -> None:
    """The interleaving: a GC pass read the checkpoint pins, then (before it read the
    live set) a checkpoint was created and compaction replaced its SSTs in the live
    tree; the pass saw those SSTs neither live nor pinned and deleted them."""
    store = ListHookStore()
    db = kvstore.open(
        store,
        background_flush=False,
        background_compaction=False,
        l0_compaction_trigger=2,
        gc_grace_seconds=0,
    )
    expected = {}
    for round_ in range(2):
        for i in range(20):
            key, value = b"k%02d" % i, b"v%d-%d" % (round_, i)
            db.put(key, value)
            expected[key] = value
        db.flush()
    assert len(db.manifest.l0) == 2
    done = threading.Event()

    def checkpoint_then_compact() -> None:
        try:
            db.create_checkpoint("cp")
            m = db.manifest
            p = plan_full(m.l0, m.runs, purge_tombstones=False)
            assert p is not None
            db.parts.compactor.compact_once(p)
        finally:
            done.set()

    def during_listing() -> None:
        # another thread creates the checkpoint and compacts while this GC pass
        # runs; wait until it is done or (fixed) waits for this pass to end
        t = threading.Thread(target=checkpoint_then_compact)
        t.start()
        # until it is done, or waits for the file lock this pass holds (its stack
        # shows it); the deadline only bounds a hang
        deadline = time.monotonic() + 60
        while not done.is_set() and not _waiting_at(t, "self._files.lock"):
            assert time.monotonic() < deadline, "the checkpoint thread neither ran nor waited"
            m = db.manifest
            if "cp" in m.checkpoints and not m.l0:
                break
            time.sleep(0.001)
        during_listing.thread = t  # type: ignore[attr-defined]

    store.hook = during_listing
    db.collect_garbage(grace_seconds=0)
    during_listing.thread.join(10)  # type: ignore[attr-defined]
    assert done.is_set()
    db.collect_garbage(grace_seconds=0)  # and any later pass keeps them too
    with kvstore.open_reader(store, checkpoint="cp") as r:
        assert dict(r.scan()) == expected
    db.close()


# ---------------------------------------------------------------------------
# item 12
# ---------------------------------------------------------------------------
def _object_wal_workload(store: Any) -> None:
    db = kvstore.open(store, background_flush=False, background_compaction=False, seed=7)
    for i in range(20):
        db.put(b"k%02d" % i, b"v")  # one WAL object each
    db.flush()  # a manifest, then the 20 objects are deleted
    db.close()


def _wal_objects(store: MemoryStore) -> dict[int, bool]:
    """WAL object id -> is it a fence."""
    out = {}
    for wal_id, kind in list_wal_ids(store):
        assert kind == "wal"
        name = paths.wal_object_name(wal_id)
        out[wal_id] = decode_object(store.get(name), where=name)[1]
    return out


def test_wal_objects_left_by_a_crash_are_collected() -> None:
    probe = FaultyStore(MemoryStore())
    _object_wal_workload(probe)
    first_delete = next(
        k for k, op, name in probe.log if op == "delete" and name.startswith(paths.WAL_DIR)
    )
    inner = MemoryStore()
    with pytest.raises(SimulatedCrash):
        _object_wal_workload(FaultyStore(inner, crash_before=first_delete))
    m = ManifestStore(inner).load_latest()
    assert m is not None
    left = [i for i, fence in _wal_objects(inner).items() if not fence and i < m.wal_replay_from]
    assert len(left) == 20  # the crash left them all
    for _ in range(3):
        kvstore.open(inner, background_compaction=False).close()
    m = ManifestStore(inner).load_latest()
    assert m is not None
    objects = _wal_objects(inner)
    assert [i for i, fence in objects.items() if not fence and i < m.wal_replay_from] == []
    assert any(objects.values())  # fences stay
    with kvstore.open_reader(inner) as r:
        assert len(list(r.scan())) == 20


def test_sweeping_happens_once_per_range() -> None:
    """A manifest records how far WAL objects were swept: fences below it are not
    read again at every open."""
    store = FaultyStore(MemoryStore())
    _object_wal_workload(store)
    for _ in range(2):
        kvstore.open(store, background_compaction=False).close()
    m = ManifestStore(store).load_latest()
    assert m is not None and m.wal_swept > 0
    reads: list[str] = []
    original = store.get

    def counting_get(name: str) -> bytes:
        reads.append(name)
        return original(name)

    store.get = counting_get  # type: ignore[method-assign]
    kvstore.open(store, background_compaction=False).close()
    swept_reads = [n for n in reads if n.startswith(paths.WAL_DIR) and int(n[4:24]) < m.wal_swept]
    assert swept_reads == []
