"""The transaction fast path keeps every guarantee of the slow one.

``Transaction`` leaves the oracle and unpins its snapshot exactly once (in the
commit step, or at rollback / failed commit / garbage collection); the oracle
records a commit only while another transaction runs; argument checks on the
inlined paths raise the same errors; the memtable's point read and its
per-key retention at flush agree with the reference definitions.
"""

from __future__ import annotations

import gc
import random
import uuid
from collections.abc import Iterator

import pytest

import kvstore
from kvstore import Isolation, TransactionConflict
from kvstore.entries import MAX_KEY_LEN
from kvstore.errors import ClosedError
from kvstore.iterators import retain
from kvstore.memtable import ABSENT, Memtable, _retained
from kvstore.objstore import MemoryStore

S = Isolation.SERIALIZABLE


@pytest.fixture
def db() -> Iterator[kvstore.DB]:
    name = f"test-fastpath-{uuid.uuid4().hex}"
    handle = kvstore.open(f"memory://{name}", fsync=False)
    yield handle
    handle.close()
    MemoryStore.drop(name)


def _bookkeeping(db: kvstore.DB) -> tuple[int, int, int]:
    st = db.stats()
    return st["transactions_running"], st["open_snapshots"], st["oracle_tracked_keys"]


# ----------------------------------------------------------------------
# registration: every way a transaction ends releases it exactly once
# ----------------------------------------------------------------------
@pytest.mark.parametrize("ending", ["commit", "read-only", "rollback", "conflict", "drop", "cycle"])
def test_every_ending_releases_the_transaction(db: kvstore.DB, ending: str) -> None:
    db.put(b"a", b"0")
    other = db.transaction(S)  # keeps the oracle recording, so leaks would show
    other.get(b"zz")
    t = db.transaction(S)
    assert _bookkeeping(db) == (2, 2, 0)
    t.get(b"a")
    if ending == "commit":
        t.put(b"a", b"1")
        assert t.commit(durable=False) is not None
    elif ending == "read-only":
        assert t.commit() is None
    elif ending == "rollback":
        t.rollback()
        t.rollback()  # idempotent: must not release twice
    elif ending == "conflict":
        db.put(b"a", b"x")
        t.put(b"b", b"1")
        with pytest.raises(TransactionConflict):
            t.commit()
    elif ending == "drop":
        del t
    else:  # garbage in a reference cycle: only the cyclic collector frees it
        holder: list[object] = [t]
        holder.append(holder)
        del t, holder
        gc.collect()
    running, snapshots, _ = _bookkeeping(db)
    assert (running, snapshots) == (1, 1)
    other.rollback()
    assert _bookkeeping(db) == (0, 0, 0)
    db.parts.commit.oracle._check()


def test_commit_then_exit_and_rollback_release_once(db: kvstore.DB) -> None:
    keep = db.transaction()  # another pin on the same read_seq must survive
    with db.transaction(S) as t:
        t.put(b"k", b"v")
        t.commit(durable=False)
        t.rollback()  # after commit: a no-op
    assert _bookkeeping(db)[:2] == (1, 1)
    del t
    gc.collect()
    assert _bookkeeping(db)[:2] == (1, 1)
    keep.rollback()
    assert _bookkeeping(db) == (0, 0, 0)


def test_oracle_records_only_while_another_transaction_runs(db: kvstore.DB) -> None:
    for i in range(5):
        with db.transaction(S) as t:
            t.get(b"k%d" % i)
            t.put(b"k%d" % i, b"v")
    assert _bookkeeping(db) == (0, 0, 0)
    old = db.transaction(S)
    old.get(b"k0")
    with db.transaction(S) as t:
        t.put(b"k1", b"w")
    assert db.stats()["oracle_tracked_keys"] == 1  # old may conflict with it
    old.put(b"k1", b"mine")
    with pytest.raises(TransactionConflict):
        old.commit()
    assert _bookkeeping(db) == (0, 0, 0)


def test_a_transaction_begun_after_a_commit_does_not_conflict_with_it(db: kvstore.DB) -> None:
    t1 = db.transaction(S)
    t1.put(b"k", b"1")
    t1.commit()
    t2 = db.transaction(S)
    assert t2.get(b"k") == b"1"
    t2.put(b"k", b"2")
    assert t2.commit() is not None
    assert db.get(b"k") == b"2"


