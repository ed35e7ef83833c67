"""Crash-point sweep over ``db.compact()`` and ``db.collect_garbage()``.

A template store is built with several L0 SSTs, two sorted runs, tombstones,
overwrites and a checkpoint (whose SSTs the compaction replaces in the live
tree). Then, for every ``k``, a clone of it is opened on a
:class:`FaultyStore`, a few more durable writes are made (in the WAL, not yet
flushed), and the store crashes before the k-th mutation of
``db.compact()`` followed by ``db.collect_garbage(grace_seconds=0)``: the
memtable flush (SST, manifest, WAL deletion), the compaction (output SSTs,
manifest), GC (SST and manifest deletions). Background threads are off so the
mutation order is deterministic.

After each crash the *inner* store is reopened and must

* hold exactly the model (every write was durable);
* still serve the checkpoint, with its exact content, through
  ``open_reader(store, checkpoint="cp")``;
* compact and collect garbage cleanly: one sorted run, and afterwards the
  ``sst/`` listing is exactly the live SSTs plus the checkpoint's, the
  ``manifest/`` listing the current manifest plus the checkpoint's; after the
  checkpoint is deleted, only the live SSTs remain.
"""

from __future__ import annotations

import logging
import random
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

import kvstore
from kvstore import paths
from kvstore.compaction import CompactionPolicy, plan
from kvstore.objstore import FaultyStore, LocalStore, MemoryStore, SimulatedCrash

OPTS: dict[str, Any] = dict(
    fsync=False,
    memtable_bytes=4096,
    block_bytes=512,
    background_flush=False,
    background_compaction=False,
    seed=7,
)


@pytest.fixture(autouse=True)
def _quiet_kvstore_logs():
    logger = logging.getLogger("kvstore")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(old)


class Stores:
    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.root = root
        self.n = 0

    def new(self) -> Any:
        self.n += 1
        if self.kind == "memory":
            return MemoryStore(f"cc-{self.n}")
        return LocalStore(self.root / f"s{self.n:04d}", fsync=False)

    def clone(self, store: Any) -> Any:
        new = self.new()
        if self.kind == "memory":
            for name, data in store.raw().items():
                new.put(name, data)
        else:
            shutil.rmtree(new.root)
            shutil.copytree(store.root, new.root)
        return new

    def discard(self, store: Any) -> None:
        if self.kind == "local":
            shutil.rmtree(store.root, ignore_errors=True)


