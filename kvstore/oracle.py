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
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from itertools import count

from sortedcontainers import SortedList


class Oracle:
    def __init__(self) -> None:
        self._last_write: dict[bytes, int] = {}
        self._keys = SortedList()
        self._log: deque[tuple[int, list[bytes]]] = deque()
        # running transactions in begin order: id -> (read_seq, started); begin order is
        # read_seq order, so the first entry is both the oldest and the horizon
        self._active: dict[int, tuple[int, float]] = {}
        self._expired: set[int] = set()
        self._ids = count(1)
        self.lock = threading.Lock()
        self.conflicts = 0
        self.checks = 0
        self.expirations = 0

    # -- transaction lifetime ------------------------------------------------
    def begin(self, read_seq: int, now: float) -> int:
        """Register a transaction; caller holds :attr:`lock` while taking read_seq."""
        txn_id = next(self._ids)
        self._active[txn_id] = (read_seq, now)
        return txn_id

    def end(self, txn_id: int) -> None:
        with self.lock:
            self._active.pop(txn_id, None)
            self._expired.discard(txn_id)
            self._trim_locked()

    def is_expired(self, txn_id: int) -> bool:
        return txn_id in self._expired

    def expire(self, now: float, ttl: float) -> int:
        """Stop holding the window open for transactions older than ``ttl`` seconds."""
        expired = 0
        with self.lock:
            active = self._active
            while active:
                txn_id, (_, started) = next(iter(active.items()))
                if now - started < ttl:
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

    # -- commit path (caller holds the DB commit lock) ---------------------------
    def conflicts_with(
        self,
        read_seq: int,
        keys: Iterable[bytes],
        ranges: Iterable[tuple[bytes | None, bytes | None]] = (),
    ) -> bytes | None:
        """A key written after ``read_seq`` among ``keys`` or inside ``ranges``, else None."""
        self.checks += 1
        last = self._last_write
        if not last:
            return None
        for key in keys:
            seq = last.get(key)
            if seq is not None and seq > read_seq:
                self.conflicts += 1
                return key
        for start, end in ranges:
            with self.lock:
                candidates = list(self._keys.irange(start, end, inclusive=(True, False)))
            for key in candidates:
                seq = last.get(key)
                if seq is not None and seq > read_seq:
                    self.conflicts += 1
                    return key
        return None

    def record_locked(self, seq: int, keys: list[bytes]) -> None:
        """Remember a commit (caller holds :attr:`lock` and saw a running transaction)."""
        last = self._last_write
        new = [k for k in keys if k not in last]
        for key in keys:
            last[key] = seq
        if new:
            self._keys.update(new)
        self._log.append((seq, keys))

    def _trim_locked(self) -> None:
        if not self._active:
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
