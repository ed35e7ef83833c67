"""Transactions beyond the golden scripts (see tests/test_txn_golden.py).

Own-write visibility, the context manager, closed and expired transactions,
the oracle's bookkeeping, conflicts across flushes, argument errors, and a
seeded stress test that interleaves transactions on one thread and checks
every read and every commit outcome against a brute-force reference model of
the conflict rules in :mod:`kvstore.oracle`.
"""

from __future__ import annotations

import gc
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

import kvstore
from kvstore import Isolation, TransactionConflict
from kvstore.objstore import MemoryStore

FAST = {"fsync": False}
LEVELS = [Isolation.SNAPSHOT, Isolation.SERIALIZABLE]
level_param = pytest.mark.parametrize("level", LEVELS, ids=lambda lv: lv.name.lower())


@pytest.fixture
def mem_url() -> Iterator[str]:
    name = f"test-txn-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStore.drop(name)


@pytest.fixture
def db(mem_url: str) -> Iterator[kvstore.DB]:
    handle = kvstore.open(mem_url, **FAST)
    yield handle
    handle.close()


def tracked(db: kvstore.DB) -> int:
    return db.stats()["oracle_tracked_keys"]


def running(db: kvstore.DB) -> int:
    return db.stats()["transactions_running"]


# ----------------------------------------------------------------------
# reads see the snapshot plus the transaction's own writes
# ----------------------------------------------------------------------
def _expected_view(base: dict[bytes, bytes], own: dict[bytes, bytes | None]) -> dict[bytes, bytes]:
    view = dict(base)
    for k, v in own.items():
        if v is None:
            view.pop(k, None)
        else:
            view[k] = v
    return view


def _rows(view: dict[bytes, bytes], start: bytes | None, end: bytes | None, reverse: bool):
    keys = sorted(k for k in view if (start is None or k >= start) and (end is None or k < end))
    if reverse:
        keys.reverse()
    return [(k, view[k]) for k in keys]


@level_param
def test_own_writes_visible_in_get_and_scan(db: kvstore.DB, level: Isolation) -> None:
    base = {b"b": b"1", b"d": b"2", b"f": b"3", b"h": b"4"}
    for k, v in base.items():
        db.put(k, v)
    t = db.transaction(level)
    own: dict[bytes, bytes | None] = {
        b"a": b"own-a",  # before the first snapshot row, outside [c, g)
        b"c": b"own-c",  # at the range start
        b"d": None,  # a delete hiding a snapshot row
        b"d2": b"own-d2",  # between snapshot rows
        b"f": b"own-f",  # an overwrite of a snapshot row
        b"g": b"own-g",  # at the (exclusive) range end
        b"z": b"own-z",  # after everything
        b"q": None,  # a delete of a key that never existed
    }
    for k, ov in own.items():
        if ov is None:
            t.delete(k)
        else:
            t.put(k, ov)
    view = _expected_view(base, own)
    for k in [*base, *own]:
        assert t.get(k) == view.get(k), k
        assert t.get_for_update(k) == view.get(k), k
    for start, end in [(None, None), (b"c", b"g"), (b"b", b"d2"), (b"d", b"e"), (b"x", None)]:
        for reverse in (False, True):
            got = list(t.scan(start, end, reverse=reverse))
            assert got == _rows(view, start, end, reverse), (start, end, reverse)
    assert list(t.scan_prefix(b"d")) == [(b"d2", b"own-d2")]
    assert list(t.scan_prefix(b"d", reverse=True)) == [(b"d2", b"own-d2")]
    assert list(t.scan(b"g", b"c")) == []  # empty range, even with own writes around
    # the latest own write of a key wins: put, delete, put again
    t.put(b"b", b"x")
    t.delete(b"b")
    assert t.get(b"b") is None and (b"b", b"1") not in list(t.scan())
    t.put(b"b", b"y")
    assert t.get(b"b") == b"y"
    # nothing is visible outside before commit
    assert db.get(b"a") is None and db.get(b"d") == b"2"
    t.commit()
    final = _expected_view(base, {**own, b"b": b"y"})
    assert list(db.scan()) == _rows(final, None, None, False)