def test_write_counters(db: kvstore.DB) -> None:
    before = db.stats()
    with db.transaction(S) as t:
        t.put(b"ab", b"cde")
        t.delete(b"f")
    db.put(b"g", b"hi")
    after = db.stats()
    assert after["writes"] - before["writes"] == 2
    assert after["user_bytes_written"] - before["user_bytes_written"] == 2 + 3 + 1 + 1 + 2


# ----------------------------------------------------------------------
# the inlined checks raise what the slow path raised
# ----------------------------------------------------------------------
def test_inlined_argument_checks(db: kvstore.DB) -> None:
    t = db.transaction(S)
    for call in (t.get, lambda k: t.put(k, b"v")):
        with pytest.raises(TypeError, match="key must be bytes, not str"):
            call("k")
        with pytest.raises(TypeError, match="key must be bytes, not NoneType"):
            call(None)
        with pytest.raises(ValueError, match="must not be empty"):
            call(b"")
        with pytest.raises(ValueError, match="limit"):
            call(b"x" * (MAX_KEY_LEN + 1))
    with pytest.raises(TypeError, match="value must be bytes, not int"):
        t.put(b"k", 1)  # type: ignore[arg-type]
    for bad in (1, None, "yes"):
        with pytest.raises(TypeError, match="durable"):
            t.commit(durable=bad)  # type: ignore[arg-type]
    t.put(bytearray(b"k"), memoryview(b"v"))  # type: ignore[arg-type]
    assert t.get(memoryview(b"k")) == b"v"  # type: ignore[arg-type]
    assert t.get(b"x" * MAX_KEY_LEN) is None
    assert t.status == "open"
    assert t.commit(durable=False) is not None
    assert db.get(b"k") == b"v"


@pytest.mark.parametrize("call", ["get", "put", "commit"])
def test_inlined_closed_checks(call: str) -> None:
    name = f"test-fastpath-{uuid.uuid4().hex}"
    db = kvstore.open(f"memory://{name}", fsync=False)
    try:
        done = db.transaction(S)
        done.commit()
        t = db.transaction(S)
        t.put(b"k", b"v")
        ops = {
            "get": lambda x: x.get(b"k"),
            "put": lambda x: x.put(b"k", b"v"),
            "commit": lambda x: x.commit(durable=False),
        }
        with pytest.raises(ClosedError, match="committed"):
            ops[call](done)
        db.close()
        with pytest.raises(ClosedError, match="database is closed"):
            ops[call](t)
    finally:
        db.close()
        MemoryStore.drop(name)


# ----------------------------------------------------------------------
# memtable point reads and per-key retention
# ----------------------------------------------------------------------
def test_memtable_value() -> None:
    mt = Memtable(0)
    mt.apply(3, [b"a"], [b"a3"])
    mt.apply(5, [b"b"], [None])
    mt.apply(7, [b"a"], [b"a7"])
    mt.apply(9, [b"a"], [None])
    assert mt.value(b"zz", 100) is ABSENT
    assert mt.value(b"a", 2) is ABSENT
    seen = [mt.value(b"a", s) for s in (3, 6, 7, 8, 9, 100)]
    assert seen == [b"a3", b"a3", b"a7", b"a7", None, None]
    assert mt.value(b"b", 4) is ABSENT
    assert mt.value(b"b", 5) is None  # a tombstone, not absent


@pytest.mark.parametrize("seed", range(5))
def test_retained_matches_retain(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(2000):
        seqs = sorted(rng.sample(range(1, 80), rng.randint(2, 15)))
        versions = [(s, None if rng.random() < 0.2 else b"v%d" % s) for s in seqs]
        snaps = sorted(set(rng.sample(range(0, 90), rng.randint(0, 6))))
        watermark = rng.choice([None, rng.randint(0, 90)])
        want = list(retain([(b"k", s, v) for s, v in reversed(versions)], snaps, watermark))
        assert _retained(b"k", versions, snaps, watermark) == want, (versions, snaps, watermark)


def test_collecting_a_transaction_while_holding_the_oracle_lock_does_not_deadlock(
    db: kvstore.DB,
) -> None:
    """The cyclic collector may free a transaction inside any allocation, also while
    this thread holds the (non-reentrant) oracle or snapshot lock: the transaction
    is queued and forgotten by the next begin, commit or stats()."""
    t = db.transaction()
    holder: list[object] = [t]
    holder.append(holder)
    del t, holder
    with db.parts.commit.oracle.lock, db.parts.commit.snapshots.lock:  # as inside begin or commit
        gc.collect()  # used to re-acquire the lock it held: a hang
    assert _bookkeeping(db) == (0, 0, 0)
    db.parts.commit.oracle._check()
