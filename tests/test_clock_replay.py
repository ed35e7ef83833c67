"""A seed and a fake clock reproduce a run: the same calls write the same bytes."""

from __future__ import annotations

import uuid

import kvstore
from kvstore import paths
from kvstore.clock import FakeClock
from kvstore.objstore import MemoryStore

QUIET = {"background_flush": False, "background_compaction": False, "memtable_bytes": 4096}


def _run(seed: int) -> dict[str, bytes]:
    url = f"memory://replay-{uuid.uuid4().hex}"
    clock = FakeClock(seed=seed)
    db = kvstore.open(url, clock=clock, **QUIET)
    try:
        for i in range(300):
            db.put(b"k%04d" % (i % 97), b"v%d" % i, durable=i % 10 == 0)
            clock.advance(0.25)
        with db.transaction() as t:
            t.put(b"t", (t.get(b"k0001") or b"") + b"!")
        db.create_checkpoint("cp", expires_in=60)
        db.compact()
        clock.advance(3600)
        db.collect_garbage(grace_seconds=0)
        store = db.parts.store
        assert isinstance(store, MemoryStore)
        names = store.list(paths.MANIFEST_DIR) + store.list(paths.SST_DIR)
        return {name: store.get(name) for name in sorted(names)}
    finally:
        db.close()


def test_same_seed_and_fake_clock_write_the_same_bytes() -> None:
    first, second = _run(7), _run(7)
    assert len(first) >= 3  # the claim, the current manifest, the SST
    assert first == second  # names (ULIDs, store id, nonces) and contents alike


def test_another_seed_writes_other_names() -> None:
    assert set(_run(7)) != set(_run(8))