@level_param
def test_only_deletes_hide_everything(db: kvstore.DB, level: Isolation) -> None:
    for k in (b"a", b"b", b"c"):
        db.put(k, b"v")
    t = db.transaction(level)
    for k in (b"a", b"b", b"c"):
        t.delete(k)
    assert list(t.scan()) == [] and list(t.scan(reverse=True)) == []
    t.rollback()
    assert [k for k, _ in db.scan()] == [b"a", b"b", b"c"]


def test_snapshot_is_stable_while_others_commit(db: kvstore.DB) -> None:
    db.put(b"k", b"0")
    t = db.transaction()
    assert t.read_seq == db.last_seq
    for i in range(1, 5):
        db.put(b"k", str(i).encode())
        db.put(f"n{i}".encode(), b"x")
    assert t.get(b"k") == b"0"
    assert list(t.scan()) == [(b"k", b"0")]
    t.rollback()


# ----------------------------------------------------------------------
# lifecycle: context manager, closed transactions, return values
# ----------------------------------------------------------------------
def test_with_commits_on_normal_exit(db: kvstore.DB) -> None:
    with db.transaction() as t:
        t.put(b"k", b"v")
    assert t.status == "committed"
    assert db.get(b"k") == b"v"


def test_with_rolls_back_on_exception(db: kvstore.DB) -> None:
    with pytest.raises(ZeroDivisionError), db.transaction(Isolation.SERIALIZABLE) as t:
        t.put(b"k", b"v")
        _ = 1 / 0
    assert t.status == "rolled back"
    assert db.get(b"k") is None
    assert running(db) == 0


def test_with_after_explicit_commit_or_rollback(db: kvstore.DB) -> None:
    with db.transaction() as t:
        t.put(b"a", b"1")
        assert t.commit() is not None
    with db.transaction() as t2:
        t2.put(b"b", b"1")
        t2.rollback()
    assert db.get(b"a") == b"1" and db.get(b"b") is None


def test_with_conflict_raises_from_exit(db: kvstore.DB) -> None:
    with pytest.raises(TransactionConflict), db.transaction() as t:
        t.put(b"k", b"mine")
        db.put(b"k", b"theirs")
    assert t.status == "rolled back"
    assert db.get(b"k") == b"theirs"


def _calls(t: kvstore.Transaction):
    return {
        "get": lambda: t.get(b"k"),
        "get_for_update": lambda: t.get_for_update(b"k"),
        "scan": lambda: t.scan(),
        "scan_prefix": lambda: t.scan_prefix(b"k"),
        "put": lambda: t.put(b"k", b"v"),
        "delete": lambda: t.delete(b"k"),
        "commit": lambda: t.commit(),
    }


@pytest.mark.parametrize("ending", ["commit", "rollback", "read-only commit", "conflict"])
def test_use_after_end_raises_closed(db: kvstore.DB, ending: str) -> None:
    t = db.transaction(Isolation.SERIALIZABLE)
    if ending == "commit":
        t.put(b"k", b"1")
        t.commit()
    elif ending == "rollback":
        t.put(b"k", b"1")
        t.rollback()
    elif ending == "read-only commit":
        t.get(b"k")
        assert t.commit() is None
    else:
        t.get(b"k")
        t.put(b"k", b"1")
        db.put(b"k", b"other")
        with pytest.raises(TransactionConflict):
            t.commit()
    for name, call in _calls(t).items():
        with pytest.raises(kvstore.ClosedError):
            call()
        assert t.status != "open", name
    t.rollback()  # idempotent, never raises
    t.rollback()
    assert running(db) == 0


