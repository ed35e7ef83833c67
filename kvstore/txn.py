"""Optimistic transactions at SNAPSHOT and SERIALIZABLE isolation.

A transaction reads the database as of ``read_seq`` (the last committed seq
when it began) merged with its own buffered writes, and writes nothing until
:meth:`Transaction.commit`. Commit runs on the database's single commit path,
where the conflict check, the seq assignment and the WAL append are one step
(see :mod:`kvstore.oracle` for the rules and a timeline)::

    begin ── get / scan (snapshot at read_seq + own writes) ── put / delete (buffered)
      │
      └─ commit: [commit lock] expired? ─ conflict? ─ seq ─ WAL ─ memtable ─ publish
                  TransactionExpired   TransactionConflict      (durable: fsync)

What is tracked:

==================  ==========================  =================================
                    SNAPSHOT                    SERIALIZABLE
==================  ==========================  =================================
written keys        checked (first committer    checked
                    wins)
``get_for_update``  checked, like a write       checked
keys read           —                           checked
ranges scanned      —                           checked: the *requested* range,
                                                also when it returned nothing or
                                                the caller stopped early
==================  ==========================  =================================

A transaction that wrote nothing always commits (it read one consistent
snapshot, which is a point in the serial order) and returns None. After
commit or rollback every call raises :class:`~kvstore.errors.ClosedError`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator

from kvstore import _validate
from kvstore import readpath as rp
from kvstore.engine.protocol import Engine
from kvstore.entries import MAX_KEY_LEN
from kvstore.errors import ClosedError
from kvstore.iterators import OwnWrites
from kvstore.reads import ReadSurface


class Isolation(enum.Enum):
    """Isolation level of a :class:`Transaction`."""

    #: snapshot isolation: no dirty/non-repeatable reads, no lost updates;
    #: write skew is possible
    SNAPSHOT = "snapshot"
    #: serializable snapshot isolation: also read keys and scanned ranges are checked
    SERIALIZABLE = "serializable"


#: what a transaction that never called get_for_update has locked (shared, so no set per txn)
_NONE_LOCKED: frozenset[bytes] = frozenset()


class Transaction(ReadSurface):
    """An optimistic transaction; create with :meth:`kvstore.DB.transaction`.

    While it runs, a transaction is registered with the database: the oracle
    keeps the commits it may conflict with, and its ``read_seq`` is pinned so
    flushes and compactions keep the versions it reads. It leaves both
    exactly once: in the commit step that publishes its write, or when it
    ends any other way (read-only commit, failed commit, rollback), or, for a
    transaction dropped while open, when it is garbage-collected
    (:meth:`__del__`).
    """

    __slots__ = (
        "__weakref__",
        "_engine",
        "_health",
        "_locked",
        "_ranges",
        "_reads",
        "_serializable",
        "_status",
        "_writes",
        "isolation",
        "read_seq",
        "registered",
        "txn_id",
    )

    def __init__(self, engine: Engine, isolation: Isolation, txn_id: int, read_seq: int) -> None:
        self._engine = engine
        self._health = engine.health
        self.isolation = isolation
        self.read_seq = read_seq
        #: the oracle's id of this transaction
        self.txn_id = txn_id
        self.registered = True  # in the oracle and pinning read_seq: see _unregister
        self._writes: dict[bytes, bytes | None] = {}
        self._locked: set[bytes] | frozenset[bytes] = _NONE_LOCKED  # see get_for_update
        self._serializable = isolation is Isolation.SERIALIZABLE
        self._reads: set[bytes] = set()
        self._ranges: list[tuple[bytes | None, bytes | None]] = []
        self._status = "open"

    def _unregister(self) -> None:
        if self.registered:
            self.registered = False
            self._engine.end_transaction(self.txn_id, self.read_seq)

    def __del__(self) -> None:
        # dropped while open: the oracle must not keep its window open forever
        try:
            registered = self.registered
        except AttributeError:  # __init__ never ran
            return
        if registered:
            self.registered = False
            self._engine.transaction_dropped(self.txn_id, self.read_seq)

    # -- state ------------------------------------------------------------
    @property
    def status(self) -> str:
        """``"open"``, ``"committed"`` or ``"rolled back"``."""
        return self._status

    def _check(self) -> None:
        if self._status != "open":
            raise ClosedError(f"the transaction is {self._status}; begin a new one")
        self._engine.check_readable(self.read_seq)  # closed? fenced past what is durable?

    # -- what the commit path asks (kvstore.engine.commit.Committing) -------------
    def conflict_sets(
        self,
    ) -> tuple[tuple[Iterable[bytes], ...], list[tuple[bytes | None, bytes | None]]]:
        """What a commit after ``read_seq`` must not have written (the table above)."""
        if self._serializable:
            return (self._writes, self._locked, self._reads), self._ranges
        return (self._writes, self._locked), []

    def describe(self) -> str:
        return f"{self.isolation.name} transaction (read seq {self.read_seq})"

    # -- reads ----------------------------------------------------------------
    def _view(self) -> tuple[rp.State, int]:
        self._check()
        return self._engine.state, self.read_seq

    def get(self, key: bytes) -> bytes | None:
        """The value as of ``read_seq``, or this transaction's own write."""
        health = self._health
        if self._status != "open" or health.closed or health.fenced is not None:
            self._check()
        if type(key) is not bytes or not key or len(key) > MAX_KEY_LEN:
            key = _validate.key(key)
        writes = self._writes
        if key in writes:
            return writes[key]
        if self._serializable:
            self._reads.add(key)
        return rp.get(self._engine.state, key, self.read_seq)

    def get_for_update(self, key: bytes) -> bytes | None:
        """Read ``key`` and make a concurrent write to it a conflict, even under SNAPSHOT."""
        self._check()
        k = _validate.key(key)
        locked = self._locked if isinstance(self._locked, set) else set()
        locked.add(k)
        self._locked = locked
        if k in self._writes:
            return self._writes[k]
        return rp.get(self._engine.state, k, self.read_seq)

    def _scan(
        self, state: rp.State, s: bytes | None, e: bytes | None, reverse: bool, seq: int
    ) -> Iterator[tuple[bytes, bytes]]:
        """As of ``read_seq``, with own writes merged (they win)."""
        if self._serializable:
            self._ranges.append((s, e))  # the requested range, consumed or not
        own = OwnWrites(self._writes, seq) if self._writes else None
        return rp.scan(state, s, e, reverse, seq, own)

    # -- writes -------------------------------------------------------------------
    def put(self, key: bytes, value: bytes) -> None:
        if self._status != "open" or self._health.closed:
            self._check()
        if type(key) is not bytes or not key or len(key) > MAX_KEY_LEN:
            key = _validate.key(key)
        if type(value) is not bytes:
            value = _validate.value(value)
        writes = self._writes
        if key in writes:
            del writes[key]  # the latest operation on a key goes last
        writes[key] = value

    def put_many(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """:meth:`put` for every ``(key, value)`` pair, in order (same checks, same
        errors); new plain-``bytes`` keys are checked and added in a few C-level
        passes (as :meth:`WriteBatch.put_many`)."""
        if self._status != "open" or self._health.closed:
            self._check()
        pairs = items if isinstance(items, (list, tuple)) else list(items)
        new = _validate.fresh_pairs(pairs, self._writes)
        if new is not None:
            self._writes.update(new)
            return
        for item in pairs:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise TypeError(f"put_many takes (key, value) pairs, not {item!r:.40}")
            self.put(*item)

    def delete(self, key: bytes) -> None:
        self._check()
        k = _validate.key(key)
        self._writes.pop(k, None)
        self._writes[k] = None

    # -- outcome ----------------------------------------------------------------
    def commit(self, *, durable: bool = True) -> int | None:
        """Commit atomically; returns the seq, or None when nothing was written.

        Raises :class:`~kvstore.errors.TransactionConflict` (nothing of this
        transaction becomes visible; retry it) or
        :class:`~kvstore.errors.TransactionExpired`.
        """
        if self._status != "open" or self._health.closed:
            self._check()
        if durable is not True and durable is not False:
            _validate.flag(durable, "durable")
        outcome = "rolled back"
        try:
            writes = self._writes
            if not writes:
                outcome = "committed"
                return None
            seq = self._engine.commit(list(writes), list(writes.values()), durable, self)
            outcome = "committed"
            return seq
        finally:
            self._status = outcome
            if self.registered:  # else the commit step already unregistered it
                self._unregister()

    def rollback(self) -> None:
        """Discard the transaction's writes. Idempotent after commit or rollback."""
        if self._status == "open":
            self._status = "rolled back"
            self._unregister()

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._status != "open":
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()

    def __repr__(self) -> str:
        return (
            f"<kvstore.Transaction {self.isolation.name} read_seq={self.read_seq} "
            f"{self._status}, {len(self._writes)} writes>"
        )
