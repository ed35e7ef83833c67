"""Engines behind one small interface, including deliberately broken ones.

Every engine under test speaks five calls on a transaction and two on the
engine; the workload (:mod:`kvstore.isolation.workload`) encodes lists and
registers as bytes on top::

    engine.begin(level) -> txn          level: "snapshot" | "serializable"
    txn.get(key) -> bytes | None        reads see the transaction's snapshot
    txn.put(key, value)                 and its own writes
    txn.scan(start, end) -> [(k, v)]    [start, end), None = open
    txn.commit()                        raises Aborted if the engine refused
    txn.rollback()
    engine.close()

An engine raises :class:`Aborted` when it definitely did not commit (a
conflict, a busy lock); any other exception from ``commit`` leaves the
outcome unknown and is recorded as ``info``.

The broken engines are real kvstore databases with one mechanism sabotaged,
each mirroring a bug that happened in an optimistic-transaction LSM. They
are caught from their histories alone:

=====================  ================================================  =============
engine                 sabotage                                          caught as
=====================  ================================================  =============
``broken-scan-keys``   SERIALIZABLE scans track only the keys they       G2 (phantom)
                       returned, not the requested range (slatedb #1711)
``broken-oracle``      the oracle trims commits up to the *newest*       lost update,
                       running transaction's snapshot instead of the     G-single
                       oldest, forgetting what older ones conflict with
``broken-fake-ser``    SERIALIZABLE silently runs as SNAPSHOT            G2-item
=====================  ================================================  =============
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import tempfile
import threading
import uuid
from bisect import bisect_right
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from sortedcontainers import SortedList

import kvstore
from kvstore.objstore import MemoryStore
from kvstore.oracle import Oracle

T = TypeVar("T")
Row = tuple[bytes, bytes]

LEVELS = ("snapshot", "serializable")


class Aborted(Exception):
    """The engine definitely did not commit the transaction."""


class EngineTxn(Protocol):
    def get(self, key: bytes) -> bytes | None: ...
    def put(self, key: bytes, value: bytes) -> None: ...
    def scan(self, start: bytes | None, end: bytes | None) -> list[Row]: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...


class Engine(Protocol):
    name: str

    def begin(self, level: str) -> EngineTxn: ...
    def close(self) -> None: ...


def _level(level: str) -> str:
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, not {level!r}")
    return level


# ----------------------------------------------------------------------
# kvstore
# ----------------------------------------------------------------------
class KvTxn:
    def __init__(self, txn: kvstore.Transaction) -> None:
        self.txn = txn

    def get(self, key: bytes) -> bytes | None:
        return self.txn.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.txn.put(key, value)

    def scan(self, start: bytes | None, end: bytes | None) -> list[Row]:
        return list(self.txn.scan(start, end))

    def commit(self) -> None:
        try:
            self.txn.commit(durable=False)
        except (kvstore.TransactionConflict, kvstore.TransactionExpired) as exc:
            raise Aborted(str(exc)) from exc

    def rollback(self) -> None:
        self.txn.rollback()


class KvEngine:
    """kvstore in a fresh ``memory://`` store; a small memtable so runs cross flushes."""

    name = "kvstore"

    def __init__(self, *, memtable_bytes: int = 32 << 10) -> None:
        self._store = f"isolation-{uuid.uuid4().hex}"
        self.db = kvstore.open(
            f"memory://{self._store}",
            fsync=False,
            background_flush=False,
            memtable_bytes=memtable_bytes,
        )

    def _isolation(self, level: str) -> kvstore.Isolation:
        return {
            "snapshot": kvstore.Isolation.SNAPSHOT,
            "serializable": kvstore.Isolation.SERIALIZABLE,
        }[_level(level)]

    def begin(self, level: str) -> EngineTxn:
        return KvTxn(self.db.transaction(self._isolation(level)))

    def close(self) -> None:
        try:
            self.db.close()
        finally:
            MemoryStore.drop(self._store)