class Writer:
    """Random durable puts, deletes and batches over a small key space."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.model: dict[bytes, bytes] = {}

    def ops(self, db: kvstore.DB, n: int, tag: bytes) -> None:
        rng = self.rng
        for i in range(n):
            r = rng.random()
            k = b"key%03d" % rng.randrange(120)
            if r < 0.6:
                v = tag + b"-%d-" % i + rng.randbytes(rng.choice([4, 40, 160]))
                db.put(k, v)
                self.model[k] = v
            elif r < 0.8:
                db.delete(k)
                self.model.pop(k, None)
            else:
                batch = kvstore.WriteBatch()
                for kk in {b"key%03d" % rng.randrange(120) for _ in range(4)}:
                    if rng.random() < 0.3:
                        batch.delete(kk)
                        self.model.pop(kk, None)
                    else:
                        v = tag + b"-b%d" % i
                        batch.put(kk, v)
                        self.model[kk] = v
                db.write(batch)


def build_template(stores: Stores) -> tuple[Any, dict, dict, int, frozenset[str]]:
    inner = stores.new()
    w = Writer(1)
    db = kvstore.open(inner, **OPTS)
    try:
        w.ops(db, 120, b"a")
        db.compact()  # the bottom run
        w.ops(db, 80, b"b")
        db.flush()
        m = db.manifest
        p = plan(m.l0, m.runs, CompactionPolicy(l0_compaction_trigger=2))
        assert p is not None and p.l0_ids and not p.bottom
        db.parts.compactor.compact_once(p)  # a second run in front of the first
        w.ops(db, 60, b"c")
        db.flush()
        cp = db.create_checkpoint("cp")
        cp_state = dict(db.scan())
        assert cp_state == w.model
        pinned = frozenset(s.id for s in db.manifest.all_ssts())
        w.ops(db, 60, b"d")  # overwrites and deletes of checkpointed keys
        db.flush()
        m = db.manifest
        assert len(m.runs) == 2 and len(m.l0) >= 2, (len(m.runs), len(m.l0))
        assert sum(s.tombstones for s in m.all_ssts()) > 0
        # start the sweep from a clean listing: only what it obsoletes is deleted
        db.collect_garbage(grace_seconds=0)
    finally:
        db.close()
    return inner, dict(w.model), cp_state, int(cp["seq"]), pinned


def listing(store: Any, prefix: str) -> set[str]:
    return set(store.list(prefix))


def check_recovered(
    inner: Any, model: dict, cp_state: dict, cp_seq: int, pinned: frozenset[str]
) -> None:
    db = kvstore.open(inner, **OPTS)
    try:
        got = dict(db.scan())
        assert got == model, f"{len(got)} keys recovered, {len(model)} expected"
        for k in list(model)[:20]:
            assert db.get(k) == model[k]
        with kvstore.open_reader(inner, checkpoint="cp") as r:
            assert r.last_seq == cp_seq
            assert dict(r.scan()) == cp_state
        # compacts and collects garbage cleanly
        db.compact()
        db.collect_garbage(grace_seconds=0)
        s = db.stats()
        assert (s["l0_ssts"], s["sorted_runs"]) == (0, 1)
        assert dict(db.scan()) == model
        live = {m.id for m in db.manifest.all_ssts()}
        assert listing(inner, paths.SST_DIR) == {paths.sst_name(i) for i in live | pinned}
        cp_manifest = int(db.manifest.checkpoints["cp"]["manifest_id"])
        assert listing(inner, paths.MANIFEST_DIR) == {
            paths.manifest_name(db.manifest.id),
            paths.manifest_name(cp_manifest),
            *(paths.manifest_name(c) for c in db.manifest.claims),  # fence probes find them
        }
        assert len(db.manifest.claims) >= 2  # the store was opened more than once
        with kvstore.open_reader(inner, checkpoint="cp") as r:
            assert dict(r.scan()) == cp_state
        db.delete_checkpoint("cp")
        db.collect_garbage(grace_seconds=0)
        assert listing(inner, paths.SST_DIR) == {paths.sst_name(i) for i in live}
    finally:
        db.close()
    with kvstore.open(inner, **OPTS) as db:
        assert dict(db.scan()) == model


@pytest.mark.parametrize("kind", ["memory", "local"])
@pytest.mark.parametrize("grace", [0.0, 60.0], ids=["grace0", "grace60"])
def test_crash_sweep_compact_and_gc(tmp_path, kind, grace):
    stores = Stores(kind, tmp_path)
    template, base_model, cp_state, cp_seq, pinned = build_template(stores)
    opts = {**OPTS, "gc_grace_seconds": grace}
    torn = kind == "local"  # a crashing put leaves a temp file behind

    def attempt(k: int | None) -> tuple[Any, dict, bool, FaultyStore, int]:
        inner = stores.clone(template)
        faulty = FaultyStore(inner, torn=torn)
        db = kvstore.open(faulty, **opts)
        w = Writer(2)
        w.model = dict(base_model)
        w.ops(db, 15, b"e")  # durable, in the WAL: compact() flushes them first
        m0 = faulty.mutations
        if k is not None:
            faulty.crash_before = m0 + k
        crashed = False
        try:
            db.compact()
            db.collect_garbage(grace_seconds=0)
        except SimulatedCrash:
            crashed = True
        done = faulty.mutations - m0  # those of compact() + collect_garbage()
        if k is not None and not crashed:
            faulty.crash_before = None  # the sweep covers compaction and GC, not close
        try:
            db.close()
        except BaseException:
            assert crashed, "close failed without a crash"
        return inner, w.model, crashed, faulty, done

    # a run without a crash counts the mutations of compact() + collect_garbage()
    inner, model, crashed, faulty, n = attempt(None)
    assert not crashed
    ops = [op for k, op, _ in faulty.log]
    names = [name for _, _, name in faulty.log[-n:]] if n else []
    assert any(x.startswith("sst/") for x in names), names
    assert any(x.startswith("manifest/") for x in names), names
    assert "delete" in ops[-n:], ops[-n:]
    check_recovered(inner, model, cp_state, cp_seq, pinned)
    stores.discard(inner)
    assert n > 10, f"only {n} mutations in compact + GC"

    failures: list[str] = []
    points = 0
    for k in range(1, n + 2):
        inner, model, crashed, faulty, _ = attempt(k)
        assert crashed == (k <= n), (k, n)
        points += 1
        try:
            check_recovered(inner, model, cp_state, cp_seq, pinned)
        except Exception as exc:
            where = faulty.log[-1] if faulty.log else None
            failures.append(f"k={k} (crash at {where}): {type(exc).__name__}: {exc}"[:800])
        stores.discard(inner)
    assert points > 10
    assert not failures, f"{len(failures)} of {points} crash points failed:\n" + "\n".join(
        failures[:8]
    )


class UnreadableAfterFailedManifest(MemoryStore):
    """A manifest create lands but reports an error, and reading it back fails too."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.armed = False
        self.landed: str | None = None

    def put_if_absent(self, name: str, data: bytes) -> None:
        super().put_if_absent(name, data)
        if self.armed and name.startswith(paths.MANIFEST_DIR):
            self.armed, self.landed = False, name
            raise TimeoutError("PUT timed out (but landed)")

    def get(self, name: str) -> bytes:
        if name == self.landed:
            raise ConnectionResetError("read-back failed")
        return super().get(name)