def test_transaction_after_db_close(mem_url: str) -> None:
    db = kvstore.open(mem_url, **FAST)
    t = db.transaction()
    t.put(b"k", b"v")
    db.close()
    for call in _calls(t).values():
        with pytest.raises(kvstore.ClosedError):
            call()
    with pytest.raises(kvstore.ClosedError):
        db.transaction()
    # transactions do not survive a reopen: the buffered write is simply gone
    db2 = kvstore.open(mem_url, **FAST)
    assert db2.get(b"k") is None
    with db2.transaction() as t2:
        t2.put(b"k", b"again")
    assert db2.get(b"k") == b"again"
    db2.close()


def test_commit_returns_seq_or_none(db: kvstore.DB) -> None:
    db.put(b"a", b"0")
    t = db.transaction()
    t.put(b"a", b"1")
    t.delete(b"b")
    seq = t.commit()
    assert isinstance(seq, int) and seq == db.last_seq
    # one seq for the whole transaction
    assert db.put(b"c", b"1") == seq + 1
    for level in LEVELS:
        ro = db.transaction(level)
        ro.get(b"a")
        ro.get_for_update(b"c")
        list(ro.scan())
        assert ro.commit() is None
        assert ro.status == "committed"
    assert db.transaction().commit() is None  # an empty transaction
    assert db.last_seq == seq + 1


@level_param
def test_conflict_leaves_nothing_visible(tmp_path, level: Isolation) -> None:
    url = str(tmp_path / "db")
    db = kvstore.open(url, **FAST)
    db.put(b"a", b"0")
    t = db.transaction(level)
    t.get(b"a")
    t.put(b"a", b"1")
    t.put(b"b", b"1")
    t.delete(b"c")
    t.put(b"zz", b"1")
    db.put(b"c", b"other")
    seq_before = db.last_seq
    conflicts = db.stats()["transaction_conflicts"]
    db.put(b"a", b"other")
    with pytest.raises(TransactionConflict):
        t.commit()
    assert db.last_seq == seq_before + 1
    assert db.stats()["transaction_conflicts"] == conflicts + 1
    assert list(db.scan()) == [(b"a", b"other"), (b"c", b"other")]
    db.close()
    db = kvstore.open(url, **FAST)  # nothing of it reached the WAL either
    assert list(db.scan()) == [(b"a", b"other"), (b"c", b"other")]
    db.close()


# ----------------------------------------------------------------------
# non-transactional writes are one-write transactions
# ----------------------------------------------------------------------
def _plain_write(db: kvstore.DB, kind: str, key: bytes) -> None:
    if kind == "put":
        db.put(key, b"plain")
    elif kind == "delete":
        db.delete(key)
    else:
        db.write(kvstore.WriteBatch().put(b"unrelated", b"x").delete(key))


@pytest.mark.parametrize("kind", ["put", "delete", "write"])
@level_param
def test_plain_writes_conflict_with_written_keys(
    db: kvstore.DB, level: Isolation, kind: str
) -> None:
    db.put(b"k", b"0")
    t = db.transaction(level)
    t.put(b"k", b"txn")
    _plain_write(db, kind, b"k")
    with pytest.raises(TransactionConflict):
        t.commit()


@pytest.mark.parametrize("kind", ["put", "delete", "write"])
@level_param
def test_plain_writes_conflict_with_reads_when_serializable(
    db: kvstore.DB, level: Isolation, kind: str
) -> None:
    db.put(b"k", b"0")
    db.put(b"r1", b"0")
    t1 = db.transaction(level)
    t1.get(b"k")
    t1.put(b"other", b"1")
    t2 = db.transaction(level)
    list(t2.scan(b"r", b"s"))
    t2.put(b"other2", b"1")
    _plain_write(db, kind, b"k")
    _plain_write(db, kind, b"r1")
    if level is Isolation.SERIALIZABLE:
        for t in (t1, t2):
            with pytest.raises(TransactionConflict):
                t.commit()
    else:
        assert t1.commit() is not None and t2.commit() is not None