# -- broken: scans that track only the keys they returned -----------------
class _ScanKeysTxn(KvTxn):
    def scan(self, start: bytes | None, end: bytes | None) -> list[Row]:
        rows = list(self.txn.scan(start, end))
        # the sabotage edits the conflict sets the transaction hands the commit
        # path (the very lists and sets it keeps): forget the requested range and
        # remember only the keys the scan happened to return. Under SNAPSHOT no
        # range is kept; under SERIALIZABLE the third key set is the read set.
        key_sets, ranges = self.txn.conflict_sets()
        if ranges and ranges[-1] == (start, end):
            ranges.pop()
            if len(key_sets) == 3:
                reads = key_sets[2]
                assert isinstance(reads, set)
                reads.update(k for k, _ in rows)
        return rows


class BrokenScanKeysEngine(KvEngine):
    """SERIALIZABLE whose scans conflict only on returned keys: phantoms slip through."""

    name = "broken-scan-keys"

    def begin(self, level: str) -> EngineTxn:
        return _ScanKeysTxn(self.db.transaction(self._isolation(level)))


# -- broken: an oracle that forgets committed transactions too early ---------
class ForgetfulOracle(Oracle):
    """Trims up to the newest running transaction's read_seq (should be the oldest)."""

    def _trim_locked(self) -> None:
        if not self._active:
            super()._trim_locked()
            return
        horizon = max(read_seq for read_seq, _ in self._active.values())
        last = self._last_write
        while self._log and self._log[0][0] <= horizon:
            seq, keys = self._log.popleft()
            for key in keys:
                if last.get(key) == seq:
                    del last[key]
                    self._keys.discard(key)


class BrokenOracleEngine(KvEngine):
    name = "broken-oracle"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # an instance attribute of a database this adapter owns, replaced before any
        # transaction begins
        self.db.parts.commit.oracle = ForgetfulOracle()


# -- broken: SERIALIZABLE that is really SNAPSHOT -------------------------------
class BrokenFakeSerializableEngine(KvEngine):
    name = "broken-fake-ser"

    def begin(self, level: str) -> EngineTxn:
        _level(level)
        return KvTxn(self.db.transaction(kvstore.Isolation.SNAPSHOT))


# ----------------------------------------------------------------------
# the in-memory twin: a reference MVCC engine small enough to trust
# ----------------------------------------------------------------------
class MemoryTxn:
    def __init__(self, engine: MemoryEngine, serializable: bool, read_seq: int) -> None:
        self._e = engine
        self._ser = serializable
        self.read_seq = read_seq
        self._writes: dict[bytes, bytes] = {}
        self._reads: set[bytes] = set()
        self._ranges: list[tuple[bytes | None, bytes | None]] = []

    def get(self, key: bytes) -> bytes | None:
        if key in self._writes:
            return self._writes[key]
        self._reads.add(key)
        return self._e._read(key, self.read_seq)

    def put(self, key: bytes, value: bytes) -> None:
        self._writes[key] = value

    def scan(self, start: bytes | None, end: bytes | None) -> list[Row]:
        self._ranges.append((start, end))
        out = {}
        for k in self._e._keys.irange(start, end, inclusive=(True, False)):
            v = self._e._read(k, self.read_seq)
            if v is not None:
                out[k] = v
        for k, v in self._writes.items():
            if (start is None or k >= start) and (end is None or k < end):
                out[k] = v
        return sorted(out.items())

    def commit(self) -> None:
        if self._writes:
            self._e._commit(self)

    def rollback(self) -> None:
        self._writes.clear()

    def _conflicts(self, keys: frozenset[bytes]) -> bool:
        if keys & self._writes.keys():
            return True
        if not self._ser:
            return False
        if keys & self._reads:
            return True
        return any(
            (s is None or k >= s) and (e is None or k < e) for k in keys for s, e in self._ranges
        )


