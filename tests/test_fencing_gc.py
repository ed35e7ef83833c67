"""Fencing and garbage collection: a fenced writer never destroys the store.

Regression tests for the fixes of "fencing and GC" (docs/format/manifest.md,
``claims``; docs/architecture.md, "Manifest, recovery and fencing"). Each test
runs against real stores (``MemoryStore`` and ``LocalStore``) and proves:

1. a writer fenced without knowing it (it has not written since) raises
   :class:`kvstore.FencedError` from ``collect_garbage()`` and deletes none of
   the new writer's SSTs or manifests; the new writer's data survives a reopen;
2. the same through the old writer's background compaction loop, which runs
   GC on its own;
3. the fence probe survives manifest GC: after the new writer collected its
   old manifests (grace 0), the old writer's next write, durable (local: the
   epoch cell, then a listing) or not (memory: the probe of manifest id+1,
   which is the new writer's claim and is kept), raises ``FencedError`` and
   is absent after a reopen; also along a chain of three writers;
4. manifest claims: every open appends the id of its claim manifest, at
   most ``MAX_CLAIMS`` are kept, GC keeps exactly the claims, the current
   manifest and checkpoint manifests; the ``claims`` key round-trips, is left
   out when empty (byte-identical to the encoding before claims existed), and
   ``Manifest.check`` / ``Manifest.decode`` reject claims that are not
   strictly ascending ids in ``1..id``;
5. a reader's ``refresh()`` never returns a torn view (a view that is no
   prefix of the writer's history) or steps backwards while the writer
   flushes and collects manifests and WAL with grace 0, even when the
   writer's GC has deleted manifest ``m+1`` while the reader replayed the
   WAL of manifest ``m``;
6. the retention floor is persisted: a watermark written to a manifest never
   lies below versions already dropped, so ``snapshot(seq=)`` below it stays
   ``SnapshotTooOld`` across reopens; recovery with age retention keeps the
   replayed versions it promised; ``set_retention_watermark(0)`` returns the
   floor.
"""

from __future__ import annotations

import json
import logging
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import pytest
from crc32c import crc32c

import kvstore
import kvstore.format.manifest as manifest_format
import kvstore.reader
from kvstore import paths
from kvstore.errors import CorruptionError
from kvstore.format.manifest import Manifest
from kvstore.manifest_store import ManifestStore
from kvstore.objstore import LocalStore, MemoryStore

FAST: dict[str, Any] = {"fsync": False}
#: no background threads: every store call happens on the test's thread
QUIET: dict[str, Any] = {**FAST, "background_flush": False, "background_compaction": False}


@pytest.fixture(autouse=True)
def _quiet_kvstore_logs() -> Iterator[None]:
    logger = logging.getLogger("kvstore")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(old)


StoreFactory = Callable[[], Any]


def _factory(kind: str, tmp_path: Any) -> Iterator[StoreFactory]:
    """Yields make_store(): a handle on the same underlying store on every call (a
    fresh LocalStore per call on local, as a second process would have)."""
    if kind == "memory":
        name = f"fencing-gc-{uuid.uuid4().hex}"
        yield lambda: MemoryStore.named(name)
        MemoryStore.drop(name)
    else:
        path = tmp_path / "db"
        yield lambda: LocalStore(path, fsync=False)


@pytest.fixture(params=["memory", "local"])
def make_store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[StoreFactory]:
    yield from _factory(request.param, tmp_path)


def open_db(store: Any, **opts: Any) -> kvstore.DB:
    return kvstore.open(store, **{**QUIET, **opts})


def close_zombie(db: kvstore.DB) -> None:
    """Close a writer that was fenced (its close may fail; nothing of it matters)."""
    with suppress(Exception):
        db.close()


def listing(store: Any, prefix: str) -> set[str]:
    return set(store.list(prefix))


LIVENESS_S = 30.0  # only catches a hang: the waits return as soon as their event happens


def wait_until(cond: Callable[[], bool], deadline_s: float = LIVENESS_S) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


