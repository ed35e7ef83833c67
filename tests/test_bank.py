"""The bank test: concurrent transfers under optimistic transactions.

Threads move money between accounts, yielding (``time.sleep(0)``) between
operations so that CPython really interleaves their transactions, and retry
on :class:`kvstore.TransactionConflict`. An auditor keeps reading the whole
bank in read-only transactions; every snapshot it sees must hold the full
total. Then the write-skew demonstration: a constraint over two accounts
(their sum stays >= 0) that each withdrawal checks but only half of which it
writes. SNAPSHOT lets two withdrawals break it; SERIALIZABLE never does.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

import kvstore
from kvstore import Isolation, TransactionConflict
from kvstore.objstore import MemoryStore

ACCOUNTS = [f"acct/{i:02}".encode() for i in range(8)]
INITIAL = 100
TOTAL = INITIAL * len(ACCOUNTS)


@pytest.fixture(params=["default", "tiny-memtable"])
def db(request: pytest.FixtureRequest) -> Iterator[kvstore.DB]:
    """A fresh store; the tiny-memtable one flushes in the background all the time."""
    name = f"test-bank-{uuid.uuid4().hex}"
    opts = {"memtable_bytes": 2048} if request.param == "tiny-memtable" else {}
    handle = kvstore.open(f"memory://{name}", fsync=False, **opts)
    yield handle
    handle.close()
    MemoryStore.drop(name)


def _int(v: bytes | None) -> int:
    assert v is not None
    return int(v)


def _balances(t: kvstore.Transaction) -> dict[bytes, int]:
    return {k: int(v) for k, v in t.scan_prefix(b"acct/")}


def _transfer(
    db: kvstore.DB, level: Isolation, lock: bool, rng: random.Random, stats: Counter[str]
) -> None:
    """Move a random amount between two random accounts; retry on conflict."""
    src, dst = rng.sample(ACCOUNTS, 2)
    amount = rng.randint(1, 60)
    while True:
        t = db.transaction(level)
        read: Callable[[bytes], bytes | None] = t.get_for_update if lock else t.get
        try:
            a = _int(read(src))
            time.sleep(0)
            b = _int(read(dst))
            time.sleep(0)
            if a < amount:  # the balance check: never overdraw
                t.rollback()
                stats["declined"] += 1
                return
            t.put(src, str(a - amount).encode())
            time.sleep(0)
            t.put(dst, str(b + amount).encode())
            time.sleep(0)
            t.commit()
            stats["transfers"] += 1
            return
        except TransactionConflict:
            stats["retries"] += 1
            time.sleep(0)


@pytest.mark.parametrize(
    ("level", "lock"),
    [
        (Isolation.SERIALIZABLE, False),  # (a) reads are validated at commit
        (Isolation.SNAPSHOT, True),  # (b) get_for_update on both accounts
        (Isolation.SNAPSHOT, False),  # both accounts are written: no lost update either
    ],
    ids=["serializable", "snapshot-get_for_update", "snapshot-plain"],
)
def test_transfers_conserve_money(db: kvstore.DB, level: Isolation, lock: bool) -> None:
    batch = kvstore.WriteBatch()
    for acct in ACCOUNTS:
        batch.put(acct, str(INITIAL).encode())
    db.write(batch)
    n_threads, per_thread = 4, 150
    stats: list[Counter[str]] = [Counter() for _ in range(n_threads)]
    problems: list[str] = []
    audits = Counter[str]()
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            rng = random.Random(1000 + i)
            for _ in range(per_thread):
                _transfer(db, level, lock, rng, stats[i])
        except BaseException as exc:
            errors.append(exc)

    def auditor() -> None:
        try:
            while not stop.is_set():
                t = db.transaction(level)
                seen = _balances(t)
                time.sleep(0)
                if sum(seen.values()) != TOTAL or min(seen.values()) < 0:
                    problems.append(f"snapshot {t.read_seq}: {seen}")
                assert t.commit() is None  # read-only: always commits
                audits["audits"] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    audit = threading.Thread(target=auditor)
    audit.start()
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    stop.set()
    audit.join(60)
    assert not errors, errors
    assert not problems, problems[:3]
    total = sum(stats, Counter())
    final = dict(db.scan_prefix(b"acct/"))
    balances = [int(v) for v in final.values()]
    assert len(balances) == len(ACCOUNTS)
    assert sum(balances) == TOTAL
    assert min(balances) >= 0
    assert total["transfers"] + total["declined"] == n_threads * per_thread
    assert audits["audits"] > 0
    # the threads really interleaved: some transactions had to be retried
    assert total["retries"] > 0
    assert db.stats()["transaction_conflicts"] == total["retries"]
    stats_now = db.stats()
    assert stats_now["transactions_running"] == 0
    assert stats_now["oracle_tracked_keys"] == 0
    assert stats_now["background_error"] is None
    if db.options.memtable_bytes < 1 << 20:  # the tiny-memtable store did flush meanwhile
        assert stats_now["flushes"] > 0


# ----------------------------------------------------------------------
# write skew: x + y >= 0, each withdrawal checks the sum, writes its own account
# ----------------------------------------------------------------------
X, Y = b"x", b"y"


def _reset(db: kvstore.DB) -> None:
    db.write(kvstore.WriteBatch().put(X, b"50").put(Y, b"50"))


def _withdraw_once(t: kvstore.Transaction, own: bytes, other: bytes, amount: int) -> bool:
    mine = _int(t.get(own))
    time.sleep(0)
    theirs = _int(t.get(other))
    time.sleep(0)
    if mine + theirs - amount < 0:
        return False
    t.put(own, str(mine - amount).encode())
    time.sleep(0)
    return True


def _sum(db: kvstore.DB) -> int:
    return _int(db.get(X)) + _int(db.get(Y))


@pytest.mark.parametrize("level", [Isolation.SNAPSHOT, Isolation.SERIALIZABLE])
def test_write_skew_two_interleaved_withdrawals(db: kvstore.DB, level: Isolation) -> None:
    _reset(db)
    t1 = db.transaction(level)
    t2 = db.transaction(level)
    assert _withdraw_once(t1, X, Y, 60)  # sees 50 + 50
    assert _withdraw_once(t2, Y, X, 60)  # sees 50 + 50 too
    t1.commit()
    if level is Isolation.SNAPSHOT:
        t2.commit()  # write skew: each wrote only its own account
        assert _sum(db) == -20
        return
    with pytest.raises(TransactionConflict):
        t2.commit()
    retry = db.transaction(level)  # the retry sees t1's withdrawal and declines
    assert not _withdraw_once(retry, Y, X, 60)
    assert retry.commit() is None
    assert _sum(db) == 40


def _race_once(db: kvstore.DB, level: Isolation, stats: Counter[str]) -> int:
    """Two threads withdraw 60 each from x and y (50 each) at once; returns x + y."""
    _reset(db)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def withdraw(own: bytes, other: bytes) -> None:
        try:
            barrier.wait(10)
            while True:
                t = db.transaction(level)
                try:
                    done = _withdraw_once(t, own, other, 60)
                    t.commit()  # a declined withdrawal commits as read-only
                    stats["withdrawn" if done else "declined"] += 1
                    return
                except TransactionConflict:
                    stats["retries"] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=withdraw, args=(X, Y)),
        threading.Thread(target=withdraw, args=(Y, X)),
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not errors, errors
    return _sum(db)


def test_threaded_write_skew_breaks_snapshot(db: kvstore.DB) -> None:
    stats: Counter[str] = Counter()
    for _ in range(500):
        if _race_once(db, Isolation.SNAPSHOT, stats) < 0:
            break  # x + y < 0: the constraint both withdrawals checked is broken
    else:
        pytest.fail(f"no write skew in 500 racing pairs under SNAPSHOT: {stats}")


def test_threaded_write_skew_never_breaks_serializable(db: kvstore.DB) -> None:
    stats: Counter[str] = Counter()
    for _ in range(200):
        assert _race_once(db, Isolation.SERIALIZABLE, stats) >= 0, stats
    # the pairs did overlap: the second committer had to retry (then declined)
    assert stats["retries"] > 0, stats
    assert stats["withdrawn"] == 200  # exactly one withdrawal per pair


@pytest.mark.parametrize("level", [Isolation.SNAPSHOT, Isolation.SERIALIZABLE])
def test_concurrent_increments_lose_nothing(db: kvstore.DB, level: Isolation) -> None:
    """P4 under threads: read-modify-write of one counter, retried on conflict."""
    db.put(b"counter", b"0")
    n_threads, per_thread = 4, 100
    retries = Counter[str]()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(per_thread):
                while True:
                    t = db.transaction(level)
                    try:
                        n = _int(t.get(b"counter"))
                        time.sleep(0)
                        t.put(b"counter", str(n + 1).encode())
                        time.sleep(0)
                        t.commit()
                        break
                    except TransactionConflict:
                        retries["retries"] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    assert db.get(b"counter") == str(n_threads * per_thread).encode()
    assert retries["retries"] > 0
