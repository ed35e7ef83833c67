"""The commit path: one step under the commit lock per write.

::

    commit(keys, values) ─► [commit lock] stall? ─ conflict? ─ seq = last_seq + 1
                              ─ WAL append ─ memtable apply ─ publish last_seq
                            ─► durable: WAL sync (group commit), mark durable

So seq order, WAL order and memtable order are the same, and ``last_seq``
is published only after the write is applied: a reader that takes
``seq = last_seq`` and then the current :class:`~kvstore.readpath.State`
sees every write at or below ``seq``.

A transaction brings its own conflict keys (:class:`Committing`); the
oracle checks them against the commits after its read seq. The
:class:`CommitPath` also owns what readers see: the engine ``state``, the
visible seq (after a fence, the last *durable* one), the pinned seqs of
snapshots and running transactions, and the oracle's registrations.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import NoReturn, Protocol

from kvstore import readpath as rp
from kvstore.clock import Clock
from kvstore.engine.health import Health
from kvstore.engine.manifests import ManifestWriter
from kvstore.engine.retention import Retention
from kvstore.errors import (
    CorruptionError,
    FencedError,
    KvError,
    SnapshotTooOld,
    TransactionConflict,
    TransactionExpired,
)
from kvstore.memtable import Memtable
from kvstore.options import Options
from kvstore.oracle import Oracle
from kvstore.wal import JournalWal, ObjectWal

log = logging.getLogger("kvstore")

Range = tuple[bytes | None, bytes | None]


class Committing(Protocol):
    """What a transaction shows the commit path."""

    read_seq: int
    txn_id: int
    #: in the oracle and pinning ``read_seq``; the commit step clears it when it
    #: publishes the write (nothing is left to end afterwards)
    registered: bool

    def conflict_sets(self) -> tuple[tuple[Iterable[bytes], ...], list[Range]]:
        """The key sets and ranges a later commit must not have written."""
        ...

    def describe(self) -> str: ...


class CommitPath:
    def __init__(
        self,
        options: Options,
        clock: Clock,
        health: Health,
        manifests: ManifestWriter,
        retention: Retention,
        wal: JournalWal | ObjectWal,
        state: rp.State,
        last_seq: int,
        counters: Counter[str],
    ) -> None:
        self._opts = options
        self._clock = clock
        self.monotonic: Callable[[], float] = clock.monotonic  # transaction TTLs
        self.health = health
        self._manifests = manifests
        self._retention = retention
        self._by_age = retention.by_age
        self.wal = wal
        self.state = state
        self.last_seq = last_seq
        self.durable_seq = last_seq  # every write up to it is synced or in an SST
        self._durable_lock = threading.Lock()
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.oracle = Oracle()
        self.snapshots = retention.snapshots
        #: open transactions that were garbage-collected, not yet forgotten
        self.dropped: deque[tuple[int, int]] = deque()
        self.counters = counters
        self.write_count = 0  # commits; with user_bytes, counted under the commit lock
        self.user_bytes = 0  # key and value bytes committed
        #: runs pending flushes in the caller's thread (no background flusher)
        self.flush_pending: Callable[[], None] = lambda: None
        health.on_fenced(self._log_fenced)

    # -- health ----------------------------------------------------------------
    def _log_fenced(self) -> None:
        durable, last = self.durable_seq, self.last_seq
        if durable < last:
            lost = (
                f"lost: seq {durable + 1}..{last}, applied by this handle but never made "
                "durable (the new writer does not have them; this handle no longer shows them)"
            )
        else:
            lost = "nothing this handle wrote was lost"
        log.warning(
            "%s: another writer took over the store, so this handle is fenced. Kept: every "
            "write up to seq %d (made durable before the takeover); %s. This handle can no "
            "longer write (each write raises FencedError): close it, and open the store "
            "again to write (that fences the other writer in turn)",
            self._manifests.store.describe(),
            durable,
            lost,
        )

    def check_writable(self) -> None:
        health = self.health
        health.check_open()
        wal = self.wal
        if health.fenced is None and isinstance(wal.error, FencedError):
            health.mark_fenced(wal.error)
        health.raise_if_fenced()
        if wal.error is not None:  # an I/O error: nothing after it may be published
            wal.raise_if_failed()
        health.raise_if_broken()
        err = health.bg_error
        if err is not None and not isinstance(err, Exception):
            raise KvError(f"background flush died: {err!r}")

    def mark_durable(self, seq: int) -> None:
        """Every write up to ``seq`` is on stable storage (a sync or flush returned)."""
        lock = self._durable_lock
        lock.acquire()
        try:
            if seq > self.durable_seq:
                self.durable_seq = seq
        finally:
            lock.release()

    def visible_seq(self) -> int:
        """The seq reads use: the last committed one, or after a fence the last durable.

        From a fence on, reads see only what this handle made durable: writes
        it applied in memory that no sync or flush completed are never shown
        again, since the new writer does not have them."""
        seq = self.last_seq
        if self.health.fenced is not None:
            return min(seq, self.durable_seq)
        return seq

    def check_readable(self, seq: int) -> None:
        """Refuse a read at ``seq`` (a snapshot's, a transaction's) that a fence made
        unreliable: it may show writes that never became durable."""
        health = self.health
        health.check_open()
        if health.fenced is not None and seq > self.durable_seq:
            raise FencedError(
                f"{health.fenced}; this view (seq {seq}) includes writes that were never "
                f"made durable (durable up to seq {self.durable_seq})"
            )

    # -- writes ----------------------------------------------------------------
    def commit(
        self,
        keys: list[bytes],
        values: list[bytes | None],
        durable: bool,
        txn: Committing | None = None,
    ) -> int:
        if self.dropped:
            self.forget_dropped()
        wal = self.wal
        health = self.health
        if (  # check_writable() acts only when one of these is set
            health.closed
            or health.fenced is not None
            or health.broken is not None
            or health.bg_error is not None
            or wal.error is not None
        ):
            self.check_writable()
        if not durable:
            manifests = self._manifests
            cell = manifests.epoch_cell
            if cell is None or cell.read() > manifests.epoch:  # else nothing is newer
                manifests.quick_fence_check()
        opts = self._opts
        oracle = self.oracle
        olock = oracle.lock
        # Locks on this path are taken with acquire/release rather than `with`:
        # a `with` block costs about three times as much, and a transaction
        # commit takes four. The commit lock is the lock of self.cond.
        lock = self.lock
        lock.acquire()
        try:
            if (
                health.closed
                or health.fenced is not None
                or health.broken is not None
                or health.bg_error is not None
                or wal.error is not None
            ):
                self.check_writable()
            st = self.state
            if len(st.immutable) >= opts.max_immutable_memtables:
                self._stall()
                st = self.state
            now = self.monotonic()
            if txn is not None:  # expired? conflict? (see kvstore.oracle)
                key_sets, ranges = txn.conflict_sets()
                olock.acquire()
                try:
                    found = oracle.check_locked(
                        txn.txn_id, txn.read_seq, key_sets, ranges, now, opts.transaction_ttl
                    )
                finally:
                    olock.release()
                if found is not None:
                    self._refuse(txn, found)
            seq = self.last_seq + 1
            lsn = wal.append_record(seq, keys, values)
            self.user_bytes += st.active.apply(seq, keys, values)
            self.write_count += 1
            olock.acquire()  # atomic with transaction begin: see begin_transaction()
            try:
                oracle.commit_locked(
                    seq, keys, None if txn is None else txn.txn_id, now, opts.transaction_ttl
                )
                self.last_seq = seq
            finally:
                olock.release()
            if txn is not None:  # it no longer pins its snapshot either
                txn.registered = False
                self.snapshots.remove(txn.read_seq)
            if st.active.size >= opts.memtable_bytes:
                self.freeze_locked()
        finally:
            lock.release()
        if self._by_age:
            self._retention.sample(seq, self._clock.time())
        if opts.background_compaction and len(self.state.l0) >= opts.l0_slowdown_ssts:
            self.counters["write_slowdowns"] += 1
            self._clock.sleep(0.001)  # let compaction catch up before writers must stop
        if durable:
            wal.sync(lsn)
            self.mark_durable(seq)
        elif wal.pending_bytes >= opts.wal_buffer_bytes:
            wal.write_out()
        if not opts.background_flush and self.state.immutable:
            self.flush_pending()
        return seq

    def _refuse(self, txn: Committing, found: bool | bytes) -> NoReturn:
        """Raise what :meth:`Oracle.check_locked` found: expiry (True) or a conflict key."""
        if found is True:
            raise TransactionExpired(
                f"transaction ran longer than transaction_ttl={self._opts.transaction_ttl}s"
            )
        self.counters["conflicts"] += 1
        raise TransactionConflict(
            f"{txn.describe()} conflicts on key {found!r}, written by a transaction "
            "that committed after it began; retry it"
        )

    def _stall(self) -> None:
        """Wait (commit lock held via the condition) until a frozen memtable is flushed."""
        self.counters["stalls"] += 1
        started = self._clock.monotonic()
        while len(self.state.immutable) >= self._opts.max_immutable_memtables:
            self.check_writable()
            if not self._opts.background_flush:
                self.cond.release()
                try:
                    self.flush_pending()
                finally:
                    self.cond.acquire()
                continue
            err = self.health.bg_error
            if isinstance(err, (CorruptionError, FencedError)):
                raise KvError(f"memtable flush cannot proceed: {err}") from err
            self.cond.wait(0.5)
        self.counters["stall_ms"] += int((self._clock.monotonic() - started) * 1000)

    def freeze_locked(self) -> None:
        """Freeze the active memtable (commit lock held); the WAL rotates with it."""
        st = self.state
        if not len(st.active):
            return
        wal_start = self.wal.rotate()
        self.state = replace(st, active=Memtable(wal_start), immutable=(st.active, *st.immutable))
        self.cond.notify_all()

    def sync_all(self) -> None:
        """Make every committed write durable."""
        seq = self.last_seq  # published after its frame was appended: lsn covers it
        self.wal.sync(self.wal.appended)
        self.mark_durable(seq)

    def wake_all(self) -> None:
        with self.cond:
            self.cond.notify_all()

    # -- snapshots and transactions -------------------------------------------------
    def view(self) -> tuple[rp.State, int]:
        """The state and seq a read of the latest data uses."""
        health = self.health
        if health.closed:
            health.check_open()
        seq = self.last_seq if health.fenced is None else self.visible_seq()
        return self.state, seq

    def pin(self, seq: int | None) -> int:
        """Pin a snapshot at ``seq`` (default: the latest); returns the seq."""
        self.health.check_open()
        with self.snapshots.lock:
            latest = self.visible_seq()
            if seq is None:
                seq = latest
            else:
                if isinstance(seq, bool) or not isinstance(seq, int):
                    raise TypeError(f"seq must be an int, not {type(seq).__name__}")
                if seq < 0 or seq > latest:
                    raise ValueError(f"seq {seq} is outside 0..{latest}")
                floor = self._retention.floor_seq
                if seq < floor:
                    raise SnapshotTooOld(
                        f"seq {seq} is no longer retained (oldest readable seq is {floor})"
                    )
            self.snapshots.add(seq)
        return seq

    def release(self, seq: int) -> None:
        """Unpin a snapshot's seq."""
        self.snapshots.remove(seq)

    def begin_transaction(self) -> tuple[int, int]:
        """Register a transaction with the oracle; returns ``(txn id, read seq)``.

        The caller checked that the engine is open."""
        if self.dropped:
            self.forget_dropped()
        oracle = self.oracle
        now = self.monotonic()
        health = self.health
        snapshots = self.snapshots
        slock = snapshots.lock
        olock = oracle.lock
        slock.acquire()  # acquire/release, not `with`: see commit
        try:
            olock.acquire()
            try:
                # last_seq is published under oracle.lock together with the oracle
                # record, so every commit after read_seq is visible to the check.
                read_seq = self.last_seq if health.fenced is None else self.visible_seq()
                txn_id = oracle.begin_locked(read_seq, now, self._opts.transaction_ttl)
            finally:
                olock.release()
            snapshots.add(read_seq)
        finally:
            slock.release()
        return txn_id, read_seq

    def end_transaction(self, txn_id: int, read_seq: int) -> None:
        """Forget a transaction that ended without committing a write."""
        self.oracle.end(txn_id)
        self.snapshots.remove(read_seq)

    def transaction_dropped(self, txn_id: int, read_seq: int) -> None:
        """An open transaction was garbage-collected (``Transaction.__del__``).

        The collector may run inside any allocation, also while this thread
        holds the oracle or snapshot lock, so nothing is locked here: the
        transaction is queued (``deque.append`` is atomic) and forgotten by
        the next begin, commit, ``stats()`` or ``close()``.
        """
        self.dropped.append((txn_id, read_seq))

    def forget_dropped(self) -> None:
        dropped = self.dropped
        while dropped:
            try:
                txn_id, read_seq = dropped.popleft()
            except IndexError:  # another thread took the last one
                return
            self.end_transaction(txn_id, read_seq)