# ---------------------------------------------------------------------------
# 1, 2. a fenced writer's GC deletes nothing of the new writer's
# ---------------------------------------------------------------------------
def test_fenced_writer_gc_raises_and_deletes_nothing(make_store: StoreFactory) -> None:
    a = open_db(make_store(), gc_grace_seconds=0)
    b = c = None
    try:
        a.put(b"k0", b"v0")
        a.flush()
        # fences a, which does not know yet (takeover: a local store refuses otherwise)
        b = open_db(make_store(), gc_grace_seconds=0, takeover=True)
        for i in range(5):
            b.put(b"k%d" % i, b"new%d" % i)
        b.flush()
        store = make_store()
        live = {paths.sst_name(s.id) for s in b.manifest.all_ssts()}
        ssts, manifests = listing(store, paths.SST_DIR), listing(store, paths.MANIFEST_DIR)
        assert live and live <= ssts

        with pytest.raises(kvstore.FencedError):
            a.collect_garbage()
        assert listing(store, paths.SST_DIR) == ssts
        assert listing(store, paths.MANIFEST_DIR) == manifests
        with pytest.raises(kvstore.FencedError):  # and it stays fenced
            a.put(b"zombie", b"z", durable=False)
        close_zombie(a)

        assert b.get(b"k1") == b"new1"
        b.close()
        c = open_db(make_store())
        assert dict(c.scan()) == {b"k%d" % i: b"new%d" % i for i in range(5)}
    finally:
        close_zombie(a)
        for db in (b, c):
            if db is not None:
                db.close()


def test_fenced_writer_background_gc_deletes_nothing(make_store: StoreFactory) -> None:
    # a runs its compaction loop (which also collects garbage); grace 0 so a stray
    # deletion would happen at once
    a = open_db(make_store(), background_compaction=True, gc_grace_seconds=0)
    b = c = None
    try:
        a.put(b"k0", b"v0")
        a.flush()
        b = open_db(make_store(), takeover=True)  # fences a; a stays idle
        for i in range(5):
            b.put(b"k%d" % i, b"new%d" % i)
        b.flush()
        store = make_store()
        live = {paths.sst_name(s.id) for s in b.manifest.all_ssts()}
        manifests = listing(store, paths.MANIFEST_DIR)
        assert live <= listing(store, paths.SST_DIR)

        def gone() -> bool:
            return not live <= listing(store, paths.SST_DIR)

        # The loop lists the store for GC every 300 s when idle: pretend 5 minutes passed.
        a.parts.gc.last_listing -= 301
        a.parts.compactor.wake()
        assert wait_until(lambda: a.parts.health.fenced is not None or gone()), (
            "a's loop never ran GC"
        )
        assert not gone(), "the fenced writer's background GC deleted the new writer's SSTs"
        assert listing(store, paths.MANIFEST_DIR) >= manifests
        assert isinstance(a.parts.health.fenced, kvstore.FencedError)
        assert a.parts.compactor is not None
        a.parts.compactor.join(LIVENESS_S)
        assert not a.parts.compactor.alive()  # the loop stops once fenced
        close_zombie(a)

        assert b.get(b"k1") == b"new1"
        b.close()
        c = open_db(make_store())
        assert dict(c.scan()) == {b"k%d" % i: b"new%d" % i for i in range(5)}
    finally:
        close_zombie(a)
        for db in (b, c):
            if db is not None:
                db.close()


# ---------------------------------------------------------------------------
# 3. the fence probe survives the new writer's manifest GC
# ---------------------------------------------------------------------------
#: (backend, durable): on local the epoch cell tells the old writer (durable writes
#: check after the journal sync, non-durable ones on every write); on memory there is
#: no cell, non-durable writes probe manifest id+1 (durable ones also hit the fence
#: object of the object WAL, which caught this before the fix too)
FENCE_CASES = [
    pytest.param("local", True, id="local-durable"),
    pytest.param("local", False, id="local-nondurable"),
    pytest.param("memory", False, id="memory-probe"),
]