def test_manifest_write_of_unknown_outcome_stops_the_writer_and_keeps_its_files():
    """Compaction's manifest lands, but the writer cannot learn that: it must not hand
    the new SSTs to GC (the store references them) nor write on from a stale manifest.
    The handle stops with KvError; a reopen reads the landed manifest, data intact."""
    store = UnreadableAfterFailedManifest(f"unknown-{uuid.uuid4()}")
    db = kvstore.open(store, **OPTS, gc_grace_seconds=0)
    model = {}
    try:
        for i in range(4):
            for k in (b"k", b"k%d" % i):
                db.put(k, b"v%d" % i)
                model[k] = b"v%d" % i
            db.flush()
        store.armed = True
        with pytest.raises(TimeoutError):
            db.compact()
        assert store.landed is not None
        assert db.stats()["stopped"] is not None and "unknown" in db.stats()["stopped"]
        for call in (lambda: db.put(b"x", b"y"), db.flush, db.collect_garbage, db.compact):
            with pytest.raises(kvstore.KvError, match="open the store again"):
                call()
        assert db.get(b"k") == b"v3"  # reads still work
        ssts_on_store = set(store.list(paths.SST_DIR))
    finally:
        db.close()  # no flush, no error: the WAL holds what is not in an SST
    store.landed = None  # the read-back works again, as after a restart
    assert set(store.list(paths.SST_DIR)) == ssts_on_store  # nothing was deleted
    with kvstore.open(store, **OPTS) as db:
        assert dict(db.scan()) == model
        assert db.stats()["sorted_runs"] == 1  # the compaction's manifest is the one read


class SstUploadLandsButFails(MemoryStore):
    """The next SST upload lands, then reports an error (once)."""

    armed = False

    def put_if_absent(self, name: str, data: bytes) -> None:
        super().put_if_absent(name, data)
        if self.armed and name.startswith(paths.SST_DIR):
            self.armed = False
            raise TimeoutError("SST upload timed out (but landed)")


def test_an_sst_whose_upload_failed_is_collected_by_gc_in_the_same_session():
    store = SstUploadLandsButFails(f"sst-fails-{uuid.uuid4()}")
    db = kvstore.open(store, **OPTS, gc_grace_seconds=0)
    try:
        db.put(b"a", b"1")
        store.armed = True
        with pytest.raises(TimeoutError):
            db.flush()
        orphans = set(store.list(paths.SST_DIR))
        assert len(orphans) == 1 and not db.manifest.all_ssts()
        db.collect_garbage()  # not in flight any more: nothing will ever name it
        assert set(store.list(paths.SST_DIR)) == set()
        db.flush()  # the retry writes a new SST
        assert db.get(b"a") == b"1" and len(db.manifest.all_ssts()) == 1
    finally:
        db.close()
    with kvstore.open(store, **OPTS) as db:
        assert db.get(b"a") == b"1"