class MemoryEngine:
    """SNAPSHOT (first committer wins) and SERIALIZABLE (reads and ranges validated)."""

    name = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[bytes, list[tuple[int, bytes]]] = {}
        self._keys: SortedList = SortedList()
        self._log_seqs: list[int] = []
        self._log_keys: list[frozenset[bytes]] = []
        self._seq = 0

    def begin(self, level: str) -> EngineTxn:
        return MemoryTxn(self, _level(level) == "serializable", self._seq)

    def _read(self, key: bytes, seq: int) -> bytes | None:
        for s, v in reversed(self._versions.get(key, ())):
            if s <= seq:
                return v
        return None

    def _commit(self, txn: MemoryTxn) -> None:
        with self._lock:
            i = bisect_right(self._log_seqs, txn.read_seq)
            for keys in self._log_keys[i:]:
                if txn._conflicts(keys):
                    raise Aborted("a transaction that committed after this one began conflicts")
            self._seq += 1
            for k, v in txn._writes.items():
                if k not in self._versions:
                    self._versions[k] = []
                    self._keys.add(k)
                self._versions[k].append((self._seq, v))
            self._log_seqs.append(self._seq)
            self._log_keys.append(frozenset(txn._writes))

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------
# sqlite3 (serializable only: one writer at a time, WAL snapshots for readers)
# ----------------------------------------------------------------------
class SqliteTxn:
    def __init__(self, engine: SqliteEngine, conn: sqlite3.Connection) -> None:
        self._e = engine
        self._c: sqlite3.Connection | None = conn

    def _conn(self) -> sqlite3.Connection:
        if self._c is None:
            raise Aborted("the transaction already ended")
        return self._c

    def _do(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return fn(self._conn())
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
            self.rollback()
            raise Aborted(str(exc)) from exc

    def get(self, key: bytes) -> bytes | None:
        row = self._do(lambda c: c.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone())
        return None if row is None else bytes(row[0])

    def put(self, key: bytes, value: bytes) -> None:
        self._do(
            lambda c: c.execute("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", (key, value))
        )

    def scan(self, start: bytes | None, end: bytes | None) -> list[Row]:
        sql, args = "SELECT k, v FROM kv WHERE 1", []
        if start is not None:
            sql += " AND k >= ?"
            args.append(start)
        if end is not None:
            sql += " AND k < ?"
            args.append(end)
        rows = self._do(lambda c: c.execute(sql + " ORDER BY k", args).fetchall())
        return [(bytes(k), bytes(v)) for k, v in rows]

    def commit(self) -> None:
        self._do(lambda c: c.execute("COMMIT"))
        self._release()

    def rollback(self) -> None:
        c = self._c
        if c is None:
            return
        try:
            if c.in_transaction:
                c.execute("ROLLBACK")
        finally:
            self._release()

    def _release(self) -> None:
        if self._c is not None:
            self._e._idle.append(self._c)
            self._c = None


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


class SqliteEngine:
    """A WAL-mode sqlite3 file; a busy lock is an abort (timeout 0: never blocks).

    ``BEGIN`` is deferred, so the transaction's snapshot would be taken at its
    first read; ``begin`` reads once so the snapshot is taken when it begins.
    Connections are pooled (one per open transaction).
    """

    name = "sqlite3"

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="kvstore-isolation-")
        self._path = os.path.join(self._dir, "db.sqlite")
        self._idle: list[sqlite3.Connection] = []  # list.append/pop are atomic
        self._all: list[sqlite3.Connection] = []
        c = self._connect()
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
        self._idle.append(c)

    def _connect(self) -> sqlite3.Connection:
        c = sqlite3.connect(self._path, timeout=0, isolation_level=None, check_same_thread=False)
        self._all.append(c)
        c.execute("PRAGMA synchronous=OFF")
        return c

    def begin(self, level: str) -> EngineTxn:
        _level(level)
        try:
            conn = self._idle.pop()
        except IndexError:
            try:
                conn = self._connect()
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                raise Aborted(str(exc)) from exc
        txn = SqliteTxn(self, conn)
        txn._do(lambda c: c.execute("BEGIN"))
        txn._do(lambda c: c.execute("SELECT 1 FROM kv LIMIT 1").fetchall())
        return txn

    def close(self) -> None:
        for c in self._all:
            c.close()
        shutil.rmtree(self._dir, ignore_errors=True)


# ----------------------------------------------------------------------
# SlateDB's Python binding (async; driven from a private event-loop thread)
# ----------------------------------------------------------------------
def slatedb_available() -> bool:
    try:
        from slatedb import uniffi  # noqa: F401
    except ImportError:
        return False
    return True


