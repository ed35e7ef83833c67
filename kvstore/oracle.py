"""The transaction oracle: who committed what, recently enough to matter.

Optimistic concurrency as in the SlateDB transaction RFC (Badger style). A
transaction reads a snapshot at ``read_seq`` and buffers its writes. At commit,
on the single commit path, the oracle asks: did anything that committed
*after* ``read_seq`` write a key this transaction must not have raced?

* SNAPSHOT: the keys it writes (and locks with ``get_for_update``):
  first-committer-wins.
* SERIALIZABLE: also every key it read and every key *range* it scanned
  (the requested range, so a row inserted into an empty range is a conflict
  too: that is how phantoms are caught).

Timeline of a write-skew under SERIALIZABLE::

    seq:      10            11               12
    T1:  begin(read 10) ─ read a ─ write b ─────────── commit -> seq 11 ✓
    T2:  begin(read 10) ─ read b ─ write a ─────────────────────── commit ✗
                                   b was written at 11 > T2.read_seq (10)
                                   and T2 read b: conflict

Data kept: for each recently written key, the seq of its latest write
(``_last_write``), plus a sorted index of those keys for range checks, plus
a commit-ordered log used to trim. A check costs O(keys read + keys written
+ log n per range + keys written inside the ranges): proportional to the keys
involved, not to the number of recent commits.

Trimming: a record at seq ``s`` can only conflict with a transaction whose
``read_seq < s``. Records at or below the oldest running (unexpired)
transaction's ``read_seq`` are dropped; with no transaction running the
oracle is empty (slatedb #1379 was this list growing without bound).
Transactions older than their time-to-live stop holding the window open and
fail at commit with :class:`~kvstore.errors.TransactionExpired`.

On the commit path (under the database's commit lock) the oracle is entered
twice, each time under :attr:`Oracle.lock`, which a begin also takes while it
reads ``last_seq``::

    check_locked:  expire old transactions ─ this one expired? ─ conflict?
    (WAL append, memtable apply)
    commit_locked: this transaction stops running ─ record the write if any
                   other transaction runs ─ trim; then, still under the lock,
                   the database publishes last_seq

A write is recorded only while another transaction runs: a transaction that
begins after the publish reads at its seq or above, so cannot conflict with
it, and the committing one is done.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from itertools import count
from typing import cast

from sortedcontainers import SortedList


class Oracle:
    """Running transactions and recent commits; every method runs under :attr:`lock`.

    Methods named ``*_locked`` expect the caller to hold :attr:`lock` (the
    database's commit path takes it twice per commit: once for
    :meth:`check_locked`, once for :meth:`commit_locked`); the others take it.
    """

    def __init__(self) -> None:
        self._last_write: dict[bytes, int] = {}
        self._keys = SortedList()
        self._log: deque[tuple[int, tuple[bytes, ...]]] = deque()
        # running transactions in begin order: id -> (read_seq, started); begin order is
        # read_seq order, so the first entry is both the oldest and the horizon
        self._active: dict[int, tuple[int, float]] = {}
        self._expired: set[int] = set()
        self._ids = count(1)
        self.lock = threading.Lock()
        self.expirations = 0

    # -- transaction lifetime ------------------------------------------------
    def begin_locked(self, read_seq: int, now: float, ttl: float) -> int:
        """Register a transaction; caller holds :attr:`lock` while taking read_seq.

        Expires transactions older than ``ttl`` first, so a begin never extends
        a window that only expired transactions hold open.
        """
        active = self._active
        if active and now - next(iter(active.values()))[1] >= ttl:
            self._expire_locked(now, ttl)
        txn_id = next(self._ids)
        active[txn_id] = (read_seq, now)
        return txn_id

    def end(self, txn_id: int) -> None:
        with self.lock:
            self._active.pop(txn_id, None)
            if self._expired:
                self._expired.discard(txn_id)
            self._trim_locked()

    def _expire_locked(self, now: float, ttl: float) -> int:
        """Stop holding the window open for transactions older than ``ttl`` seconds.

        Callers first test the oldest running transaction inline (``now -
        started >= ttl``), so the common case costs no call.
        """
        expired = 0
        active = self._active
        while active:
            txn_id = next(iter(active))
            if now - active[txn_id][1] < ttl:
                break
            del active[txn_id]
            self._expired.add(txn_id)
            expired += 1
        if expired:
            self.expirations += expired
            self._trim_locked()
        return expired

    @property
    def running(self) -> int:
        return len(self._active)

    def tracked_keys(self) -> int:
        return len(self._last_write)

    # -- commit path (caller holds the DB commit lock and :attr:`lock`) ---------------
    def check_locked(
        self,
        txn_id: int,
        read_seq: int,
        key_sets: Iterable[Iterable[bytes]],
        ranges: Iterable[tuple[bytes | None, bytes | None]],
        now: float,
        ttl: float,
    ) -> bool | bytes | None:
        """Before a transaction commits: True when it has expired, else a key
        written after ``read_seq`` among ``key_sets`` or inside ``ranges``,
        else None.

        Expiry and the conflict check happen under one hold of :attr:`lock`,
        so no trim (by a concurrent begin, expire or end) can drop a record
        the check still needs: while the transaction is running, the horizon
        stays at or below its ``read_seq``.
        """
        active = self._active
        if active and now - next(iter(active.values()))[1] >= ttl:  # the oldest is too old
            self._expire_locked(now, ttl)
        if self._expired and txn_id in self._expired:
            return True
        last = self._last_write
        if not last:
            return None
        for keys in key_sets:
            for key in keys:
                seq = last.get(key)
                if seq is not None and seq > read_seq:
                    return key
        for start, end in ranges:
            for key in self._keys.irange(start, end, inclusive=(True, False)):
                seq = last.get(key)
                if seq is not None and seq > read_seq:
                    return cast(bytes, key)
        return None

    def commit_locked(
        self, seq: int, keys: list[bytes], txn_id: int | None, now: float, ttl: float
    ) -> None:
        """A write at ``seq`` is about to be published (caller holds :attr:`lock`).

        For a plain write (``txn_id`` None), transactions older than ``ttl``
        expire first (a committing transaction's :meth:`check_locked` just
        did that at the same ``now``). The committing transaction stops
        running. The write is remembered when some other transaction is still
        running: only one that began before ``seq`` is published can conflict
        with it, and a transaction that begins later (it takes its read_seq
        under this same lock) reads at ``seq`` or above.
        """
        active = self._active
        if not active:
            return
        ended = False
        if txn_id is None:
            if now - next(iter(active.values()))[1] >= ttl:
                self._expire_locked(now, ttl)
        else:
            ended = active.pop(txn_id, None) is not None
            if self._expired:
                self._expired.discard(txn_id)
        if active:
            self.record_locked(seq, keys)
        if ended:
            self._trim_locked()

    def record_locked(self, seq: int, keys: list[bytes]) -> None:
        """Remember a commit (caller holds :attr:`lock` and saw a running transaction)."""
        last = self._last_write
        new = [k for k in keys if k not in last]
        for key in keys:
            last[key] = seq
        if new:
            self._keys.update(new)
        # a tuple of bytes (unlike the list) is untracked by the cyclic GC, so a log
        # that a long transaction keeps growing adds nothing to collection pauses
        self._log.append((seq, tuple(keys)))

    def _trim_locked(self) -> None:
        if not self._active:
            if self._log:  # _last_write and _keys hold only keys of logged commits
                self._last_write.clear()
                self._keys.clear()
                self._log.clear()
            return
        horizon = next(iter(self._active.values()))[0]
        log = self._log
        last = self._last_write
        dropped: list[bytes] = []
        while log and log[0][0] <= horizon:
            seq, keys = log.popleft()
            for key in keys:
                if last.get(key) == seq:
                    del last[key]
                    dropped.append(key)
        if dropped:
            if len(dropped) > len(self._keys) // 2:
                self._keys = SortedList(last)
            else:
                for key in dropped:
                    self._keys.discard(key)

    def _check(self) -> None:
        with self.lock:
            assert set(self._keys) == set(self._last_write)
            seqs = [s for s, _ in self._log]
            assert seqs == sorted(seqs)
            rs = [r for r, _ in self._active.values()]
            assert rs == sorted(rs), "running transactions out of read_seq order"