@level_param
def test_get_for_update_conflicts_at_both_levels(db: kvstore.DB, level: Isolation) -> None:
    t = db.transaction(level)
    assert t.get_for_update(b"lock") is None
    t.put(b"other", b"1")
    db.put(b"lock", b"x")
    with pytest.raises(TransactionConflict):
        t.commit()


def test_writes_before_begin_never_conflict(db: kvstore.DB) -> None:
    db.put(b"k", b"0")
    other = db.transaction()
    other.put(b"k", b"1")
    other.commit()
    for level in LEVELS:
        t = db.transaction(level)
        t.get(b"k")
        list(t.scan())
        t.put(b"k", b"2")
        assert t.commit() is not None


# ----------------------------------------------------------------------
# SERIALIZABLE range tracking details
# ----------------------------------------------------------------------
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_range_counts_even_when_stopped_early(db: kvstore.DB, reverse: bool) -> None:
    for k in (b"a", b"b", b"c", b"d"):
        db.put(k, b"0")
    t = db.transaction(Isolation.SERIALIZABLE)
    it = t.scan(b"a", b"e", reverse=reverse)
    next(it)  # reads one row only; the whole requested range is tracked
    t.put(b"z", b"1")
    db.put(b"b" if reverse else b"c", b"1")  # a row the caller never reached
    with pytest.raises(TransactionConflict):
        t.commit()


def test_scan_never_iterated_still_counts(db: kvstore.DB) -> None:
    t = db.transaction(Isolation.SERIALIZABLE)
    t.scan_prefix(b"p/")  # iterator dropped unread
    t.put(b"z", b"1")
    db.put(b"p/1", b"x")
    with pytest.raises(TransactionConflict):
        t.commit()


def test_scan_prefix_of_ff_bytes_and_empty_prefix(db: kvstore.DB) -> None:
    t = db.transaction(Isolation.SERIALIZABLE)
    assert list(t.scan_prefix(b"\xff\xff")) == []
    t.put(b"a", b"1")
    db.put(b"\xff\xff\x01", b"x")  # inside the open-ended prefix range
    with pytest.raises(TransactionConflict):
        t.commit()
    t = db.transaction(Isolation.SERIALIZABLE)
    list(t.scan_prefix(b""))  # the whole key space
    t.put(b"a", b"2")
    db.put(b"\x00", b"x")
    with pytest.raises(TransactionConflict):
        t.commit()


# ----------------------------------------------------------------------
# time-to-live
# ----------------------------------------------------------------------
TTL = 0.05


def with_manual_clock(db: kvstore.DB) -> list[float]:
    """Drive ``db``'s transaction clock by hand: ``clock[0] += s`` passes s seconds.

    Tests that need a transaction to stay young must not depend on a loaded
    machine running a few statements within the TTL."""
    clock = [time.monotonic()]
    db.parts.commit.monotonic = lambda: clock[0]
    return clock


def test_expired_transaction_fails_when_another_begins(mem_url: str) -> None:
    db = kvstore.open(mem_url, transaction_ttl=TTL, **FAST)
    clock = with_manual_clock(db)
    t = db.transaction()
    t.put(b"k", b"v")
    clock[0] += TTL * 3
    fresh = db.transaction()
    with pytest.raises(kvstore.TransactionExpired):
        t.commit()
    assert t.status == "rolled back"
    assert db.get(b"k") is None
    assert db.stats()["transactions_expired"] >= 1
    fresh.put(b"k", b"fresh")
    assert fresh.commit() is not None
    assert running(db) == 0 and tracked(db) == 0
    db.close()


def test_expired_transaction_fails_at_commit(mem_url: str) -> None:
    """A lone transaction older than transaction_ttl fails at commit (API.md, options)."""
    db = kvstore.open(mem_url, transaction_ttl=TTL, **FAST)
    clock = with_manual_clock(db)
    t = db.transaction()
    t.put(b"k", b"v")
    clock[0] += TTL * 3
    try:
        with pytest.raises(kvstore.TransactionExpired):
            t.commit()
        assert db.get(b"k") is None
    finally:
        db.close()