class SlateTxn:
    def __init__(self, engine: SlateEngine, txn: Any) -> None:
        self._e = engine
        self._t = txn

    def get(self, key: bytes) -> bytes | None:
        return cast("bytes | None", self._e._call(self._t.get(key)))

    def put(self, key: bytes, value: bytes) -> None:
        self._e._call(self._t.put(key, value))

    def scan(self, start: bytes | None, end: bytes | None) -> list[Row]:
        sdb = self._e.sdb
        rng = sdb.KeyRange(
            start=start, start_inclusive=start is not None, end=end, end_inclusive=False
        )

        async def rows() -> list[Row]:
            it = await self._t.scan(rng)
            out: list[Row] = []
            while batch := await it.next_batch(256):
                out.extend((bytes(r.key), bytes(r.value)) for r in batch)
            return out

        return self._e._call(rows())

    def commit(self) -> None:
        self._e._call(self._t.commit())

    def rollback(self) -> None:
        try:
            self._e._call(self._t.rollback())
        except Aborted:
            pass


class SlateEngine:
    """SlateDB over its in-memory object store: SNAPSHOT and SERIALIZABLE_SNAPSHOT."""

    name = "slatedb"

    def __init__(self) -> None:
        from slatedb import uniffi as sdb

        self.sdb = sdb
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        store = sdb.ObjectStore.resolve("memory:///")
        self._db = self._call(sdb.DbBuilder(f"isolation-{uuid.uuid4().hex}", store).build())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            return asyncio.run_coroutine_threadsafe(coro, self._loop).result()
        except self.sdb.Error.Transaction as exc:
            raise Aborted(str(exc)) from exc

    def begin(self, level: str) -> EngineTxn:
        lv = {
            "snapshot": self.sdb.IsolationLevel.SNAPSHOT,
            "serializable": self.sdb.IsolationLevel.SERIALIZABLE_SNAPSHOT,
        }[_level(level)]
        return SlateTxn(self, self._call(self._db.begin(lv)))

    def close(self) -> None:
        try:
            self._call(self._db.shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()


# ----------------------------------------------------------------------
# the registry
# ----------------------------------------------------------------------
@dataclass(frozen=True)
class EngineSpec:
    name: str
    factory: Callable[[], Engine]
    levels: tuple[str, ...]
    description: str
    broken: bool = False
    available: Callable[[], bool] = lambda: True


ENGINES: dict[str, EngineSpec] = {
    s.name: s
    for s in (
        EngineSpec("kvstore", KvEngine, LEVELS, "kvstore, memory:// store, small memtable"),
        EngineSpec("memory", MemoryEngine, LEVELS, "in-memory reference MVCC engine (the twin)"),
        EngineSpec(
            "sqlite3", SqliteEngine, ("serializable",), "sqlite3 WAL file, one writer at a time"
        ),
        EngineSpec(
            "slatedb",
            SlateEngine,
            LEVELS,
            "SlateDB Python binding, in-memory object store",
            available=slatedb_available,
        ),
        EngineSpec(
            "broken-scan-keys",
            BrokenScanKeysEngine,
            ("serializable",),
            "kvstore whose scans track only returned keys (slatedb #1711)",
            broken=True,
        ),
        EngineSpec(
            "broken-oracle",
            BrokenOracleEngine,
            LEVELS,
            "kvstore whose oracle forgets commits older transactions still need",
            broken=True,
        ),
        EngineSpec(
            "broken-fake-ser",
            BrokenFakeSerializableEngine,
            ("serializable",),
            "kvstore whose SERIALIZABLE is SNAPSHOT",
            broken=True,
        ),
    )
}

BROKEN = tuple(name for name, s in ENGINES.items() if s.broken)


def engine_spec(name: str) -> EngineSpec:
    try:
        spec = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}") from None
    if not spec.available():
        raise ValueError(f"engine {name!r} is not installed")
    return spec


def open_engine(name: str) -> Engine:
    return engine_spec(name).factory()
