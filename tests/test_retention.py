"""Retention watermark, checkpoints and garbage collection.

* ``retention="all"``: ``db.snapshot(seq=s)`` reproduces the exact historical
  state for every old ``s`` across flushes, compactions and reopen;
* ``set_retention_watermark(s)``: seqs below ``s`` become ``SnapshotTooOld``
  once compaction has run, seqs at or above stay exact; the watermark only
  rises and is persisted;
* ``retention=<seconds>`` with an injected clock;
* checkpoints: create / list / delete, argument errors, expiry, reading them
  through ``open_reader(url, checkpoint=name)`` after the live tree moved on
  and GC ran, and the files they pin;
* GC honours ``gc_grace_seconds`` (and ``grace_seconds=``).

Time is injected with ``kvstore.DB(store, Options(...), clock=fake)``.
"""

from __future__ import annotations

import logging
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import kvstore
from kvstore import paths
from kvstore.objstore import LocalStore, MemoryStore

FAST: dict[str, Any] = {"fsync": False}


@pytest.fixture(autouse=True)
def _quiet_kvstore_logs():
    logger = logging.getLogger("kvstore")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(old)


class FakeClock:
    def __init__(self, t: float | None = None) -> None:
        self.t = time.time() if t is None else t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def open_db(store: Any, clock: Any = None, **opts: Any) -> kvstore.DB:
    options = kvstore.Options.from_kwargs({**FAST, **opts})
    if clock is None:
        return kvstore.DB(store, options)
    return kvstore.DB(store, options, clock=clock)


@pytest.fixture(params=["memory", "local"])
def store_factory(request, tmp_path):
    """Returns (make_store, url): the same underlying store on every call."""
    if request.param == "memory":
        name = f"retention-{uuid.uuid4().hex}"
        yield (lambda: MemoryStore.named(name)), f"memory://{name}"
        MemoryStore.drop(name)
    else:
        path = tmp_path / "db"
        yield (lambda: LocalStore(path, fsync=False)), str(path)


def sst_files(path: Path) -> set[str]:
    d = path / "sst"
    return {f for f in os.listdir(d) if f.endswith(".sst")} if d.exists() else set()


def tree_ids(db: kvstore.DB) -> set[str]:
    return {f"{m.id}.sst" for m in db.manifest.all_ssts()}


def versions_in_tree(db: kvstore.DB) -> int:
    return sum(m.count for m in db.manifest.all_ssts())


# ---------------------------------------------------------------------------
# a random history, with the state after every seq
# ---------------------------------------------------------------------------
class History:
    def __init__(self, seed: int, nkeys: int = 40) -> None:
        self.rng = random.Random(seed)
        self.keys = [b"k%03d" % i for i in range(nkeys)] + [b"\x00", b"\xff\xff"]
        self.model: dict[bytes, bytes] = {}
        self.states: dict[int, dict[bytes, bytes]] = {0: {}}

    def step(self, db: kvstore.DB) -> int:
        r = self.rng.random()
        durable = self.rng.random() < 0.3
        if r < 0.6:
            k, v = self.rng.choice(self.keys), self.rng.randbytes(self.rng.choice([3, 40, 300]))
            seq = db.put(k, v, durable=durable)
            self.model[k] = v
        elif r < 0.8:
            k = self.rng.choice(self.keys)
            seq = db.delete(k, durable=durable)
            self.model.pop(k, None)
        else:
            batch = kvstore.WriteBatch()
            for k in self.rng.sample(self.keys, 4):
                if self.rng.random() < 0.3:
                    batch.delete(k)
                    self.model.pop(k, None)
                else:
                    v = self.rng.randbytes(20)
                    batch.put(k, v)
                    self.model[k] = v
            seq = db.write(batch, durable=durable)
        assert seq not in self.states
        self.states[seq] = dict(self.model)
        return seq

    def check(self, db: kvstore.DB, seqs: list[int]) -> None:
        for s in seqs:
            with db.snapshot(seq=s) as snap:
                want = self.states[s]
                assert dict(snap.scan()) == want, f"seq {s}"
                k = self.rng.choice(self.keys)
                assert snap.get(k) == want.get(k), f"seq {s} key {k!r}"
                assert list(snap.scan(b"k010", b"k020", reverse=True)) == sorted(
                    ((k, v) for k, v in want.items() if b"k010" <= k < b"k020"), reverse=True
                )