def test_expired_transaction_stops_holding_the_oracle(mem_url: str) -> None:
    db = kvstore.open(mem_url, transaction_ttl=TTL, **FAST)
    clock = with_manual_clock(db)
    old = db.transaction(Isolation.SERIALIZABLE)
    old.get(b"k0")
    for i in range(50):
        db.put(f"k{i}".encode(), b"x")
    assert tracked(db) == 50
    clock[0] += TTL * 3
    t = db.transaction()  # expires `old`: the window it held open is trimmed
    assert tracked(db) == 0
    assert running(db) == 1
    t.rollback()
    with pytest.raises(kvstore.TransactionExpired):
        old.put(b"k0", b"y")
        old.commit()
    db.close()


def test_expired_transaction_does_not_hold_the_oracle_under_plain_writes(mem_url: str) -> None:
    """An abandoned (still referenced) transaction past its TTL stops holding the window
    open (oracle docstring) even when only non-transactional writes follow."""
    db = kvstore.open(mem_url, transaction_ttl=TTL, **FAST)
    clock = with_manual_clock(db)
    forgotten = db.transaction()
    clock[0] += TTL * 3
    try:
        for i in range(200):
            db.put(f"k{i}".encode(), b"x")
        assert tracked(db) == 0
    finally:
        forgotten.rollback()
        db.close()


def test_expired_read_only_transaction_still_commits(mem_url: str) -> None:
    db = kvstore.open(mem_url, transaction_ttl=TTL, **FAST)
    db.put(b"k", b"0")
    clock = with_manual_clock(db)
    t = db.transaction(Isolation.SERIALIZABLE)
    clock[0] += TTL * 3
    db.transaction().rollback()
    db.put(b"k", b"1")
    assert t.get(b"k") == b"0"  # its snapshot is still pinned
    assert t.commit() is None
    db.close()


# ----------------------------------------------------------------------
# the oracle's bookkeeping
# ----------------------------------------------------------------------
def test_oracle_empty_without_transactions(db: kvstore.DB) -> None:
    for i in range(20):
        db.put(f"k{i}".encode(), b"x")
    assert tracked(db) == 0  # nothing to conflict with: nothing is remembered
    t1 = db.transaction()
    t2 = db.transaction(Isolation.SERIALIZABLE)
    db.put(b"a", b"1")
    db.put(b"b", b"1")
    assert tracked(db) == 2
    t1.put(b"a", b"2")
    with pytest.raises(TransactionConflict):
        t1.commit()
    assert tracked(db) == 2
    t2.rollback()
    assert tracked(db) == 0 and running(db) == 0
    db.parts.commit.oracle._check()


def test_oracle_forgets_dropped_transactions(db: kvstore.DB) -> None:
    t = db.transaction()
    t.get(b"a")
    db.put(b"a", b"1")
    assert running(db) == 1 and tracked(db) == 1
    del t
    gc.collect()
    assert running(db) == 0 and tracked(db) == 0


def test_oracle_bounded_while_a_long_transaction_runs(db: kvstore.DB) -> None:
    keys = [f"key{i}".encode() for i in range(10)]
    long = db.transaction(Isolation.SERIALIZABLE)
    long.get(keys[0])
    for i in range(2000):
        db.put(keys[i % 10], str(i).encode())
        if i % 50 == 0:  # short transactions come and go meanwhile
            with db.transaction() as t:
                t.put(keys[(i + 3) % 10], b"t")
        assert tracked(db) <= len(keys)
    db.parts.commit.oracle._check()
    assert tracked(db) == len(keys)
    long.rollback()
    assert tracked(db) == 0


