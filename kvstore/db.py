"""The database: write path, flush, recovery and fencing.

Write path (one step under the commit lock, so seq order = WAL order =
memtable order)::

    put/delete/write ──► seq = last_seq + 1 ──► WAL.append(frame) ──► memtable.apply
                                                       │
                        durable=True: WAL.sync(lsn) ◄──┘  (group commit, see wal.py)

The memtable is frozen at ``memtable_bytes`` (the WAL rotates with it, so
each frozen memtable owns a contiguous run of WAL segments); a background
thread flushes the oldest frozen memtable to an L0 SST, then advances the
manifest (new SST, ``last_flushed_seq``, ``wal_replay_from``) and deletes the
WAL segments the SST now covers. Writers stall while
``max_immutable_memtables`` frozen memtables wait (bounded memory).

Opening a writer (recovery and fencing)::

    1. load the latest manifest M (create manifest 1 for a new store)
    2. create manifest M.id+1 with writer_epoch+1       -> fences the old writer
    3. object WAL only: create an empty fence object at the next WAL id
    4. replay WAL segments >= M.wal_replay_from (torn tails cut), records with
       seq > last_flushed_seq
    5. flush the replayed records to an L0 SST, open a fresh WAL segment, and
       write a manifest whose wal_replay_from is that segment

Anything the old writer appends after step 4 lies below the new
``wal_replay_from`` and is never read; the old writer learns of the fence at
its next sync (journal: manifest check after fsync; object WAL: its next WAL id
is taken) or manifest write, and raises :class:`FencedError`.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any, NoReturn

from kvstore import _validate, ownership, paths
from kvstore import readpath as rp
from kvstore.batch import WriteBatch
from kvstore.cache import BlockCache
from kvstore.errors import (
    ClosedError,
    CorruptionError,
    FencedError,
    KvError,
    SnapshotTooOld,
    TransactionConflict,
    TransactionExpired,
)
from kvstore.format.manifest import MAX_CLAIMS, Manifest, SstMeta
from kvstore.format.sst import Columns, Entry, SstReader, build_sst
from kvstore.format.wal import encode_record, fence_object
from kvstore.ids import IdGenerator
from kvstore.maintenance import MaintenanceMixin
from kvstore.manifest_store import ManifestStore
from kvstore.memtable import Memtable
from kvstore.objstore import DurabilityUnknown, LocalStore, MemoryStore, ObjectStore
from kvstore.options import Options
from kvstore.oracle import Oracle
from kvstore.snapshot import SeqRegistry, Snapshot
from kvstore.txn import Isolation, Transaction
from kvstore.wal import (
    JournalWal,
    ObjectWal,
    ReplayResult,
    list_wal_ids,
    live_segment_missing,
    missing_seq,
    read_wal_identity,
    replay,
    sweep_wal_objects,
)

log = logging.getLogger("kvstore")


def open_sst(store: ObjectStore, meta: SstMeta, cache: BlockCache | None) -> rp.SstHandle:
    name = paths.sst_name(meta.id)
    reader = store.open_range_reader(name)
    view = getattr(reader, "view", None) if SstReader.uses_view() else None
    sst = SstReader(
        reader.read,
        meta.size,
        name=name,
        block_cache=cache,
        view=view() if view is not None else None,
    )
    if (sst.count, sst.min_seq, sst.max_seq, sst.first_key, sst.last_key) != (
        meta.count,
        meta.min_seq,
        meta.max_seq,
        meta.first_key,
        meta.last_key,
    ):
        raise CorruptionError("SST properties disagree with the manifest", object_name=name)
    return rp.SstHandle(meta, sst)


class DB(MaintenanceMixin):
    """An open kvstore (the single writer). Use :func:`kvstore.open`."""

    def __init__(self, store: ObjectStore, options: Options, *, clock: Any = time.time) -> None:
        self._store = store
        # the WAL may live on a local disk while manifests and SSTs live at the URL
        self._wal_store: ObjectStore = (
            LocalStore(options.wal_dir, fsync=options.fsync) if options.wal_dir else store
        )
        self._opts = options
        #: where this writer's WAL lives, as recorded in its manifests
        self._wal_dir = None if options.wal_dir is None else os.path.abspath(options.wal_dir)
        self._clock = clock
        self._mstore = ManifestStore(store)
        self._ids = IdGenerator(options.seed, clock)
        self._cache = BlockCache(options.block_cache_bytes)
        self._commit_lock = threading.Lock()
        self._cond = threading.Condition(self._commit_lock)
        self._flush_lock = threading.Lock()
        self._manifest_lock = threading.RLock()
        self._snapshots = SeqRegistry()
        #: open transactions that were garbage-collected, not yet forgotten
        self._dropped: deque[tuple[int, int]] = deque()
        self._oracle = Oracle()
        self._monotonic = time.monotonic
        self._floor_seq = 0  # reads at seqs below this may miss dropped versions
        self._closed = False
        self._fenced: FencedError | None = None
        #: every write up to this seq is durable (synced, or in an SST): after a
        #: fence, reads see no further (see _visible_seq)
        self._durable_seq = 0
        self._durable_lock = threading.Lock()
        self._bg_error: BaseException | None = None
        #: set when a manifest write failed and reading it back could not tell
        #: whether it landed: this handle stops (reopening reads the truth)
        self._broken: KvError | None = None
        self._stopping = False
        self._handles: dict[str, rp.SstHandle] = {}
        self._obsolete: list[tuple[float, str]] = []  # (when replaced, sst id)
        self._inflight: set[str] = set()  # SSTs written, not yet in a manifest
        self._wal_objects: list[int] = []  # object WAL ids holding data (never fences)
        self._last_fence_check = 0.0
        self._cell_checked = -1  # an epoch cell value found high without any fencing
        self._old_wal_store: ObjectStore | None = None  # the last writer's, if elsewhere
        self._switched_wal = False  # this writer's WAL is not where the last one's was
        self._counters: Counter[str] = Counter()
        self._write_count = 0  # commits; with _user_bytes, counted under the commit lock
        self._user_bytes = 0  # key and value bytes committed
        # Non-durable writes check for fencing on every write where that is
        # cheap: a memory-mapped epoch cell on local disk, a dict on memory://.
        # Other stores check at most every fence_check_interval seconds.
        # the cell lives with the WAL: with wal_dir, beside the local journal
        opener = getattr(self._wal_store, "open_epoch_cell", None) or getattr(
            store, "open_epoch_cell", None
        )
        self._epoch_cell = opener(paths.EPOCH_CELL) if opener is not None else None
        self._fence_interval = (
            0.0 if isinstance(store, MemoryStore) else options.fence_check_interval
        )
        self._age_retention = isinstance(options.retention, (int, float)) and not isinstance(
            options.retention, bool
        )
        self._init_maintenance()
        self._compactor: threading.Thread | None = None
        self._closing = False  # close() has begun: flushes no longer wait for L0 room
        self._ownership: ownership.Ownership | None = None
        try:
            # a local directory refuses a second live writer (WriterActive) unless
            # takeover; the lock is held until close (see kvstore.ownership)
            self._ownership = ownership.acquire(
                store, takeover=options.takeover, latest_epoch=self._latest_epoch
            )
            self._recover()
        except BaseException:
            if self._epoch_cell is not None:  # nothing else is held yet
                self._epoch_cell.close()
            if self._ownership is not None:
                self._ownership.release()
            raise
        if options.background_compaction:
            self._compactor = threading.Thread(
                target=self._compaction_loop, name="kvstore-compact", daemon=True
            )
            self._compactor.start()
            self._wake_compactor()
        self._flusher: threading.Thread | None = None
        if options.background_flush:
            self._flusher = threading.Thread(
                target=self._flush_loop, name="kvstore-flush", daemon=True
            )
            self._flusher.start()

    # ------------------------------------------------------------------
    # recovery
    # ------------------------------------------------------------------
    def _use_journal(self) -> bool:
        mode = self._opts.wal
        if mode == "object":
            return False
        can = bool(getattr(self._wal_store, "supports_journal", False))
        if mode == "journal" and not can:
            raise ValueError(
                f"option wal='journal' needs a local directory, not {self._wal_store.describe()}"
            )
        return can

    def _check_wal_location(self, m: Manifest, store_id: str) -> tuple[str, str]:
        """Where this writer's WAL lives, and where the last writer's did.

        Returns ``(store_id, wal_id)``: the store's id (an old store without
        one adopts the id a racing opener gave its WAL location) and the
        identity of this writer's WAL location, from its ``wal.id`` (made if
        missing). Each WAL location (the store, or a ``wal_dir``) names itself
        and its store there, and each manifest names the location its writer
        used. A location holding another store's WAL is refused. When the
        last writer's WAL was elsewhere, ``self._old_wal_store`` is that
        location if it can be found (recovery fences it and replays it), and
        the open is refused when it cannot, unless the last writer closed
        cleanly or ``accept_wal_loss`` is set.
        """
        ident = read_wal_identity(self._wal_store)
        if ident is not None and ident["store"] != store_id:
            if not m.store_id:
                store_id = ident["store"]  # an old store: a racing opener named it first
            elif self._wal_store.list(paths.WAL_DIR):
                raise ValueError(
                    f"WAL location {self._wal_store.describe()} holds the WAL of another "
                    f"store ({ident['store']}, this one is {store_id}); give each store "
                    "its own wal_dir"
                )
        if ident is None:  # created once: writers opening at the same time agree on it
            ident = {"store": store_id, "wal": secrets.token_hex(8)}
            try:
                self._wal_store.put_if_absent(paths.WAL_IDENTITY, json.dumps(ident).encode())
            except FileExistsError:
                ident = read_wal_identity(self._wal_store) or ident
        if ident["store"] != store_id:  # left by another store, with no WAL: take it over
            ident = {"store": store_id, "wal": secrets.token_hex(8)}
            self._wal_store.put(paths.WAL_IDENTITY, json.dumps(ident).encode())
        ours = str(ident["wal"])
        if (
            m.writer_epoch == 0
            or m.wal_id == ours
            or (m.wal_id is None and m.wal_dir == self._wal_dir)
        ):
            return store_id, ours  # a new store, or the same WAL (maybe moved)
        old: ObjectStore | None = self._store if m.wal_dir is None else None
        if m.wal_dir is not None and os.path.isdir(m.wal_dir):
            old = LocalStore(m.wal_dir, create=False)
        found = None if old is None else read_wal_identity(old)
        if m.wal_id is not None and (found or {}).get("wal") != m.wal_id:
            old = None  # not there, or something else lives there now
        self._switched_wal = True
        self._old_wal_store = old
        if old is None and not m.wal_clean and not self._opts.accept_wal_loss:
            where = "in the store" if m.wal_dir is None else f"in wal_dir={m.wal_dir!r}"
            raise ValueError(
                f"the last writer of {self._store.describe()} kept its WAL {where}, which "
                "is not there any more: the acknowledged writes it held that no SST has "
                "would be lost. Open with the wal_dir that holds it (CLI: --wal-dir), or "
                "with accept_wal_loss=True (CLI: --accept-wal-loss) to give them up"
            )
        return store_id, ours

    def _recover(self) -> None:
        for st in {id(self._store): self._store, id(self._wal_store): self._wal_store}.values():
            if isinstance(st, LocalStore):
                st.cleanup_temp()
        m = self._mstore.load_latest()
        if m is None:
            try:
                self._mstore.write(
                    Manifest(
                        id=1,
                        writer_epoch=0,
                        created_ms=self._now_ms(),
                        store_id=secrets.token_hex(8),
                    )
                )
            except FileExistsError:
                pass
            m = self._mstore.load_latest()
            assert m is not None
        store_id = m.store_id or secrets.token_hex(8)  # stores from before store_id get one
        store_id, wal_id = self._check_wal_location(m, store_id)
        switching = self._switched_wal
        while True:  # step 2: claim the store
            if m.store_id and m.store_id != store_id:  # a racing writer gave it one first
                raise KvError(f"{self._store.describe()}: the store changed while opening")
            # Switching WAL locations, the claim still names the old one: until the
            # final manifest below, a crash leaves the old WAL to be found again.
            claimed = m.evolve(
                id=m.id + 1,
                writer_epoch=m.writer_epoch + 1,
                created_ms=self._now_ms(),
                writer_nonce=secrets.token_hex(8),
                claims=(*m.claims, m.id + 1)[-MAX_CLAIMS:],
                store_id=store_id,
                **({} if switching else {"wal_dir": self._wal_dir, "wal_id": wal_id}),
                wal_clean=m.wal_clean if switching else False,
                # segment wal_replay_from must exist unless the last writer closed cleanly
                wal_journal=m.wal_journal and not m.wal_clean,
            )
            try:
                self._mstore.write(claimed)
                break
            except FileExistsError:
                latest = self._mstore.load_latest()
                assert latest is not None
                m = latest
        self._epoch = claimed.writer_epoch
        self._manifest = claimed
        if self._ownership is not None:  # other opens now see this writer's epoch
            self._ownership.claimed(self._epoch)
        if self._opts.seed is not None:  # reproducible, but distinct per writer session
            self._ids = IdGenerator(self._opts.seed * 1_000_003 + self._epoch, self._clock)
        if self._epoch_cell is not None:
            self._epoch_cell.raise_to(self._epoch)  # tell an old writer, cheaply
        old_cell = getattr(self._old_wal_store, "open_epoch_cell", None)
        cell = None if old_cell is None else old_cell(paths.EPOCH_CELL)
        if cell is not None:  # the last writer's WAL was elsewhere: tell it there too
            try:
                cell.raise_to(self._epoch)
            finally:
                cell.close()
        journal = self._use_journal()
        upto: int | None = None
        if journal:
            found = list_wal_ids(self._wal_store)
            next_id = max([i for i, _ in found] + [claimed.wal_replay_from - 1]) + 1
        else:  # step 3: fence the old writer's next WAL object
            next_id = _place_fence(self._wal_store, claimed.wal_replay_from)
            upto = next_id - 1
        source: ObjectStore | None = self._wal_store
        if switching:  # replay the last writer's WAL, where it was; what is here is old
            source, upto = self._old_wal_store, None
            if source is not None and _holds_wal_objects(source):
                upto = _place_fence(source, claimed.wal_replay_from) - 1
        if source is None:  # gone: the open was allowed (clean close, or accept_wal_loss)
            result = ReplayResult([], [], 0, [])
        else:
            result = replay(
                source,
                claimed.wal_replay_from,
                claimed.last_flushed_seq,
                upto_id=upto,
                cut_damage=self._opts.accept_wal_loss,
            )
        gap = missing_seq((r.seq for r in result.records), claimed.last_flushed_seq)
        if gap is not None:
            if not self._opts.accept_wal_loss:
                raise CorruptionError(
                    f"WAL records from seq {gap} on are missing: manifest {m.id} has "
                    f"everything up to seq {claimed.last_flushed_seq}, and the WAL resumes "
                    f"at seq {next(r.seq for r in result.records if r.seq >= gap)}; a WAL "
                    "segment or a newer manifest was lost (accept_wal_loss=True opens "
                    "with what is left)"
                )
            log.error("opening without the WAL records from seq %d on (accept_wal_loss)", gap)
        elif source is not None and live_segment_missing(claimed, result.ids):
            where = source.describe()
            if not self._opts.accept_wal_loss:
                raise CorruptionError(
                    f"WAL records from seq {claimed.last_flushed_seq + 1} on are missing: "
                    f"segment {claimed.wal_replay_from}, where manifest {m.id} says replay "
                    f"starts, is gone from {where}, with the acknowledged writes it held "
                    "(accept_wal_loss=True opens with what is left)",
                    object_name=paths.wal_segment_name(claimed.wal_replay_from),
                )
            log.error(
                "opening without WAL segment %d (missing from %s; accept_wal_loss)",
                claimed.wal_replay_from,
                where,
            )
        self._wal_objects = result.data_ids if not journal and not switching else []
        last_seq = max([claimed.last_flushed_seq] + [r.seq for r in result.records])
        for meta in claimed.all_ssts():
            self._handles[meta.id] = open_sst(self._store, meta, self._cache)
        self._state = self._state_from_manifest(claimed, Memtable(0))
        # step 5: replayed writes go to an SST; a fresh WAL segment starts.
        if journal:
            while True:
                try:
                    self._wal: JournalWal | ObjectWal = JournalWal(
                        self._wal_store, next_id, self._fence_check, on_fenced=self._mark_fenced
                    )
                    break
                except FileExistsError:
                    next_id += 1
            first_id = next_id
        else:
            first_id = next_id + 1
            self._wal = ObjectWal(
                self._wal_store,
                first_id,
                self._wal_objects,
                fence_check=self._fence_check,
                fence_check_interval=self._opts.fence_check_interval,
                on_fenced=self._mark_fenced,
            )
        new_l0 = claimed.l0
        self._seq_times.extend(claimed.seq_times)
        swept = claimed.wal_swept
        # data objects a crash left below the replay start (fences stay)
        if (
            not journal
            and not switching
            and sweep_wal_objects(self._wal_store, claimed.wal_swept, claimed.wal_replay_from)
        ):
            swept = max(swept, claimed.wal_replay_from)
        used: int | None = None  # the watermark the replayed SST honours
        if result.records:
            mt = Memtable(0)
            for rec in result.records:
                mt.apply(rec.seq, rec.keys, rec.values)
            used = self._watermark()  # the persisted one, or by age from the samples
            if self._opts.retention == "all" and used is None:
                used = claimed.last_flushed_seq
            handle = self._write_sst(mt, [], used)
            new_l0 = (handle.meta, *claimed.l0)
        retention_seq = claimed.retention_seq
        if self._opts.retention == "all" and retention_seq is None:
            retention_seq = last_seq  # keep every version from now on
        if retention_seq is not None and used is not None:
            retention_seq = max(retention_seq, used)  # versions below it may be gone now
        final = claimed.evolve(
            retention_seq=retention_seq,
            id=claimed.id + 1,
            l0=new_l0,
            last_flushed_seq=last_seq,
            wal_replay_from=first_id,
            wal_dir=self._wal_dir,  # from here on the WAL is this writer's
            wal_id=wal_id,
            wal_clean=False,
            wal_journal=journal,
            wal_swept=swept,
            created_ms=self._now_ms(),
        )
        self._write_manifest(final)
        self._inflight.clear()  # the replayed SST is in the manifest now
        self._state = self._state_from_manifest(final, Memtable(first_id))
        self._last_seq = last_seq
        self._durable_seq = last_seq
        if final.retention_seq is not None:
            self._floor_seq = final.retention_seq
        else:  # SSTs hold the newest versions up to last_flushed_seq; replay kept from w
            w = self._watermark()
            self._floor_seq = last_seq if w is None else max(claimed.last_flushed_seq, w)
        self._delete_wal_before(first_id)
        self._load_pins()
        live = {meta.id for meta in final.all_ssts()}.union(*self._pins.values())
        now = self._clock()
        # GC grace counts from when a file became obsolete, as the manifest recorded
        recorded = {sst_id: ms / 1000 for sst_id, ms in final.obsolete}
        for name in self._store.list(paths.SST_DIR):
            sst_id = paths.parse_sst_name(name)
            if sst_id is not None and sst_id not in live:  # replaced, or left by a crash
                self._obsolete.append((min(recorded.get(sst_id, now), now), sst_id))
        log.info(
            "opened %s: epoch %d, manifest %d, last seq %d, replayed %d writes",
            self._store.describe(),
            self._epoch,
            final.id,
            last_seq,
            len(result.records),
        )

    def _latest_epoch(self) -> int:
        m = self._mstore.load_latest()
        return 0 if m is None else m.writer_epoch

    def _state_from_manifest(
        self, m: Manifest, active: Memtable, immutable: tuple[Memtable, ...] = ()
    ) -> rp.State:
        def handle(meta: SstMeta) -> rp.SstHandle:
            h = self._handles.get(meta.id)
            if h is None:
                h = self._handles[meta.id] = open_sst(self._store, meta, self._cache)
            return h

        return rp.State(
            active=active,
            immutable=immutable,
            l0=tuple(handle(s) for s in m.l0),
            runs=tuple(rp.SortedRun.of(tuple(handle(s) for s in run)) for run in m.runs),
        )

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # ------------------------------------------------------------------
    # fencing
    # ------------------------------------------------------------------
    def _fence_check(self, *, sure: bool = False) -> None:
        """Raise FencedError if a writer with a higher epoch has claimed the store.

        ``sure``: read the latest manifest whatever the cheap signals say (GC
        does, before deleting anything).
        """
        if self._fenced is not None:
            raise FencedError(str(self._fenced))
        cell = self._epoch_cell
        if sure:
            newer = True
        elif cell is not None:
            value = cell.read()
            if value <= self._epoch:
                # A new writer raises the cell right after claiming the manifest and
                # before reading the WAL, so a cell at or below our epoch means no
                # newer writer has read (or can miss) what we synced.
                return
            if value == self._cell_checked:
                # Left high by something else (a restored store, an old WAL dir):
                # the cell cannot tell us anything, so probe as stores without one do.
                newer = self._mstore.newer_exists(self._manifest.id)
            else:
                newer = True  # confirmed below by listing, whatever GC deleted since
        else:
            # Manifest id+1 is the claim of the writer that fenced us, if any: GC
            # keeps claims (Manifest.claims), so this one probe is enough.
            newer = self._mstore.newer_exists(self._manifest.id)
        if newer:
            checked = cell.read() if cell is not None else 0
            latest = self._mstore.load_latest()
            if latest is not None and latest.writer_epoch > self._epoch:
                self._mark_fenced(
                    FencedError(
                        f"{self._store.describe()}: writer epoch {self._epoch} was fenced by "
                        f"epoch {latest.writer_epoch}; open the store again to write"
                    )
                )
                raise FencedError(str(self._fenced))
            if cell is not None:
                self._cell_checked = checked  # not fenced at that value: stale

    def _mark_fenced(self, exc: FencedError) -> None:
        """Remember that a newer writer holds the store (the first reason wins).

        From here on reads see only what this handle made durable: writes it
        applied in memory that no sync or flush completed are never shown
        again, since the new writer does not have them (see :meth:`_visible_seq`).
        """
        if self._fenced is None:
            self._fenced = exc
            durable, last = self._durable_seq, self._last_seq
            if durable < last:
                log.warning(
                    "%s: fenced; writes after seq %d were not made durable and are no "
                    "longer shown (up to seq %d were)",
                    self._store.describe(),
                    durable,
                    last,
                )

    def _mark_durable(self, seq: int) -> None:
        """Every write up to ``seq`` is on stable storage (a sync or flush returned)."""
        lock = self._durable_lock
        lock.acquire()
        try:
            if seq > self._durable_seq:
                self._durable_seq = seq
        finally:
            lock.release()

    def _visible_seq(self) -> int:
        """The seq reads use: the last committed one, or after a fence the last durable."""
        seq = self._last_seq
        if self._fenced is not None:
            return min(seq, self._durable_seq)
        return seq

    def _check_readable(self, seq: int) -> None:
        """Refuse a read at ``seq`` (a snapshot's, a transaction's) that a fence made
        unreliable: it may show writes that never became durable."""
        if self._closed:
            raise ClosedError("the database is closed")
        if self._fenced is not None and seq > self._durable_seq:
            raise FencedError(
                f"{self._fenced}; this view (seq {seq}) includes writes that were never "
                f"made durable (durable up to seq {self._durable_seq})"
            )

    def _advance_manifest(
        self,
        change: Callable[[Manifest], Manifest],
        *,
        retired: Iterable[str] = (),
        now: float | None = None,
    ) -> Manifest:
        """Write ``change(current)`` as the next manifest; flush and compaction both
        advance it, so the change is computed under the manifest lock.

        ``retired``: SSTs this change makes obsolete as of ``now`` (the manifest
        records when, so GC's grace counts from then in any later process)."""
        with self._manifest_lock:
            m = self._manifest
            new = change(m)
            new = new.evolve(
                id=m.id + 1,
                created_ms=self._now_ms(),
                obsolete=self._obsolete_record(new, retired, now),
            )
            self._write_manifest(new)
            return new

    def _obsolete_record(
        self, m: Manifest, retired: Iterable[str] = (), now: float | None = None
    ) -> tuple[tuple[str, int], ...]:
        """The ``obsolete`` field for manifest ``m``: SSTs waiting for GC and since when.

        Read without the GC lock: a pass may be changing the queue, so an entry
        can lag by one manifest; the record only ever says a file became
        obsolete later than it did (never earlier), so GC never deletes early."""
        live = {s.id for s in m.all_ssts()}
        record = {sst_id: int(when * 1000) for when, sst_id in list(self._obsolete)}
        if retired:
            at = int((self._clock() if now is None else now) * 1000)
            for sst_id in retired:
                record[sst_id] = at
        return tuple(sorted((i, t) for i, t in record.items() if i not in live))

    def _write_manifest(self, m: Manifest) -> None:
        """Create manifest ``m.id``, resolving ambiguous outcomes by reading it back.

        A create that raised may still have happened (an error after the
        write), and a retried create can find its own object: in both cases
        the bytes at ``m.id`` decide.
        """
        data = m.encode()
        with self._manifest_lock:
            self._raise_if_broken()
            try:
                self._mstore.write(m, data)
            except FileExistsError:
                if not self._mstore.holds(m.id, data):
                    self._fence_check(sure=True)  # whoever wrote it: a newer writer?
                    raise CorruptionError(
                        f"manifest {m.id} exists but no newer writer holds the store",
                        object_name=paths.manifest_name(m.id),
                    ) from None
            except DurabilityUnknown as exc:
                # There, but maybe not after a power loss: nothing may rely on it
                # (a flush would delete the WAL it replaces). Reopening decides.
                self._stop(f"manifest {m.id} was written but not made durable ({exc})")
                raise
            except OSError as exc:
                if not self._landed(m.id, data, exc):
                    raise
                log.warning("manifest %d write reported an error but landed; continuing", m.id)
            self._manifest = m

    def _landed(self, manifest_id: int, data: bytes, error: OSError) -> bool:
        """After a failed create: did manifest ``manifest_id`` land anyway?

        Reads it back, a few times if reading fails too. If no read answers,
        nobody can tell whether the store now references what this write
        references, so the handle stops: every later call raises KvError,
        and nothing it wrote is handed to GC. Reopening reads the truth.
        """
        delay = 0.05
        for attempt in range(4):
            try:
                return bool(self._mstore.holds(manifest_id, data))
            except OSError as exc:
                log.warning("reading back manifest %d failed: %s", manifest_id, exc)
                if attempt < 3:
                    time.sleep(delay)
                    delay *= 4
        self._stop(
            f"writing manifest {manifest_id} failed ({error}) and reading it back failed "
            "too, so whether it landed is unknown"
        )
        return False

    def _stop(self, reason: str) -> None:
        """Stop writing for good: nobody can tell which files the store references."""
        self._broken = KvError(
            f"{self._store.describe()}: {reason}; this handle stopped writing: open the store again"
        )
        log.error("%s", self._broken)

    def _raise_if_broken(self) -> None:
        if self._broken is not None:
            raise KvError(str(self._broken)) from self._broken

    # ------------------------------------------------------------------
    # writes
    # ------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self._closed:
            raise ClosedError("the database is closed")
        if self._fenced is None and isinstance(self._wal._error, FencedError):
            self._mark_fenced(self._wal._error)
        if self._fenced is not None:
            raise FencedError(str(self._fenced))
        if self._wal._error is not None:  # an I/O error: nothing after it may be published
            self._wal._raise_if_failed()
        self._raise_if_broken()
        err = self._bg_error
        if err is not None and not isinstance(err, Exception):
            raise KvError(f"background flush died: {err!r}")

    def put(self, key: bytes, value: bytes, *, durable: bool = True) -> int:
        """Write ``key = value``; returns the write's sequence number."""
        k = _validate.key(key)
        v = _validate.value(value)
        return self._commit([k], [v], _validate.flag(durable, "durable"))

    def delete(self, key: bytes, *, durable: bool = True) -> int:
        """Write a tombstone for ``key``; returns the sequence number."""
        k = _validate.key(key)
        return self._commit([k], [None], _validate.flag(durable, "durable"))

    def write(self, batch: WriteBatch, *, durable: bool = True) -> int:
        """Apply every operation of ``batch`` atomically under one sequence number."""
        if not isinstance(batch, WriteBatch):
            raise TypeError(f"batch must be a kvstore.WriteBatch, not {type(batch).__name__}")
        if not len(batch):
            raise ValueError("batch is empty")
        keys, values = batch._columns()
        return self._commit(keys, values, _validate.flag(durable, "durable"))

    def _commit(
        self,
        keys: list[bytes],
        values: list[bytes | None],
        durable: bool,
        txn: Transaction | None = None,
    ) -> int:
        if self._dropped:
            self._forget_dropped()
        wal = self._wal
        if (  # _check_writable() acts only when one of these is set
            self._closed
            or self._fenced is not None
            or self._broken is not None
            or self._bg_error is not None
            or wal._error is not None
        ):
            self._check_writable()
        if not durable:
            cell = self._epoch_cell
            if cell is not None:
                if cell.read() > self._epoch:
                    self._fence_check()
            else:
                now = time.monotonic()
                if now - self._last_fence_check >= self._fence_interval:
                    self._last_fence_check = now
                    self._fence_check()
        opts = self._opts
        oracle = self._oracle
        olock = oracle.lock
        # Locks on this path are taken with acquire/release rather than `with`:
        # a `with` block costs about three times as much, and a transaction
        # commit takes four. The commit lock is the lock of self._cond.
        lock = self._commit_lock
        lock.acquire()
        try:
            if (
                self._closed
                or self._fenced is not None
                or self._broken is not None
                or self._bg_error is not None
                or wal._error is not None
            ):
                self._check_writable()
            st = self._state
            if len(st.immutable) >= opts.max_immutable_memtables:
                self._stall()
                st = self._state
            now = self._monotonic()
            if txn is not None:  # expired? conflict? (see kvstore.oracle)
                if txn._serializable:
                    key_sets: tuple[Iterable[bytes], ...] = (txn._writes, txn._locked, txn._reads)
                    ranges = txn._ranges
                else:
                    key_sets, ranges = (txn._writes, txn._locked), []
                olock.acquire()
                try:
                    found = oracle.check_locked(
                        txn._id, txn.read_seq, key_sets, ranges, now, opts.transaction_ttl
                    )
                finally:
                    olock.release()
                if found is not None:
                    self._refuse(txn, found)
            seq = self._last_seq + 1
            lsn = wal.append(encode_record(seq, keys, values))
            self._user_bytes += st.active.apply(seq, keys, values)
            self._write_count += 1
            olock.acquire()  # atomic with transaction begin: see transaction()
            try:
                oracle.commit_locked(
                    seq, keys, None if txn is None else txn._id, now, opts.transaction_ttl
                )
                self._last_seq = seq
            finally:
                olock.release()
            if txn is not None:  # it no longer pins its snapshot either
                txn._registered = False
                self._snapshots.remove(txn.read_seq)
            if st.active.size >= opts.memtable_bytes:
                self._freeze_locked()
        finally:
            lock.release()
        if self._age_retention:
            self._sample_seq_time(seq, self._clock())
        if opts.background_compaction and len(self._state.l0) >= opts.l0_slowdown_ssts:
            self._counters["write_slowdowns"] += 1
            time.sleep(0.001)  # let compaction catch up before writers must stop
        if durable:
            wal.sync(lsn)
            self._mark_durable(seq)
        elif wal._pending_bytes >= opts.wal_buffer_bytes:
            wal.write_out()
        if not opts.background_flush and self._state.immutable:
            self._flush_pending()
        return seq

    def _refuse(self, txn: Transaction, found: bool | bytes) -> NoReturn:
        """Raise what :meth:`Oracle.check_locked` found: expiry (True) or a conflict key."""
        if found is True:
            raise TransactionExpired(
                f"transaction ran longer than transaction_ttl={self._opts.transaction_ttl}s"
            )
        self._counters["conflicts"] += 1
        raise TransactionConflict(
            f"{txn.isolation.name} transaction (read seq {txn.read_seq}) conflicts on key "
            f"{found!r}, written by a transaction that committed after it began; retry it"
        )

    def _stall(self) -> None:
        """Wait (commit lock held via the condition) until a frozen memtable is flushed."""
        self._counters["stalls"] += 1
        started = time.monotonic()
        while len(self._state.immutable) >= self._opts.max_immutable_memtables:
            self._check_writable()
            if not self._opts.background_flush:
                self._cond.release()
                try:
                    self._flush_pending()
                finally:
                    self._cond.acquire()
                continue
            err = self._bg_error
            if isinstance(err, (CorruptionError, FencedError)):
                raise KvError(f"memtable flush cannot proceed: {err}") from err
            self._cond.wait(0.5)
        self._counters["stall_ms"] += int((time.monotonic() - started) * 1000)

    def _freeze_locked(self) -> None:
        st = self._state
        if not len(st.active):
            return
        wal_start = self._wal.rotate()
        self._state = replace(st, active=Memtable(wal_start), immutable=(st.active, *st.immutable))
        self._cond.notify_all()

    # ------------------------------------------------------------------
    # flush
    # ------------------------------------------------------------------
    def _write_sst(
        self, mt: Memtable, snapshot_seqs: list[int], watermark: int | None = None
    ) -> rp.SstHandle:
        return self._write_entries(mt.flush_entries(snapshot_seqs, watermark))

    def _write_entries(self, entries: list[Entry] | Columns) -> rp.SstHandle:
        o = self._opts
        data, summary = build_sst(
            entries,
            block_bytes=o.block_bytes,
            bloom_bits_per_key=o.bloom_bits_per_key,
            compression=o.compression,
            compression_level=o.compression_level,
        )
        while True:
            sst_id = self._ids.ulid()
            self._inflight.add(sst_id)  # GC must not touch it until a manifest holds it
            try:
                self._store.put_if_absent(paths.sst_name(sst_id), data)
                break
            except FileExistsError:  # names never repeat: draw another
                self._inflight.discard(sst_id)
                log.warning("SST name %s already taken; drawing another", sst_id)
            except BaseException:
                # no manifest will name it: if it landed anyway, GC may collect it
                self._inflight.discard(sst_id)
                raise
        meta = SstMeta(
            sst_id,
            summary.size,
            summary.count,
            summary.tombstones,
            summary.min_seq,
            summary.max_seq,
            summary.first_key,
            summary.last_key,
        )
        try:
            handle = self._handles[sst_id] = open_sst(self._store, meta, self._cache)
        except BaseException:
            self._inflight.discard(sst_id)
            raise
        return handle

    def _flush_oldest(self) -> bool:
        with self._flush_lock:
            st = self._state
            if not st.immutable:
                return False
            mt = st.immutable[-1]
            self._wait_for_l0_room()
            snaps, watermark = self._retention_args(mt.max_seq)
            handle = self._write_sst(mt, snaps, watermark)
            with self._commit_lock:
                cur = self._state
                nxt = cur.immutable[-2] if len(cur.immutable) > 1 else cur.active
                replay_from = nxt.wal_start
            try:
                self._advance_manifest(
                    lambda m: m.evolve(
                        l0=(handle.meta, *m.l0),
                        last_flushed_seq=max(m.last_flushed_seq, mt.max_seq),
                        wal_replay_from=replay_from,
                        **self._retention_fields(m, watermark),
                    )
                )
            finally:  # named by the manifest now, or an orphan for GC (a retry writes anew)
                if self._broken is None:
                    self._inflight.discard(handle.meta.id)
            self._mark_durable(mt.max_seq)
            with self._cond:
                cur = self._state
                assert cur.immutable[-1] is mt
                self._state = replace(cur, immutable=cur.immutable[:-1], l0=(handle, *cur.l0))
                self._cond.notify_all()
            self._counters["flushes"] += 1
            self._counters["flushed_bytes"] += handle.meta.size
            self._delete_wal_before(replay_from)
            self._wake_compactor()
            return True

    def _wait_for_l0_room(self) -> None:
        """Backpressure: hold the flush while L0 is full and compaction can empty it.

        While compaction fails it retries, and flushes (and so writers) wait for
        it. They do not wait when nothing will ever make room (the compactor
        has stopped: fenced, or the process is going down) or when the store is
        closing: then L0 grows past its limit instead.
        """
        if not self._opts.background_compaction:
            return
        started = None
        while len(self._state.l0) >= self._opts.l0_max_ssts and not self._stopping:
            compactor = self._compactor
            if self._closing or compactor is None or not compactor.is_alive():
                break
            if started is None:
                started = time.monotonic()
                self._counters["l0_stalls"] += 1
            self._wake_compactor()
            with self._cond:
                self._cond.wait(0.1)
        if started is not None:
            self._counters["l0_stall_ms"] += int((time.monotonic() - started) * 1000)

    def _flush_pending(self) -> None:
        while self._flush_oldest():
            pass

    def _delete_wal_before(self, first_live: int) -> None:
        try:
            if isinstance(self._wal, JournalWal):
                for wal_id, kind in list_wal_ids(self._wal_store):
                    if wal_id < first_live and kind == "log":
                        self._wal_store.delete(paths.wal_segment_name(wal_id))
            else:
                ids = self._wal.data_ids
                for wal_id in [i for i in ids if i < first_live]:
                    self._wal_store.delete(paths.wal_object_name(wal_id))
                    ids.remove(wal_id)
        except OSError as exc:  # leftovers are harmless: replay skips flushed seqs
            log.warning("could not delete old WAL segments: %s", exc)

    def _flush_loop(self) -> None:
        backoff = 0.05
        while True:
            with self._cond:
                while not self._state.immutable and not self._stopping:
                    self._cond.wait()
                if self._stopping and not self._state.immutable:
                    return
            try:
                self._flush_oldest()
                backoff = 0.05
                self._bg_error = None
            except FencedError as exc:
                self._mark_fenced(exc)
                self._wake_all()
                return
            except Exception as exc:  # retried; reported via stats and logging
                self._bg_error = exc
                self._counters["flush_errors"] += 1
                log.error("memtable flush failed (retrying in %.2fs): %s", backoff, exc)
                self._wake_all()
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                if self._stopping:
                    return
            except BaseException as exc:  # the process is going down (or a simulated crash)
                self._bg_error = exc
                self._wake_all()
                return

    def _wake_all(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------------
    # reads
    # ------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the database is closed")

    def get(self, key: bytes) -> bytes | None:
        """The latest committed value of ``key``, or None."""
        self._check_open()
        k = _validate.key(key)
        seq = self._last_seq if self._fenced is None else self._visible_seq()
        return rp.get(self._state, k, seq)

    def scan(
        self, start: bytes | None = None, end: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < end``, ascending or descending."""
        self._check_open()
        s = _validate.bound(start, "start")
        e = _validate.bound(end, "end")
        _validate.flag(reverse, "reverse")
        seq = self._visible_seq()
        return rp.scan(self._state, s, e, reverse, seq)

    def scan_prefix(self, prefix: bytes, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs for keys starting with ``prefix``."""
        p = _validate.bound(prefix, "prefix")
        if p is None:
            raise TypeError("prefix must be bytes, not None")
        return self.scan(p or None, _validate.prefix_end(p) if p else None, reverse=reverse)

    def snapshot(self, seq: int | None = None) -> Snapshot:
        """A consistent read view at the latest seq, or at an older retained ``seq``."""
        self._check_open()
        with self._snapshots.lock:
            latest = self._visible_seq()
            if seq is None:
                seq = latest
            else:
                if isinstance(seq, bool) or not isinstance(seq, int):
                    raise TypeError(f"seq must be an int, not {type(seq).__name__}")
                if seq < 0 or seq > latest:
                    raise ValueError(f"seq {seq} is outside 0..{latest}")
                if seq < self._floor_seq:
                    raise SnapshotTooOld(
                        f"seq {seq} is no longer retained (oldest readable seq is "
                        f"{self._floor_seq})"
                    )
            self._snapshots.add(seq)
        return Snapshot(self, seq)

    def transaction(self, isolation: Isolation = Isolation.SNAPSHOT) -> Transaction:
        """Begin an optimistic transaction at ``isolation`` (see :mod:`kvstore.txn`)."""
        if self._closed:
            raise ClosedError("the database is closed")
        if not isinstance(isolation, Isolation):
            raise TypeError(
                f"isolation must be a kvstore.Isolation, not {type(isolation).__name__}"
            )
        if self._dropped:
            self._forget_dropped()
        oracle = self._oracle
        now = self._monotonic()
        snapshots = self._snapshots
        slock = snapshots.lock
        olock = oracle.lock
        slock.acquire()  # acquire/release, not `with`: see _commit
        try:
            olock.acquire()
            try:
                # last_seq is published under oracle.lock together with the oracle
                # record, so every commit after read_seq is visible to the check.
                read_seq = self._last_seq if self._fenced is None else self._visible_seq()
                txn_id = oracle.begin_locked(read_seq, now, self._opts.transaction_ttl)
            finally:
                olock.release()
            snapshots.add(read_seq)
        finally:
            slock.release()
        return Transaction(self, isolation, txn_id, read_seq)

    def _end_transaction(self, txn_id: int, read_seq: int) -> None:
        """Forget a transaction that ended without committing a write."""
        self._oracle.end(txn_id)
        self._snapshots.remove(read_seq)

    def _transaction_dropped(self, txn_id: int, read_seq: int) -> None:
        """An open transaction was garbage-collected (``Transaction.__del__``).

        The collector may run inside any allocation, also while this thread
        holds the oracle or snapshot lock, so nothing is locked here: the
        transaction is queued (``deque.append`` is atomic) and forgotten by
        the next begin, commit, ``stats()`` or ``close()``.
        """
        self._dropped.append((txn_id, read_seq))

    def _forget_dropped(self) -> None:
        dropped = self._dropped
        while dropped:
            try:
                txn_id, read_seq = dropped.popleft()
            except IndexError:  # another thread took the last one
                return
            self._end_transaction(txn_id, read_seq)

    @property
    def options(self) -> Options:
        """The options this store was opened with (frozen)."""
        return self._opts

    @property
    def last_seq(self) -> int:
        """The highest committed sequence number (after a fence: the highest durable one)."""
        return self._visible_seq()

    # ------------------------------------------------------------------
    # maintenance
    # ------------------------------------------------------------------
    def flush(self) -> None:
        """Make every write durable and flush the memtable to an SST.

        Like a write, it waits while L0 is full and compaction is failing
        (compaction retries; ``stats()["compaction_error"]`` says why).
        """
        self._check_writable()
        seq = self._last_seq  # published after its frame was appended: lsn covers it
        self._wal.sync(self._wal._appended)
        self._mark_durable(seq)
        with self._cond:
            self._freeze_locked()
        self._wait_flushed()

    def _wait_flushed(self) -> None:
        if not self._opts.background_flush:
            self._flush_pending()
            return
        with self._cond:
            while self._state.immutable:
                self._check_writable()
                err = self._bg_error
                if err is not None:
                    raise KvError(f"flush failed: {err}") from err
                self._cond.wait(0.5)

    def stats(self) -> dict[str, Any]:
        """Counters and sizes: memtables, levels, cache, WAL, flushes, stalls."""
        self._check_open()
        if self._dropped:
            self._forget_dropped()
        st = self._state
        cache = self._cache
        lookups = cache.hits + cache.misses
        return {
            "last_seq": self._visible_seq(),
            "durable_seq": self._durable_seq,
            "fenced": self._fenced is not None,
            "writer_epoch": self._epoch,
            "manifest_id": self._manifest.id,
            "memtable_bytes": st.active.size,
            "memtable_entries": st.active.entries,
            "immutable_memtables": len(st.immutable),
            "immutable_bytes": sum(m.size for m in st.immutable),
            "l0_ssts": len(st.l0),
            "l0_bytes": sum(h.meta.size for h in st.l0),
            "sorted_runs": len(st.runs),
            "sorted_run_bytes": sum(h.meta.size for r in st.runs for h in r.ssts),
            "block_cache_bytes": cache.used,
            "block_cache_hits": cache.hits,
            "block_cache_misses": cache.misses,
            "block_cache_hit_rate": (cache.hits / lookups) if lookups else 0.0,
            "wal_syncs": self._wal.syncs,
            "open_snapshots": len(self._snapshots),
            "writes": self._write_count,
            "flushes": self._counters["flushes"],
            "flushed_bytes": self._counters["flushed_bytes"],
            "flush_errors": self._counters["flush_errors"],
            "levels": {
                "l0": [h.meta.size for h in st.l0],
                "runs": [[len(r.ssts), sum(h.meta.size for h in r.ssts)] for r in st.runs],
            },
            "read_amplification": 1 + len(st.immutable) + len(st.l0) + len(st.runs),
            "write_amplification": self._write_amplification(),
            "space_amplification": self._space_amplification(st),
            "user_bytes_written": self._user_bytes,
            "wal_bytes_written": self._wal._appended,
            "retention_watermark": self.retention_watermark,
            "oldest_readable_seq": self._floor_seq,
            "checkpoints": len(self._manifest.checkpoints),
            "compactions": self._counters["compactions"],
            "trivial_moves": self._counters["trivial_moves"],
            "compaction_error": None
            if self._compaction_error is None
            else repr(self._compaction_error),
            "l0_stalls": self._counters["l0_stalls"],
            "l0_stall_ms": self._counters["l0_stall_ms"],
            "write_slowdowns": self._counters["write_slowdowns"],
            "gc_deleted_manifests": self._counters["gc_deleted_manifests"],
            "compaction_input_bytes": self._counters["compaction_input_bytes"],
            "compaction_output_bytes": self._counters["compaction_output_bytes"],
            "compaction_errors": self._counters["compaction_errors"],
            "gc_deleted_ssts": self._counters["gc_deleted"],
            "obsolete_ssts": len(self._obsolete),
            "write_stalls": self._counters["stalls"],
            "transactions_running": self._oracle.running,
            "transaction_conflicts": self._counters["conflicts"],
            "transactions_expired": self._oracle.expirations,
            "oracle_tracked_keys": self._oracle.tracked_keys(),
            "write_stall_ms": self._counters["stall_ms"],
            "background_error": None if self._bg_error is None else repr(self._bg_error),
            "stopped": None if self._broken is None else str(self._broken),
        }

    def _write_amplification(self) -> float:
        """Bytes written to storage (WAL, flushes, compactions) per byte the user wrote."""
        user = self._user_bytes
        if not user:
            return 0.0
        c = self._counters
        return (self._wal._appended + c["flushed_bytes"] + c["compaction_output_bytes"]) / user

    @staticmethod
    def _space_amplification(st: rp.State) -> float:
        """Live SST bytes over the bottom run's bytes (1.0 when fully compacted)."""
        total = sum(h.meta.size for h in st.l0) + sum(h.meta.size for r in st.runs for h in r.ssts)
        bottom = sum(h.meta.size for h in st.runs[-1].ssts) if st.runs else 0
        return total / bottom if bottom else (1.0 if not total else float(len(st.l0)))

    def close(self) -> None:
        """Flush what must be flushed and stop background threads. Idempotent."""
        if self._closed:
            return
        error: BaseException | None = None
        self._closing = True
        try:
            if (
                self._fenced is None
                and self._broken is None
                and (self._bg_error is None or isinstance(self._bg_error, Exception))
            ):
                self.flush()
        except BaseException as exc:
            error = exc
        finally:
            # stop the background threads first (a running compaction abandons its
            # work at the next output SST), then refuse further calls
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            self._compaction_wanted.set()
            if self._flusher is not None:
                self._flusher.join(timeout=30)
            if self._compactor is not None:
                self._compactor.join(timeout=60)
            self._closed = True
            try:
                self._wal.close() if error is None else None
            except BaseException as exc:
                error = error or exc
            if error is None:
                try:
                    self._record_clean_close()
                except BaseException as exc:  # a simulated crash, an interrupt
                    error = exc
            if isinstance(self._wal, JournalWal):
                self._wal._journal.close()
            if self._epoch_cell is not None:
                self._epoch_cell.close()
            if self._ownership is not None:
                self._ownership.release()
        if error is not None and not isinstance(error, FencedError):
            raise error

    def _record_clean_close(self) -> None:
        """Everything is in SSTs: say so in the manifest, so the next writer may use
        another WAL location (or none of this one's files) without losing anything."""
        m = self._manifest
        if self._fenced is not None or self._broken is not None or m.wal_clean:
            return
        if self._last_seq != m.last_flushed_seq:
            return
        # If this fails, close() says so; the next open then checks the WAL instead.
        self._write_manifest(
            m.evolve(
                id=m.id + 1,
                created_ms=self._now_ms(),
                wal_clean=True,
                obsolete=self._obsolete_record(m),
            )
        )

    def __enter__(self) -> DB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"seq={self._last_seq}"
        return f"<kvstore.DB {self._store.describe()} {state}>"


def _holds_wal_objects(store: ObjectStore) -> bool:
    """Whether a WAL location is (or may be) written as WAL objects, not a journal."""
    if not getattr(store, "supports_journal", False):
        return True
    return any(kind == "wal" for _, kind in list_wal_ids(store))


def _place_fence(store: ObjectStore, replay_from: int) -> int:
    """Put a fence object at the first free WAL id above everything there; returns it.

    A writer still appending WAL objects there finds its next id taken."""
    fence = max([i for i, _ in list_wal_ids(store)] + [replay_from - 1]) + 1
    while True:
        try:
            store.put_if_absent(paths.wal_object_name(fence), fence_object())
            return fence
        except FileExistsError:
            fence += 1
