"""The database: a facade over the engine's parts (:mod:`kvstore.engine`).

``DB`` builds the parts, recovers the store, starts the background threads,
and hands out snapshots and transactions over the narrow engine protocol.
It owns no engine state of its own::

    put / delete / write ─► CommitPath ─► WAL (group commit) + memtable
    get / scan / snapshot / transaction ─► CommitPath.view / pin / begin
    flush ─► CommitPath.freeze + Flusher      compact ─► Compactor + GC
    checkpoints ─► Checkpoints                 retention ─► Retention
    open ─► recovery.recover (claim, replay, first manifest)

The write path, flush, fencing and recovery are described in the modules
that own them: :mod:`kvstore.engine.commit`, :mod:`kvstore.engine.flusher`,
:mod:`kvstore.engine.manifests`, :mod:`kvstore.engine.recovery`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvstore import _validate, ownership, paths
from kvstore import readpath as rp
from kvstore.batch import WriteBatch
from kvstore.cache import BlockCache
from kvstore.clock import Clock, as_clock
from kvstore.engine.checkpoints import Checkpoints, check_checkpoint_name, check_expiry
from kvstore.engine.commit import CommitPath
from kvstore.engine.compactor import CompactionStopped, Compactor
from kvstore.engine.flusher import Flusher
from kvstore.engine.gc import GarbageCollector
from kvstore.engine.health import Health
from kvstore.engine.manifests import ManifestWriter
from kvstore.engine.recovery import recover
from kvstore.engine.retention import Retention, SeqRegistry
from kvstore.engine.sstfiles import SstFiles
from kvstore.engine.stats import engine_stats
from kvstore.errors import ClosedError, FencedError
from kvstore.ids import IdGenerator
from kvstore.objstore import LocalStore, MemoryStore, ObjectStore
from kvstore.options import Options
from kvstore.reads import ReadSurface
from kvstore.snapshot import Snapshot
from kvstore.txn import Isolation, Transaction

if TYPE_CHECKING:
    from kvstore.format.manifest import Manifest

log = logging.getLogger("kvstore")


@dataclass(frozen=True)
class EngineParts:
    """The engine's parts behind a :class:`DB` (see :mod:`kvstore.engine`), by name.

    For tools and white-box tests that observe or drive one part: a
    compaction step at a chosen moment, a fault injected into one call, a
    lock spied on. Applications use the DB's own methods; the parts' APIs
    follow the engine, not a compatibility promise.
    """

    store: ObjectStore
    health: Health
    files: SstFiles
    manifests: ManifestWriter
    retention: Retention
    checkpoints: Checkpoints
    commit: CommitPath
    gc: GarbageCollector
    compactor: Compactor
    flusher: Flusher
    #: the local writer lock (None on stores that cannot tell a live writer)
    ownership: ownership.Ownership | None
    #: engine counters (flushes, stalls, compaction errors, ...), shared by the parts
    counters: Counter[str]


class DB(ReadSurface):
    """An open kvstore (the single writer). Use :func:`kvstore.open`."""

    def __init__(
        self,
        store: ObjectStore,
        options: Options,
        *,
        clock: Clock | Callable[[], float] | None = None,
    ) -> None:
        clock = as_clock(clock)  # options.seed seeds SST names only, as before
        self._store = store
        self._opts = options
        self._clock = clock
        # the WAL may live on a local disk while manifests and SSTs live at the URL
        wal_store: ObjectStore = (
            LocalStore(options.wal_dir, fsync=options.fsync) if options.wal_dir else store
        )
        self._counters: Counter[str] = Counter()
        self._health = health = Health(store.describe())
        self._cache = BlockCache(options.block_cache_bytes)
        self._files = files = SstFiles(
            store, options, IdGenerator(options.seed, clock.time, rng=clock), self._cache
        )
        # Non-durable writes check for fencing on every write where that is
        # cheap: a memory-mapped epoch cell on local disk, a dict on memory://.
        # Other stores check at most every fence_check_interval seconds.
        # The cell lives with the WAL: with wal_dir, beside the local journal.
        opener = getattr(wal_store, "open_epoch_cell", None) or getattr(
            store, "open_epoch_cell", None
        )
        self._manifests = manifests = ManifestWriter(
            store,
            health,
            files,
            clock,
            epoch_cell=opener(paths.EPOCH_CELL) if opener is not None else None,
            fence_interval=0.0 if isinstance(store, MemoryStore) else options.fence_check_interval,
        )
        self._retention = retention = Retention(options, clock, SeqRegistry(), manifests)
        self._checkpoints = checkpoints = Checkpoints(manifests, files, clock)
        self._ownership: ownership.Ownership | None = None
        try:
            # a local directory refuses a second live writer (WriterActive) unless
            # takeover; the lock is held until close (see kvstore.ownership)
            self._ownership = ownership.acquire(
                store, takeover=options.takeover, latest_epoch=manifests.latest_epoch
            )
            got = recover(
                store,
                wal_store,
                options,
                clock,
                health,
                manifests,
                files,
                retention,
                checkpoints,
                self._ownership,
            )
        except BaseException:
            manifests.close()  # nothing else is held yet
            if self._ownership is not None:
                self._ownership.release()
            raise
        self._commit = commit = CommitPath(
            options,
            clock,
            health,
            manifests,
            retention,
            got.wal,
            got.state,
            got.last_seq,
            self._counters,
        )
        self._gc = GarbageCollector(
            options, clock, health, manifests, files, checkpoints, self._counters
        )
        self._compactor = Compactor(
            options,
            clock,
            health,
            commit,
            manifests,
            files,
            retention,
            self._gc,
            self._counters,
        )
        self._flusher = Flusher(
            options,
            clock,
            health,
            commit,
            manifests,
            files,
            retention,
            self._compactor,
            self._counters,
        )
        commit.flush_pending = self._flusher.flush_pending
        self._parts = EngineParts(
            store,
            health,
            files,
            manifests,
            retention,
            checkpoints,
            commit,
            self._gc,
            self._compactor,
            self._flusher,
            self._ownership,
            self._counters,
        )
        if options.background_compaction:
            self._compactor.start()
        if options.background_flush:
            self._flusher.start()

    # ------------------------------------------------------------------
    # writes
    # ------------------------------------------------------------------
    def put(self, key: bytes, value: bytes, *, durable: bool = True) -> int:
        """Write ``key = value``; returns the write's sequence number."""
        k = _validate.key(key)
        v = _validate.value(value)
        return self._commit.commit([k], [v], _validate.flag(durable, "durable"))

    def delete(self, key: bytes, *, durable: bool = True) -> int:
        """Write a tombstone for ``key``; returns the sequence number."""
        k = _validate.key(key)
        return self._commit.commit([k], [None], _validate.flag(durable, "durable"))

    def write(self, batch: WriteBatch, *, durable: bool = True) -> int:
        """Apply every operation of ``batch`` atomically under one sequence number."""
        if not isinstance(batch, WriteBatch):
            raise TypeError(f"batch must be a kvstore.WriteBatch, not {type(batch).__name__}")
        if not len(batch):
            raise ValueError("batch is empty")
        keys, values = batch.columns()
        return self._commit.commit(keys, values, _validate.flag(durable, "durable"))

    # ------------------------------------------------------------------
    # reads, snapshots, transactions
    # ------------------------------------------------------------------
    def _view(self) -> tuple[rp.State, int]:
        return self._commit.view()

    def snapshot(self, seq: int | None = None) -> Snapshot:
        """A consistent read view at the latest seq, or at an older retained ``seq``."""
        return Snapshot(self._commit, self._commit.pin(seq))

    def transaction(self, isolation: Isolation = Isolation.SNAPSHOT) -> Transaction:
        """Begin an optimistic transaction at ``isolation`` (see :mod:`kvstore.txn`)."""
        if self._health.closed:
            raise ClosedError("the database is closed")
        if not isinstance(isolation, Isolation):
            raise TypeError(
                f"isolation must be a kvstore.Isolation, not {type(isolation).__name__}"
            )
        txn_id, read_seq = self._commit.begin_transaction()
        return Transaction(self._commit, isolation, txn_id, read_seq)

    @property
    def options(self) -> Options:
        """The options this store was opened with (frozen)."""
        return self._opts

    @property
    def last_seq(self) -> int:
        """The highest committed sequence number (after a fence: the highest durable one)."""
        return self._commit.visible_seq()

    @property
    def manifest(self) -> Manifest:
        """The current manifest: the SSTs of the tree, checkpoints, claims, the WAL
        location, the retention watermark (a frozen value; read-only inspection)."""
        return self._manifests.current

    @property
    def parts(self) -> EngineParts:
        """The engine's parts, for tools and white-box tests (see :class:`EngineParts`)."""
        return self._parts

    # ------------------------------------------------------------------
    # maintenance
    # ------------------------------------------------------------------
    def flush(self) -> None:
        """Make every write durable and flush the memtable to an SST.

        Like a write, it waits while L0 is full and compaction is failing
        (compaction retries; ``stats()["compaction_error"]`` says why).
        """
        commit = self._commit
        commit.check_writable()
        commit.sync_all()
        with commit.cond:
            commit.freeze_locked()
        self._flusher.wait_flushed()

    def compact(self, *, progress: Callable[[int, int], None] | None = None) -> None:
        """Flush, then compact until everything is one sorted run; then collect garbage.

        Runs in the caller's thread (the background compactor waits).
        ``progress(done, total)``, if given, is called as the merge reads its
        input, in bytes of input SSTs (``total`` is every SST in the tree
        when compaction starts; it grows if concurrent writes add more), and
        once more with ``done == total`` at the end.
        """
        if progress is not None and not callable(progress):
            raise TypeError("progress must be a callable (done, total) or None")
        self.flush()
        done = 0
        total = sum(s.size for s in self._manifests.current.all_ssts())
        tick: Callable[[int], None] | None = None
        if progress is not None:

            def tick(n: int) -> None:
                nonlocal done, total
                done += n
                total = max(total, done)
                progress(done, total)

        try:
            self._compactor.compact_all(tick)
        except CompactionStopped:
            raise ClosedError("the database was closed while compact() ran") from None
        self.collect_garbage()
        if progress is not None:
            progress(total, total)

    def collect_garbage(self, *, grace_seconds: float | None = None) -> dict[str, int]:
        """Delete SSTs and manifests nothing references any more; returns counts.

        Files are deleted only once they have been unreferenced for
        ``grace_seconds`` (default: the ``gc_grace_seconds`` option), so
        readers in other processes can finish with an older manifest.
        Expired checkpoints are removed first. Files pinned by a checkpoint
        stay.
        """
        self._health.check_open()
        return self._gc.collect(grace_seconds)

    @property
    def retention_watermark(self) -> int | None:
        """Reads at seqs at or above this stay exact; None when no watermark is kept."""
        return self._retention.public_watermark()

    def set_retention_watermark(self, seq: int) -> int:
        """Raise the retention watermark to ``seq`` (it never goes down); returns it.

        Versions only readable below the watermark become garbage for
        compaction; ``db.snapshot(seq=s)`` keeps working for ``s >= watermark``.
        On a store without a watermark this starts keeping versions from
        ``max(seq, oldest readable seq)`` on.
        """
        self._commit.check_writable()
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise TypeError(f"seq must be an int, not {type(seq).__name__}")
        if seq < 0:
            raise ValueError(f"seq must be >= 0, got {seq}")
        floor = self._retention.floor()
        current = self._manifests.current.retention_seq
        target = max(seq, floor, current or 0)
        if current != target:
            self._manifests.advance(
                lambda m: m.evolve(retention_seq=max(target, m.retention_seq or 0))
            )
        return target

    def create_checkpoint(self, name: str, *, expires_in: float | None = None) -> dict[str, Any]:
        """Persist a named, consistent view of the store; returns its description.

        Everything written before the call is flushed first; the checkpoint
        reads the store as of the returned ``seq``. Its files stay until
        :meth:`delete_checkpoint` or, with ``expires_in`` seconds, until it
        expires. Read it with ``kvstore.open_reader(url, checkpoint=name)``.
        """
        check_checkpoint_name(name)
        check_expiry(expires_in)
        self.flush()
        return self._checkpoints.create(name, expires_in)

    def list_checkpoints(self) -> list[dict[str, Any]]:
        """Every checkpoint, oldest first, with its seq, manifest and expiry."""
        self._health.check_open()
        return self._checkpoints.list()

    def delete_checkpoint(self, name: str) -> None:
        """Remove a checkpoint; its files become garbage once nothing else needs them."""
        check_checkpoint_name(name)
        self._commit.check_writable()
        self._checkpoints.delete(name)

    def stats(self) -> dict[str, Any]:
        """Counters and sizes: memtables, levels, cache, WAL, flushes, stalls."""
        self._health.check_open()
        commit = self._commit
        if commit.dropped:
            commit.forget_dropped()
        return engine_stats(
            commit,
            self._manifests,
            self._files,
            self._retention,
            self._compactor,
            self._cache,
            self._counters,
        )

    # ------------------------------------------------------------------
    # closing
    # ------------------------------------------------------------------
    def close(self) -> None:
        """Flush what must be flushed and stop background threads. Idempotent."""
        health = self._health
        if health.closed:
            return
        error: BaseException | None = None
        health.closing = True
        commit = self._commit
        try:
            if (
                health.fenced is None
                and health.broken is None
                and (health.bg_error is None or isinstance(health.bg_error, Exception))
            ):
                self.flush()
        except BaseException as exc:
            error = exc
        finally:
            # stop the background threads first (a running compaction abandons its
            # work at the next output SST), then refuse further calls
            with commit.cond:
                health.stopping = True
                commit.cond.notify_all()
            self._compactor.wanted.set()
            self._flusher.join(timeout=30)
            self._compactor.join(timeout=60)
            health.closed = True
            wal = commit.wal
            try:
                wal.close() if error is None else None
            except BaseException as exc:
                error = error or exc
            if error is None:
                try:
                    self._manifests.record_clean_close(commit.last_seq)
                except BaseException as exc:  # a simulated crash, an interrupt
                    error = exc
            wal.release()
            self._manifests.close()
            if self._ownership is not None:
                self._ownership.release()
        if error is not None and not isinstance(error, FencedError):
            raise error

    def abandon(self) -> None:
        """Let go of the store as a killed process does (for crash tests in one process).

        Nothing is flushed, synced or recorded: the WAL's open segment is
        closed as it stands (frames written out stay, buffered ones are lost),
        the local writer lock is dropped, not released (see
        :meth:`kvstore.ownership.Ownership.drop_lock`), and the handle counts
        as closed. Background threads are not stopped: open with
        ``background_flush=False, background_compaction=False``. After
        :meth:`close` it only closes the WAL segment again (a no-op).
        """
        health = self._health
        self._commit.wal.release()
        if health.closed:
            return
        if self._ownership is not None:
            self._ownership.drop_lock()
        health.closed = True

    def __enter__(self) -> DB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._health.closed else f"seq={self._commit.last_seq}"
        return f"<kvstore.DB {self._store.describe()} {state}>"