def test_oracle_trims_to_the_oldest_running_transaction(db: kvstore.DB) -> None:
    t1 = db.transaction()
    db.put(b"a", b"1")
    t2 = db.transaction()
    db.put(b"b", b"1")
    assert tracked(db) == 2
    t1.rollback()  # only what t2 can conflict with remains
    assert tracked(db) == 1
    t2.put(b"b", b"2")
    with pytest.raises(TransactionConflict):
        t2.commit()
    assert tracked(db) == 0


# ----------------------------------------------------------------------
# flushes, durability, arguments
# ----------------------------------------------------------------------
@level_param
def test_conflicts_detected_after_memtable_flushes(mem_url: str, level: Isolation) -> None:
    db = kvstore.open(mem_url, memtable_bytes=4096, **FAST)
    for i in range(20):
        db.put(f"row{i:02}".encode(), b"0" * 20)
    t = db.transaction(level)
    assert t.get(b"row05") == b"0" * 20
    rows_before = list(t.scan(b"row", b"rox"))
    t.put(b"row05", b"mine")
    t2 = db.transaction(level)
    t2.get(b"row06")
    list(t2.scan(b"row1", b"row2"))
    t2.put(b"other", b"x")
    flushes = db.stats()["flushes"]
    for i in range(200):  # fills and flushes several memtables
        db.put(f"row{i % 20:02}".encode(), str(i).encode() * 20)
    db.flush()
    assert db.stats()["flushes"] > flushes
    # both snapshots survive the flushes
    assert t.get(b"row05") == b"mine"
    assert t2.get(b"row06") == b"0" * 20
    assert [r for r in t.scan(b"row", b"rox") if r[0] != b"row05"] == [
        r for r in rows_before if r[0] != b"row05"
    ]
    with pytest.raises(TransactionConflict):
        t.commit()
    if level is Isolation.SERIALIZABLE:
        with pytest.raises(TransactionConflict):
            t2.commit()
    else:
        assert t2.commit() is not None
    db.close()


def test_durable_false_commit(tmp_path) -> None:
    url = str(tmp_path / "db")
    db = kvstore.open(url, **FAST)
    t = db.transaction()
    t.put(b"k", b"v")
    seq = t.commit(durable=False)
    assert seq == db.last_seq and db.get(b"k") == b"v"
    db.flush()
    db.close()
    db = kvstore.open(url, **FAST)
    assert db.get(b"k") == b"v"
    db.close()


@pytest.mark.parametrize("bad", ["serializable", "SNAPSHOT", None, 1, True])
def test_isolation_type_errors(db: kvstore.DB, bad: object) -> None:
    with pytest.raises(TypeError, match="isolation"):
        db.transaction(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="isolation"):
        db.transaction(isolation=bad)  # type: ignore[arg-type]
    assert running(db) == 0


def test_isolation_default_and_keyword(db: kvstore.DB) -> None:
    assert db.transaction().isolation is Isolation.SNAPSHOT
    assert db.transaction(Isolation.SERIALIZABLE).isolation is Isolation.SERIALIZABLE
    assert db.transaction(isolation=Isolation.SERIALIZABLE).isolation is Isolation.SERIALIZABLE
    gc.collect()


def test_argument_errors_leave_the_transaction_open(db: kvstore.DB) -> None:
    t = db.transaction()
    with pytest.raises(TypeError, match="key"):
        t.put("k", b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="value"):
        t.put(b"k", "v")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key"):
        t.get(b"")
    with pytest.raises(TypeError, match="start"):
        t.scan("a")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reverse"):
        t.scan(reverse=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="prefix"):
        t.scan_prefix(None)  # type: ignore[arg-type]
    t.put(bytearray(b"k"), memoryview(b"v"))  # type: ignore[arg-type]  # bytes-like is accepted
    with pytest.raises(TypeError, match="durable"):
        t.commit(durable="yes")  # type: ignore[arg-type]
    assert t.status == "open"
    assert t.commit() is not None
    assert db.get(b"k") == b"v"