# ---------------------------------------------------------------------------
# retention="all"
# ---------------------------------------------------------------------------
def test_retention_all_reproduces_every_old_state(store_factory):
    make_store, _url = store_factory
    opts = dict(retention="all", memtable_bytes=4096, l0_compaction_trigger=2, block_bytes=512)
    h = History(1)
    db = open_db(make_store(), **opts)
    try:
        assert db.retention_watermark == 0
        for round_ in range(4):
            for i in range(150):
                h.step(db)
                if i % 50 == 49:
                    db.flush()
            if round_ % 2:
                db.compact()
                assert db.stats()["sorted_runs"] == 1
            all_seqs = sorted(h.states)
            h.check(db, all_seqs[:: max(1, len(all_seqs) // 60)] + all_seqs[-3:])
        db.compact()
        assert db.stats()["compactions"] > 0
        h.check(db, sorted(h.states)[::7])
        assert db.stats()["oldest_readable_seq"] == 0
    finally:
        db.close()
    # the watermark and the versions survive a reopen
    db = open_db(make_store(), **opts)
    try:
        assert db.retention_watermark == 0
        h.check(db, sorted(h.states)[::5])
        for _ in range(100):
            h.step(db)
        db.compact()
        db.collect_garbage(grace_seconds=0)
        h.check(db, [*sorted(h.states)[::5], max(h.states)])
    finally:
        db.close()


def test_retention_all_on_an_existing_store_keeps_versions_from_then_on(store_factory):
    make_store, _url = store_factory
    with open_db(make_store(), memtable_bytes=4096) as db:
        for i in range(50):
            db.put(b"k", b"v%d" % i)
        first = db.last_seq
    with open_db(make_store(), retention="all", memtable_bytes=4096) as db:
        assert db.retention_watermark == first
        states = {}
        for i in range(50, 120):
            states[db.put(b"k", b"v%d" % i)] = b"v%d" % i
        db.compact()
        with pytest.raises(kvstore.SnapshotTooOld):
            db.snapshot(seq=first - 1)
        with db.snapshot(seq=first) as snap:
            assert snap.get(b"k") == b"v49"
        for seq, v in states.items():
            with db.snapshot(seq=seq) as snap:
                assert snap.get(b"k") == v


# ---------------------------------------------------------------------------
# set_retention_watermark
# ---------------------------------------------------------------------------
def test_set_retention_watermark_semantics(store_factory):
    make_store, _url = store_factory
    opts = dict(retention="all", memtable_bytes=4096, l0_compaction_trigger=2)
    h = History(2, nkeys=15)
    db = open_db(make_store(), **opts)
    try:
        for i in range(400):
            h.step(db)
            if i % 100 == 99:
                db.flush()
        versions_before = versions_in_tree(db)
        w = 250
        assert db.set_retention_watermark(w) == w
        assert db.retention_watermark == w
        assert db.stats()["retention_watermark"] == w
        db.compact()
        assert versions_in_tree(db) < versions_before  # versions below w are garbage now
        for s in (0, 1, 100, 249):
            with pytest.raises(kvstore.SnapshotTooOld):
                db.snapshot(seq=s)
        h.check(db, [*list(range(w, max(h.states) + 1, 3)), w, max(h.states)])
        assert db.stats()["oldest_readable_seq"] == w
        # it never goes down
        assert db.set_retention_watermark(10) == w
        assert db.retention_watermark == w
        assert db.set_retention_watermark(w) == w
        assert db.set_retention_watermark(300) == 300
        assert db.retention_watermark == 300
        # bad arguments
        for bad in ("5", 5.0, True, None):
            with pytest.raises(TypeError):
                db.set_retention_watermark(bad)
        with pytest.raises(ValueError):
            db.set_retention_watermark(-1)
        # still exact at >= 300 (not compacted again yet: < 300 may still work, but exactly)
        h.check(db, [300, 320, max(h.states)])
        for _ in range(50):
            h.step(db)
    finally:
        db.close()
    # persisted: after reopen (with or without retention="all") the watermark is 300
    for reopen_opts in (opts, {"memtable_bytes": 4096}):
        db = open_db(make_store(), **reopen_opts)
        try:
            assert db.retention_watermark == 300
            with pytest.raises(kvstore.SnapshotTooOld):
                db.snapshot(seq=299)
            h.check(db, [300, 301, 333, max(h.states)])
            db.compact()
            h.check(db, list(range(300, max(h.states) + 1, 4)))
            with pytest.raises(kvstore.SnapshotTooOld):
                db.snapshot(seq=250)
        finally:
            db.close()


def test_set_retention_watermark_on_a_store_without_retention(store_factory):
    make_store, _url = store_factory
    db = open_db(make_store(), memtable_bytes=4096)
    try:
        assert db.retention_watermark is None
        for i in range(100):
            db.put(b"k%d" % (i % 5), b"a%d" % i)
        db.compact()
        start = db.last_seq
        # asking for an old seq starts keeping from the oldest readable seq on
        w = db.set_retention_watermark(0)
        assert w == db.stats()["oldest_readable_seq"] == start
        assert db.retention_watermark == start
        states = {}
        model = {b"k%d" % i: b"a%d" % (95 + i) for i in range(5)}
        for i in range(100, 300):
            k = b"k%d" % (i % 5)
            model[k] = b"b%d" % i
            states[db.put(k, model[k])] = dict(model)
            if i % 40 == 0:
                db.compact()
        db.compact()
        for s, want in states.items():
            with db.snapshot(seq=s) as snap:
                assert dict(snap.scan()) == want
    finally:
        db.close()


def test_retention_by_age(store_factory):
    make_store, _url = store_factory
    clock = FakeClock(1_000_000.0)
    opts = dict(retention=100, memtable_bytes=4096, l0_compaction_trigger=2)
    db = open_db(make_store(), clock, **opts)
    states: dict[int, dict[bytes, bytes]] = {}
    model: dict[bytes, bytes] = {}
    try:
        for i in range(1, 301):  # write i at time t0 + i: seq i
            clock.advance(1.0)
            k = b"k%d" % (i % 10)
            model[k] = b"v%d" % i
            assert db.put(k, model[k], durable=False) == i
            states[i] = dict(model)
        # now = t0 + 300: everything written at t0 + 200 or later is within retention
        assert db.retention_watermark == 200
        db.compact()
        assert db.stats()["oldest_readable_seq"] == 200
        for s in (1, 50, 150, 199):
            with pytest.raises(kvstore.SnapshotTooOld):
                db.snapshot(seq=s)
        for s in range(200, 301):
            with db.snapshot(seq=s) as snap:
                assert dict(snap.scan()) == states[s], s
        # old versions are gone: 101 recent ones (+ the older version each key shows at 200)
        assert versions_in_tree(db) <= 101 + 10
        # time passes without writes: the watermark moves with it
        clock.advance(50)
        assert db.retention_watermark == 250
    finally:
        db.close()
    # the samples are persisted: after reopen the same clock gives the same watermark
    db = open_db(make_store(), clock, **opts)
    try:
        assert db.retention_watermark == 250
        with pytest.raises(kvstore.SnapshotTooOld):
            db.snapshot(seq=199)
        for s in (250, 260, 300):
            with db.snapshot(seq=s) as snap:
                assert dict(snap.scan()) == states[s]
    finally:
        db.close()


def test_retention_by_age_longer_than_the_sample_window():
    """retention=2000 s, one write per second for 3000 s: versions older than
    2000 s must become garbage (the watermark must reach ~seq 1000).

    A regression test: seq-time samples are kept in a deque of 1024 (one per
    second at most); when it forgot its oldest samples, a retention period
    spanning more than 1024 of them left ``_watermark`` at 0, so *nothing* was
    ever dropped. The deque now thins itself instead.
    """
    clock = FakeClock(1_000_000.0)
    db = open_db(MemoryStore("age-long"), clock, retention=2000, memtable_bytes=1 << 20)
    try:
        for i in range(3000):
            clock.advance(1.0)
            db.put(b"k%d" % (i % 10), b"v%d" % i, durable=False)
        db.compact()
        assert db.retention_watermark is not None
        assert 990 <= db.retention_watermark <= 1010, db.retention_watermark
        assert versions_in_tree(db) <= 2010 + 10
    finally:
        db.close()


# ---------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------
def test_checkpoint_create_list_delete_and_argument_errors(store_factory):
    make_store, _url = store_factory
    clock = FakeClock()
    db = open_db(make_store(), clock, memtable_bytes=4096)
    try:
        assert db.list_checkpoints() == []
        db.put(b"a", b"1")
        cp = db.create_checkpoint("first")
        assert cp["name"] == "first"
        assert cp["seq"] == db.last_seq == 1
        assert cp["expires_ms"] is None
        assert cp["created_ms"] == int(clock.t * 1000)
        assert isinstance(cp["manifest_id"], int)
        clock.advance(1)
        db.put(b"b", b"2", durable=False)  # not durable: the checkpoint flushes it first
        cp2 = db.create_checkpoint("second", expires_in=3600)
        assert cp2["seq"] == 2
        assert cp2["expires_ms"] == cp2["created_ms"] + 3_600_000
        assert [c["name"] for c in db.list_checkpoints()] == ["first", "second"]
        assert db.list_checkpoints()[0] == cp
        assert db.stats()["checkpoints"] == 2
        with pytest.raises(ValueError):
            db.create_checkpoint("first")
        with pytest.raises(ValueError):
            db.create_checkpoint("second", expires_in=10)
        for bad in (None, 1, b"cp", ["cp"]):
            with pytest.raises(TypeError):
                db.create_checkpoint(bad)
            with pytest.raises(TypeError):
                db.delete_checkpoint(bad)
        for bad in ("", "x" * 129, "a\nb", "tab\t", "nul\x00", "del\x7f"):
            with pytest.raises(ValueError):
                db.create_checkpoint(bad)
        for bad in ("10", True):
            with pytest.raises(TypeError):
                db.create_checkpoint("e", expires_in=bad)
        for bad in (0, -1, -0.5):
            with pytest.raises(ValueError):
                db.create_checkpoint("e", expires_in=bad)
        assert [c["name"] for c in db.list_checkpoints()] == ["first", "second"]
        # odd but valid names
        for name in ("x" * 128, "with space", "ünïcødé/✓", "."):
            clock.advance(1)
            assert db.create_checkpoint(name)["name"] == name
        with pytest.raises(kvstore.CheckpointNotFound, match="no checkpoint named 'nope'") as ei:
            db.delete_checkpoint("nope")
        assert isinstance(ei.value, KeyError) and ei.value.name == "nope"
        assert str(ei.value) == "no checkpoint named 'nope'"  # not KeyError's quoting
        db.delete_checkpoint("first")
        with pytest.raises(KeyError):
            db.delete_checkpoint("first")
        assert "first" not in [c["name"] for c in db.list_checkpoints()]
        # a deleted name can be used again
        db.put(b"c", b"3")
        assert db.create_checkpoint("first")["seq"] == 3
        names = [c["name"] for c in db.list_checkpoints()]
        assert names == ["second", "x" * 128, "with space", "ünïcødé/✓", ".", "first"]
    finally:
        db.close()
    # persisted
    with open_db(make_store()) as db:
        assert [c["name"] for c in db.list_checkpoints()] == names
    db.close()
    with pytest.raises(kvstore.ClosedError):
        db.list_checkpoints()


def test_checkpoint_reads_its_state_after_writes_compaction_and_gc(store_factory, tmp_path):
    make_store, url = store_factory
    db = open_db(make_store(), memtable_bytes=4096, background_compaction=False)
    rng = random.Random(5)
    model: dict[bytes, bytes] = {}
    try:
        for i in range(600):
            k = b"k%03d" % rng.randrange(200)
            if rng.random() < 0.15:
                db.delete(k, durable=False)
                model.pop(k, None)
            else:
                model[k] = rng.randbytes(rng.choice([5, 60, 200]))
                db.put(k, model[k], durable=False)
            if i == 300:
                db.compact()
        # in the memtable only (not flushed, not durable): the checkpoint includes it
        db.put(b"late", b"L", durable=False)
        model[b"late"] = b"L"
        expected = dict(model)
        cp = db.create_checkpoint("cp")
        early = kvstore.open_reader(url, checkpoint="cp")  # opened before the tree moves on
        # the live tree moves on
        for i in range(600):
            k = b"k%03d" % rng.randrange(250)
            if rng.random() < 0.3:
                db.delete(k, durable=False)
                model.pop(k, None)
            else:
                model[k] = b"new%d" % i
                db.put(k, model[k], durable=False)
        db.compact()
        db.collect_garbage(grace_seconds=0)
        assert dict(db.scan()) == model
        for reader in (early, kvstore.open_reader(url, checkpoint="cp")):
            with reader:
                assert reader.last_seq == cp["seq"]
                assert list(reader.scan()) == sorted(expected.items())
                assert list(reader.scan(reverse=True)) == sorted(expected.items(), reverse=True)
                assert list(reader.scan_prefix(b"k01")) == sorted(
                    (k, v) for k, v in expected.items() if k.startswith(b"k01")
                )
                for k in [b"k%03d" % i for i in range(250)] + [b"late", b"zzz"]:
                    assert reader.get(k) == expected.get(k)
                reader.refresh()  # a checkpoint is static
                assert dict(reader.scan()) == expected
                with pytest.raises(kvstore.ReadOnlyError):
                    reader.put(b"x", b"y")
        with pytest.raises(kvstore.CheckpointNotFound, match="'unknown'"):
            kvstore.open_reader(url, checkpoint="unknown")
        # a plain reader sees the live state
        with kvstore.open_reader(url) as live:
            assert dict(live.scan()) == model
    finally:
        db.close()
    # after reopen: still pinned, still readable, still exact after more GC
    with open_db(make_store(), memtable_bytes=4096) as db:
        db.put(b"k000", b"after reopen")
        db.compact()
        db.collect_garbage(grace_seconds=0)
        with kvstore.open_reader(url, checkpoint="cp") as reader:
            assert dict(reader.scan()) == expected


def test_checkpoint_pins_files_until_deleted(tmp_path):
    path = tmp_path / "db"
    db = open_db(LocalStore(path, fsync=False), memtable_bytes=4096, background_compaction=False)
    try:
        for i in range(400):
            db.put(b"k%03d" % (i % 150), b"v%d" % i * 10, durable=False)
        db.flush()
        db.put(b"extra", b"x")
        db.create_checkpoint("cp")
        pinned = tree_ids(db)
        assert len(pinned) >= 3
        assert sst_files(path) == pinned
        for i in range(400):
            db.put(b"k%03d" % (i % 150), b"w%d" % i * 10, durable=False)
        db.compact()
        db.collect_garbage(grace_seconds=0)
        live = tree_ids(db)
        assert not (live & pinned)  # compaction replaced every pinned SST in the live tree
        assert sst_files(path) == live | pinned  # ...but GC kept them for the checkpoint
        db.delete_checkpoint("cp")
        db.collect_garbage(grace_seconds=0)
        assert sst_files(path) == live
        with pytest.raises(KeyError):
            kvstore.open_reader(str(path), checkpoint="cp")
        assert db.stats()["gc_deleted_ssts"] >= len(pinned)
    finally:
        db.close()


def test_checkpoint_pins_survive_reopen_then_delete(tmp_path):
    path = tmp_path / "db"
    opts = dict(memtable_bytes=4096, background_compaction=False)
    with open_db(LocalStore(path, fsync=False), **opts) as db:
        for i in range(300):
            db.put(b"k%03d" % (i % 100), b"v%d" % i * 10, durable=False)
        db.create_checkpoint("cp")
        expected = dict(db.scan())
        pinned = tree_ids(db)
    with open_db(LocalStore(path, fsync=False), **opts) as db:
        for i in range(300):
            db.put(b"k%03d" % (i % 100), b"w%d" % i * 10, durable=False)
        db.compact()
        db.collect_garbage(grace_seconds=0)
        live = tree_ids(db)
        assert sst_files(path) == live | pinned
        with kvstore.open_reader(str(path), checkpoint="cp") as reader:
            assert dict(reader.scan()) == expected
    with open_db(LocalStore(path, fsync=False), **opts) as db:
        db.delete_checkpoint("cp")
        db.collect_garbage(grace_seconds=0)
        assert sst_files(path) == tree_ids(db)


def test_checkpoint_expiry(tmp_path):
    path = tmp_path / "db"
    clock = FakeClock()
    db = open_db(
        LocalStore(path, fsync=False), clock, memtable_bytes=4096, background_compaction=False
    )
    try:
        for i in range(200):
            db.put(b"k%03d" % (i % 80), b"v%d" % i * 8, durable=False)
        db.create_checkpoint("short", expires_in=10)
        db.create_checkpoint("forever")
        expected = dict(db.scan())
        pinned = tree_ids(db)
        for i in range(200):
            db.put(b"k%03d" % (i % 80), b"w%d" % i * 8, durable=False)
        db.compact()
        clock.advance(5)
        db.collect_garbage(grace_seconds=0)
        assert {c["name"] for c in db.list_checkpoints()} == {"short", "forever"}
        with kvstore.open_reader(str(path), checkpoint="short") as r:
            assert dict(r.scan()) == expected
        clock.advance(5.001)
        db.collect_garbage(grace_seconds=0)
        assert [c["name"] for c in db.list_checkpoints()] == ["forever"]
        with pytest.raises(KeyError):
            kvstore.open_reader(str(path), checkpoint="short")
        # "forever" still pins the same files
        assert sst_files(path) == tree_ids(db) | pinned
        db.delete_checkpoint("forever")
        db.collect_garbage(grace_seconds=0)
        assert sst_files(path) == tree_ids(db)
    finally:
        db.close()


# ---------------------------------------------------------------------------
# GC grace
# ---------------------------------------------------------------------------
def test_gc_respects_grace_seconds(tmp_path):
    path = tmp_path / "db"
    clock = FakeClock()
    db = open_db(
        LocalStore(path, fsync=False),
        clock,
        memtable_bytes=4096,
        background_compaction=False,
        gc_grace_seconds=30,
    )
    try:
        for i in range(300):
            db.put(b"k%03d" % (i % 100), b"v%d" % i * 10, durable=False)
        db.flush()
        before = tree_ids(db)
        manifests_before = len(os.listdir(path / "manifest"))
        db.compact()  # also runs GC, with the 30 s grace: nothing goes yet
        after = tree_ids(db)
        assert before and not (before & after)
        assert sst_files(path) == before | after
        assert db.stats()["obsolete_ssts"] == len(before)
        clock.advance(29)
        assert db.collect_garbage() == {"ssts": 0, "manifests": 0}
        assert sst_files(path) == before | after
        assert len(os.listdir(path / "manifest")) >= manifests_before
        clock.advance(2)
        got = db.collect_garbage()
        assert got["ssts"] == len(before)
        assert sst_files(path) == after
        assert db.stats()["obsolete_ssts"] == 0
        # manifests: first seen superseded at the GC 31 s ago (compact's GC) or now
        clock.advance(31)
        db.collect_garbage()
        # the current manifest, and the one with which this writer claimed the store
        # (kept for the fence probe of any older writer still running)
        ids = (db.manifest.id, *db.manifest.claims)
        kept = {paths.manifest_name(i).split("/")[1] for i in ids}
        assert set(os.listdir(path / "manifest")) == kept and len(kept) == 2
        # an explicit grace_seconds overrides the option
        for i in range(300):
            db.put(b"k%03d" % (i % 100), b"w%d" % i * 10, durable=False)
        db.flush()
        replaced = tree_ids(db)  # the run and the new L0s
        db.compact()
        newer = tree_ids(db)
        assert not (replaced & newer)
        clock.advance(1)
        assert db.collect_garbage(grace_seconds=5)["ssts"] == 0
        assert sst_files(path) == replaced | newer
        clock.advance(5)
        assert db.collect_garbage(grace_seconds=5)["ssts"] == len(replaced)
        assert sst_files(path) == newer
        with pytest.raises(TypeError):
            db.collect_garbage(5)  # keyword only
    finally:
        db.close()
    with kvstore.open(str(path), **FAST) as db:
        assert len(dict(db.scan())) == 100


@pytest.mark.parametrize("how", ["deleted", "expired"])
def test_files_of_a_removed_checkpoint_get_a_fresh_grace_period(tmp_path, how):
    """SSTs a checkpoint pinned were replaced long ago; once the checkpoint goes, a
    reader still reading it gets the full grace period before its files go."""
    path = tmp_path / "db"
    clock = FakeClock()
    db = open_db(
        LocalStore(path, fsync=False),
        clock,
        memtable_bytes=4096,
        background_compaction=False,
        gc_grace_seconds=30,
    )
    try:
        for i in range(200):
            db.put(b"k%03d" % (i % 100), b"v%d" % i * 10, durable=False)
        db.flush()
        db.create_checkpoint("cp", expires_in=100 if how == "expired" else None)
        pinned = tree_ids(db)
        for i in range(200):
            db.put(b"k%03d" % (i % 100), b"w%d" % i * 10, durable=False)
        db.compact()  # replaces every pinned SST: queued as obsolete, kept while pinned
        assert not (pinned & tree_ids(db))
        clock.advance(99)  # far past the grace period, the checkpoint still there
        db.collect_garbage()  # deletes the replaced SSTs nothing pins
        assert sst_files(path) == pinned | tree_ids(db)
        if how == "deleted":
            db.delete_checkpoint("cp")
        else:
            clock.advance(2)  # expires: the next GC removes it
        assert db.collect_garbage()["ssts"] == 0, "deleted without a fresh grace period"
        assert pinned <= sst_files(path) and db.list_checkpoints() == []
        clock.advance(29)
        assert db.collect_garbage()["ssts"] == 0
        clock.advance(2)
        assert db.collect_garbage()["ssts"] == len(pinned)
        assert not (pinned & sst_files(path))
    finally:
        db.close()


def test_gc_deletes_files_left_by_a_crash_only_after_reopen_and_grace(tmp_path):
    path = tmp_path / "db"
    with open_db(LocalStore(path, fsync=False), memtable_bytes=4096) as db:
        for i in range(100):
            db.put(b"k%03d" % i, b"v" * 50, durable=False)
    # an SST nothing references (as if a compaction crashed after uploading it)
    orphan = path / "sst" / "01ORPHAN00000000000000000.sst"
    orphan.write_bytes(b"junk")
    clock = FakeClock()
    with open_db(LocalStore(path, fsync=False), clock, gc_grace_seconds=10) as db:
        assert orphan.exists()
        db.collect_garbage()
        assert orphan.exists()
        clock.advance(11)
        db.collect_garbage()
        assert not orphan.exists()
        assert len(dict(db.scan())) == 100