@pytest.mark.parametrize("kind, durable", FENCE_CASES)
def test_fence_probe_survives_manifest_gc(kind: str, durable: bool, tmp_path: Any) -> None:
    for make_store in _factory(kind, tmp_path):
        a = open_db(make_store())
        b = c = None
        try:
            a.put(b"k", b"a1")
            b = open_db(make_store(), takeover=True)  # fences a
            b.put(b"k", b"b1")
            b.collect_garbage(grace_seconds=0)  # a's manifests (and a's id+1 before the fix)
            assert a.manifest.id not in {
                paths.parse_manifest_name(n) for n in make_store().list(paths.MANIFEST_DIR)
            }
            with pytest.raises(kvstore.FencedError):
                a.put(b"lost", b"acknowledged?", durable=durable)
            with pytest.raises(kvstore.FencedError):
                a.put(b"lost2", b"acknowledged?", durable=not durable)
            close_zombie(a)
            b.close()
            c = open_db(make_store())
            assert c.get(b"lost") is None and c.get(b"lost2") is None
            assert c.get(b"k") == b"b1"
        finally:
            close_zombie(a)
            for db in (b, c):
                if db is not None:
                    db.close()


@pytest.mark.parametrize("kind, durable", FENCE_CASES)
def test_fence_probe_along_a_chain_of_writers(kind: str, durable: bool, tmp_path: Any) -> None:
    for make_store in _factory(kind, tmp_path):
        dbs: list[kvstore.DB] = []
        try:
            for name in (b"a", b"b", b"c"):  # each fences the one before
                db = open_db(make_store(), takeover=True)
                dbs.append(db)
                db.put(b"k", name)
                db.put(b"from-" + name, b"1")
                db.collect_garbage(grace_seconds=0)
            a, b, c = dbs
            with pytest.raises(kvstore.FencedError):
                a.put(b"lost-a", b"x", durable=durable)
            with pytest.raises(kvstore.FencedError):
                b.put(b"lost-b", b"x", durable=durable)
            c.put(b"k", b"c2")
            close_zombie(a)
            close_zombie(b)
            c.close()
            dbs.append(d := open_db(make_store()))
            assert dict(d.scan()) == {
                b"k": b"c2",
                b"from-a": b"1",
                b"from-b": b"1",
                b"from-c": b"1",
            }
        finally:
            for db in dbs[:2]:
                close_zombie(db)
            for db in dbs[2:]:
                db.close()


# ---------------------------------------------------------------------------
# 4. manifest claims
# ---------------------------------------------------------------------------
def test_each_open_appends_its_claim_capped_and_gc_keeps_them(make_store: StoreFactory) -> None:
    max_claims = manifest_format.MAX_CLAIMS
    mstore = ManifestStore(make_store())
    expected: list[int] = []
    epochs: list[int] = []
    for session in range(max_claims + 3):
        db = open_db(make_store(), gc_grace_seconds=0)
        try:
            m = db.manifest
            claim = m.id - 1  # the claim, then the manifest after the WAL replay
            expected = [*expected, claim][-max_claims:]
            assert m.claims == tuple(expected)
            claimed = mstore.load(claim)
            assert claimed.writer_epoch == db.parts.manifests.epoch == m.writer_epoch
            assert claimed.claims == tuple(expected)
            epochs.append(db.parts.manifests.epoch)
            db.put(b"k%02d" % session, b"v")
            db.flush()
            if session == max_claims + 2:
                cp = db.create_checkpoint("cp")
                db.put(b"after-cp", b"v")
                db.flush()
                db.collect_garbage(grace_seconds=0)
                current = db.manifest
                assert current.claims == tuple(expected)  # flushes keep them
                want = {current.id, *expected, int(cp["manifest_id"])}
                assert len(want) == max_claims + 2
                got = {paths.parse_manifest_name(n) for n in make_store().list(paths.MANIFEST_DIR)}
                assert got == want
            else:
                db.collect_garbage(grace_seconds=0)
        finally:
            db.close()
    assert epochs == sorted(set(epochs))
    # claims that fell off the list were collected; every kept one still decodes
    for c in expected:
        assert mstore.load(c).writer_epoch in epochs


def manifest_envelope(body: bytes) -> bytes:
    """The documented envelope: the CRC covers the 16 header bytes before it and the body."""
    head = struct.pack("<8sHHI", b"KVMANIF1", 1, 0, len(body))
    return head + struct.pack("<I", crc32c(head + body)) + body