# ----------------------------------------------------------------------
# seeded stress test against a reference model
# ----------------------------------------------------------------------
KEYS = [b"a", b"b", b"ba", b"c", b"d", b"da", b"e", b"f", b"g", b"h"]
BOUNDS = [None, b"a", b"b", b"b\x00", b"bz", b"c", b"d", b"e", b"ee", b"g", b"i"]


def _in(key: bytes, start: bytes | None, end: bytes | None) -> bool:
    return (start is None or key >= start) and (end is None or key < end)


class Model:
    """Every committed version, and every commit's key set: the whole history."""

    def __init__(self) -> None:
        self.versions: dict[bytes, list[tuple[int, bytes | None]]] = {}
        self.commits: list[tuple[int, frozenset[bytes]]] = []
        self.last_seq = 0

    def apply(self, writes: dict[bytes, bytes | None]) -> int:
        self.last_seq += 1
        for k, v in writes.items():
            self.versions.setdefault(k, []).append((self.last_seq, v))
        self.commits.append((self.last_seq, frozenset(writes)))
        return self.last_seq

    def get(self, key: bytes, seq: int) -> bytes | None:
        for s, v in reversed(self.versions.get(key, [])):
            if s <= seq:
                return v
        return None

    def view(self, seq: int, own: dict[bytes, bytes | None]) -> dict[bytes, bytes]:
        out = {k: v for k in self.versions if (v := self.get(k, seq)) is not None}
        return _expected_view(out, own)


@dataclass
class TxnModel:
    txn: kvstore.Transaction
    level: Isolation
    read_seq: int
    writes: dict[bytes, bytes | None] = field(default_factory=dict)
    locked: set[bytes] = field(default_factory=set)
    reads: set[bytes] = field(default_factory=set)
    ranges: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)

    @property
    def serializable(self) -> bool:
        return self.level is Isolation.SERIALIZABLE

    def must_conflict(self, model: Model) -> bool:
        """The documented rule, by brute force over the whole history."""
        if not self.writes:
            return False  # read-only: always commits
        keys = set(self.writes) | self.locked | (self.reads if self.serializable else set())
        for seq, written in model.commits:
            if seq <= self.read_seq:
                continue
            if written & keys:
                return True
            if self.serializable and any(_in(k, s, e) for k in written for s, e in self.ranges):
                return True
        return False


def _stress(seed: int, steps: int) -> dict[str, int]:
    rng = random.Random(seed)
    name = f"txn-stress-{uuid.uuid4().hex}"
    db = kvstore.open(
        f"memory://{name}", memtable_bytes=3000, background_flush=False, seed=seed, **FAST
    )
    model = Model()
    open_txns: list[TxnModel] = []
    counts = {"commits": 0, "conflicts": 0, "rw_only_conflicts": 0, "read_only": 0, "flushes": 0}
    value_no = 0

    def new_value() -> bytes:
        nonlocal value_no
        value_no += 1
        return f"v{value_no}".encode()

    try:
        for _ in range(steps):
            r = rng.random()
            if (r < 0.12 and len(open_txns) < 5) or not open_txns:
                level = rng.choice(LEVELS)
                t = db.transaction(level)
                assert t.read_seq == model.last_seq
                open_txns.append(TxnModel(t, level, t.read_seq))
            elif r < 0.50:
                m = rng.choice(open_txns)
                op = rng.random()
                if op < 0.35:
                    k = rng.choice(KEYS)
                    want = m.writes[k] if k in m.writes else model.get(k, m.read_seq)
                    if m.serializable and k not in m.writes:
                        m.reads.add(k)
                    assert m.txn.get(k) == want
                elif op < 0.5:
                    k = rng.choice(KEYS)
                    want = m.writes[k] if k in m.writes else model.get(k, m.read_seq)
                    m.locked.add(k)
                    assert m.txn.get_for_update(k) == want
                else:
                    start, end = rng.choice(BOUNDS), rng.choice(BOUNDS)
                    reverse = rng.random() < 0.4
                    if m.serializable:
                        m.ranges.append((start, end))
                    rows = list(m.txn.scan(start, end, reverse=reverse))
                    limit = rng.choice([None, None, 0, 1, 2])
                    rows_wanted = _rows(model.view(m.read_seq, m.writes), start, end, reverse)
                    if limit is not None:  # the caller stops early
                        rows, rows_wanted = rows[:limit], rows_wanted[:limit]
                    assert rows == rows_wanted, (start, end, reverse)
            elif r < 0.72:
                m = rng.choice(open_txns)
                k = rng.choice(KEYS)
                if rng.random() < 0.75:
                    v = new_value()
                    m.txn.put(k, v)
                else:
                    v = None
                    m.txn.delete(k)
                m.writes.pop(k, None)
                m.writes[k] = v
            elif r < 0.86:
                m = rng.choice(open_txns)
                open_txns.remove(m)
                durable = rng.random() < 0.5
                if m.must_conflict(model):
                    with pytest.raises(TransactionConflict):
                        m.txn.commit(durable=durable)
                    counts["conflicts"] += 1
                    keys = set(m.writes) | m.locked
                    if not any(written & keys for s, written in model.commits if s > m.read_seq):
                        counts["rw_only_conflicts"] += 1
                else:
                    seq = m.txn.commit(durable=durable)
                    if m.writes:
                        assert seq == model.apply(m.writes)
                        counts["commits"] += 1
                    else:
                        assert seq is None
                        counts["read_only"] += 1
            elif r < 0.90:
                m = rng.choice(open_txns)
                open_txns.remove(m)
                m.txn.rollback()
            elif r < 0.99:
                kind = rng.random()
                if kind < 0.5:
                    k, v = rng.choice(KEYS), new_value()
                    assert db.put(k, v, durable=False) == model.apply({k: v})
                elif kind < 0.7:
                    k = rng.choice(KEYS)
                    assert db.delete(k) == model.apply({k: None})
                else:
                    batch = kvstore.WriteBatch()
                    writes: dict[bytes, bytes | None] = {}
                    for k in rng.sample(KEYS, rng.randint(1, 3)):
                        v = new_value() if rng.random() < 0.7 else None
                        writes[k] = v
                        batch.put(k, v) if v is not None else batch.delete(k)
                    assert db.write(batch) == model.apply(writes)
                k = rng.choice(KEYS)
                assert db.get(k) == model.get(k, model.last_seq)
            else:
                db.flush()
                counts["flushes"] += 1
                assert list(db.scan()) == _rows(model.view(model.last_seq, {}), None, None, False)
            # invariants after every step
            db.parts.commit.oracle._check()
            assert db.last_seq == model.last_seq
            stats = db.stats()
            assert stats["transactions_running"] == len(open_txns)
            if open_txns:
                horizon = min(m.read_seq for m in open_txns)
                live: set[bytes] = set()
                for s, written in model.commits:
                    if s > horizon:
                        live |= written
                assert stats["oracle_tracked_keys"] == len(live)
            else:
                assert stats["oracle_tracked_keys"] == 0
        for m in open_txns:
            m.txn.rollback()
        assert tracked(db) == 0
        assert list(db.scan()) == _rows(model.view(model.last_seq, {}), None, None, False)
        counts["flushes"] = db.stats()["flushes"]
    finally:
        db.close()
        MemoryStore.drop(name)
    return counts


@pytest.mark.parametrize("seed", range(10))
def test_stress_against_reference_model(seed: int) -> None:
    counts = _stress(seed, steps=3000)
    # the run really exercised the interesting paths
    assert counts["commits"] > 30
    assert counts["conflicts"] > 5
    assert counts["rw_only_conflicts"] > 0  # conflicts only SERIALIZABLE detects
    assert counts["read_only"] > 0
    assert counts["flushes"] > 0