def manifest_body(m: Manifest, **extra: Any) -> bytes:
    """The JSON body as encoded before claims existed, plus ``extra`` keys."""
    d = {
        "id": m.id,
        "writer_epoch": m.writer_epoch,
        "last_flushed_seq": m.last_flushed_seq,
        "wal_replay_from": m.wal_replay_from,
        "l0": [s.to_json() for s in m.l0],
        "runs": [[s.to_json() for s in run] for run in m.runs],
        "retention_seq": m.retention_seq,
        "seq_times": [list(x) for x in m.seq_times],
        "checkpoints": m.checkpoints,
        "created_ms": m.created_ms,
        "writer_nonce": m.writer_nonce,
        **extra,
    }
    return json.dumps(d, separators=(",", ":"), sort_keys=True).encode()


BASE = Manifest(
    id=9,
    writer_epoch=4,
    last_flushed_seq=12,
    wal_replay_from=3,
    retention_seq=5,
    seq_times=((1, 1000), (12, 2000)),
    checkpoints={"cp": {"manifest_id": 6, "seq": 10}},
    created_ms=123456,
    writer_nonce="0123456789abcdef",
)


def test_manifest_claims_round_trip_and_absent_when_empty() -> None:
    # decode of a body that carries claims (as a writer of this version writes it)
    data = manifest_envelope(manifest_body(BASE, claims=[2, 6, 8]))
    m = Manifest.decode(data)
    assert m.claims == (2, 6, 8)
    assert m.encode() == data  # canonical
    assert Manifest.decode(m.encode()) == m
    for claims in [(9,), (1, 9), tuple(range(1, 10))]:
        mm = BASE.evolve(claims=claims)
        mm.check()
        assert Manifest.decode(mm.encode()) == mm
    # without claims: no "claims" key, byte-identical to the encoding before claims
    assert BASE.claims == ()
    assert b'"claims"' not in BASE.encode()
    assert BASE.encode() == manifest_envelope(manifest_body(BASE))
    assert Manifest.decode(BASE.encode()) == BASE


BAD_CLAIMS = [
    pytest.param((7, 5), id="descending"),
    pytest.param((5, 5), id="duplicate"),
    pytest.param((0, 3), id="zero"),
    pytest.param((3, 10), id="above-id"),
    pytest.param((-1,), id="negative"),
]


@pytest.mark.parametrize("claims", BAD_CLAIMS)
def test_manifest_check_and_decode_reject_bad_claims(claims: tuple[int, ...]) -> None:
    BASE.check()
    with pytest.raises(AssertionError, match="claims"):
        BASE.evolve(claims=claims).check()
    # a well-formed, correctly checksummed body with such claims is corruption
    data = manifest_envelope(manifest_body(BASE, claims=list(claims)))
    with pytest.raises(CorruptionError, match=r"invariant.*claims"):
        Manifest.decode(data, where="m")


# ---------------------------------------------------------------------------
# 5. a reader never sees a torn view while the writer flushes and GCs (grace 0)
# ---------------------------------------------------------------------------
def test_reader_refresh_never_torn_under_grace_zero_gc(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer: iteration i puts a=i, b=i, n<i>; every 25 iterations it flushes
    and collects garbage with grace 0. Every prefix of that history has
    a >= b >= count(n*) >= a - 1. The reader's first WAL replay of each refresh
    waits until the writer has done three more flush+GC cycles, so the manifest
    after the one it loaded is gone (and so is the WAL it pointed to)."""
    db = open_db(
        make_store(),
        background_compaction=True,
        l0_compaction_trigger=2,
        gc_grace_seconds=0,
    )
    cond = threading.Condition()
    progress = {"cycles": 0, "done": False}
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            i = 0
            while not stop.is_set() and i < 20_000:
                i += 1
                db.put(b"a", b"%08d" % i)
                db.put(b"b", b"%08d" % i)
                db.put(b"n%08d" % i, b"x")
                if i % 25 == 0:
                    db.flush()
                    db.collect_garbage(grace_seconds=0)
                    with cond:
                        progress["cycles"] += 1
                        cond.notify_all()
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            with cond:
                progress["done"] = True
                cond.notify_all()

    real_replay = kvstore.reader.replay
    armed = threading.Event()

    def slow_replay(*args: Any, **kwargs: Any) -> Any:
        if armed.is_set():  # the first attempt of a refresh only
            armed.clear()
            with cond:
                target = progress["cycles"] + 3
                cond.wait_for(lambda: progress["cycles"] >= target or progress["done"], 1.0)
        return real_replay(*args, **kwargs)

    thread = threading.Thread(target=writer, name="fencing-gc-writer", daemon=True)
    reader = None
    refreshes = torn = backwards = 0
    try:
        reader = kvstore.open_reader(make_store())
        monkeypatch.setattr(kvstore.reader, "replay", slow_replay)
        thread.start()
        last = 0
        end = time.monotonic() + 1.5
        while time.monotonic() < end and not progress["done"]:
            armed.set()
            reader.refresh()
            refreshes += 1
            a = int(reader.get(b"a") or 0)
            b = int(reader.get(b"b") or 0)
            count = sum(1 for _ in reader.scan_prefix(b"n"))
            if not a >= b >= count >= a - 1:
                torn += 1
            if a < last:
                backwards += 1
            last = a
    finally:
        stop.set()
        with cond:
            cond.notify_all()
        thread.join(10)
        if reader is not None:
            reader.close()
        db.close()
    assert not thread.is_alive()
    assert not errors, errors
    assert refreshes >= 5, refreshes
    assert (torn, backwards) == (0, 0), (
        f"{torn} torn views and {backwards} backward steps in {refreshes} refreshes"
    )


# ---------------------------------------------------------------------------
# 6. the retention floor is persisted
# ---------------------------------------------------------------------------
def test_floor_of_a_store_written_without_retention_survives_reopens(
    make_store: StoreFactory,
) -> None:
    db = open_db(make_store())
    s1 = db.put(b"k", b"v1")
    db.put(b"k", b"v2")
    db.close()  # the flush keeps only k@2: k@1 is gone
    for session in (2, 3):
        db = open_db(make_store(), retention=3600)
        try:
            with pytest.raises(kvstore.SnapshotTooOld):
                db.snapshot(seq=s1)
            w = db.retention_watermark
            assert w is not None and w >= db.parts.retention.floor_seq > s1, (
                session,
                w,
                db.parts.retention.floor_seq,
            )
            with db.snapshot(seq=db.parts.retention.floor_seq) as snap:
                assert snap.get(b"k") == b"v2"
            db.put(b"x%d" % session, b"1")
            db.flush()  # persists a watermark: never below the floor
            assert db.manifest.retention_seq is not None
            assert db.manifest.retention_seq >= db.parts.retention.floor_seq > s1
        finally:
            db.close()


def test_age_retention_keeps_replayed_versions_after_a_crash(make_store: StoreFactory) -> None:
    crashed = open_db(make_store(), retention=3600)
    try:
        s1 = crashed.put(b"k", b"v1")
        crashed.put(b"k", b"v2")
        # the process dies before any flush: k@1 and k@2 are only in the WAL. The
        # handle is abandoned (no close); the next open fences it.
        for session in (2, 3):
            db = open_db(make_store(), retention=3600, takeover=True)
            try:
                with db.snapshot(seq=s1) as snap:
                    assert snap.get(b"k") == b"v1", session
                assert db.get(b"k") == b"v2"
                db.put(b"x%d" % session, b"1")
                db.flush()
            finally:
                db.close()
    finally:
        close_zombie(crashed)


def test_set_retention_watermark_zero_returns_the_floor(make_store: StoreFactory) -> None:
    db = open_db(make_store())
    db.put(b"k", b"v1")
    db.put(b"k", b"v2")
    db.close()
    db = open_db(make_store(), retention=3600)
    try:
        db.put(b"x", b"1")
        db.flush()  # persists the age watermark (it would be 0: nothing is an hour old)
        floor = db.parts.retention.floor_seq
        assert floor >= 2
        assert db.set_retention_watermark(0) == floor
        assert db.retention_watermark == floor
        with pytest.raises(kvstore.SnapshotTooOld):
            db.snapshot(seq=floor - 1)
    finally:
        db.close()
    db = open_db(make_store(), retention=3600)
    try:
        assert db.set_retention_watermark(0) >= floor
        with pytest.raises(kvstore.SnapshotTooOld):
            db.snapshot(seq=floor - 1)
    finally:
        db.close()
