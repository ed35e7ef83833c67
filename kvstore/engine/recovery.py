"""Opening a writer: claim the store, replay the WAL, write the first manifest.

::

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
is taken) or manifest write, and raises :class:`~kvstore.errors.FencedError`.

:func:`recover` returns what it recovered (:class:`Recovered`); the parts it
was given (manifest writer, SST files, retention, checkpoints) hold the rest.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from kvstore import paths
from kvstore import readpath as rp
from kvstore.clock import Clock
from kvstore.engine.checkpoints import Checkpoints
from kvstore.engine.health import Health
from kvstore.engine.manifests import ManifestWriter
from kvstore.engine.retention import Retention
from kvstore.engine.sstfiles import SstFiles
from kvstore.errors import CorruptionError, KvError
from kvstore.format.manifest import MAX_CLAIMS, Manifest
from kvstore.format.wal import fence_object
from kvstore.format.wal_id import encode_wal_identity, read_wal_identity
from kvstore.ids import IdGenerator
from kvstore.memtable import Memtable
from kvstore.objstore import LocalStore, ObjectStore
from kvstore.options import Options
from kvstore.wal import (
    JournalWal,
    ObjectWal,
    ReplayResult,
    list_wal_ids,
    live_segment_missing,
    missing_seq,
    replay,
    sweep_wal_objects,
)

log = logging.getLogger("kvstore")


@dataclass
class Recovered:
    wal: JournalWal | ObjectWal
    state: rp.State
    last_seq: int


def recover(
    store: ObjectStore,
    wal_store: ObjectStore,
    options: Options,
    clock: Clock,
    health: Health,
    manifests: ManifestWriter,
    files: SstFiles,
    retention: Retention,
    checkpoints: Checkpoints,
    ownership: Any,
) -> Recovered:
    """Claim the store for a new writer epoch and bring back every durable write."""
    return Recovery(
        store, wal_store, options, clock, health, manifests, files, retention, checkpoints
    ).run(ownership)


class Recovery:
    def __init__(
        self,
        store: ObjectStore,
        wal_store: ObjectStore,
        options: Options,
        clock: Clock,
        health: Health,
        manifests: ManifestWriter,
        files: SstFiles,
        retention: Retention,
        checkpoints: Checkpoints,
    ) -> None:
        self._store = store
        self._wal_store = wal_store
        self._opts = options
        #: where this writer's WAL lives, as recorded in its manifests
        self._wal_dir = None if options.wal_dir is None else os.path.abspath(options.wal_dir)
        self._clock = clock
        self._health = health
        self._manifests = manifests
        self._files = files
        self._retention = retention
        self._checkpoints = checkpoints
        self._old_wal_store: ObjectStore | None = None  # the last writer's, if elsewhere
        self._switched_wal = False  # this writer's WAL is not where the last one's was

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

    def check_wal_location(self, m: Manifest, store_id: str) -> tuple[str, str]:
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
        wal_store = self._wal_store
        token = self._clock.token_hex
        ident = read_wal_identity(wal_store)
        if ident is not None and ident["store"] != store_id:
            if not m.store_id:
                store_id = ident["store"]  # an old store: a racing opener named it first
            elif wal_store.list(paths.WAL_DIR):
                raise ValueError(
                    f"WAL location {wal_store.describe()} holds the WAL of another "
                    f"store ({ident['store']}, this one is {store_id}); give each store "
                    "its own wal_dir"
                )
        if ident is None:  # created once: writers opening at the same time agree on it
            ident = {"store": store_id, "wal": token(8)}
            try:
                wal_store.put_if_absent(
                    paths.WAL_IDENTITY, encode_wal_identity(ident["store"], ident["wal"])
                )
            except FileExistsError:
                ident = read_wal_identity(wal_store) or ident
        if ident["store"] != store_id:  # left by another store, with no WAL: take it over
            ident = {"store": store_id, "wal": token(8)}
            wal_store.put(paths.WAL_IDENTITY, encode_wal_identity(ident["store"], ident["wal"]))
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

    def _claim(self, ownership: Any) -> tuple[Manifest, Manifest, str]:
        """Steps 1 and 2: returns (the manifest found, the claim, this WAL's id)."""
        mstore = self._manifests.mstore
        token = self._clock.token_hex
        m = mstore.load_latest()
        if m is None:
            try:
                mstore.write(
                    Manifest(
                        id=1,
                        writer_epoch=0,
                        created_ms=self._manifests.now_ms(),
                        store_id=token(8),
                    )
                )
            except FileExistsError:
                pass
            m = mstore.load_latest()
            assert m is not None
        store_id = m.store_id or token(8)  # stores from before store_id get one
        store_id, wal_id = self.check_wal_location(m, store_id)
        switching = self._switched_wal
        while True:
            if m.store_id and m.store_id != store_id:  # a racing writer gave it one first
                raise KvError(f"{self._store.describe()}: the store changed while opening")
            # Switching WAL locations, the claim still names the old one: until the
            # final manifest below, a crash leaves the old WAL to be found again.
            claimed = m.evolve(
                id=m.id + 1,
                writer_epoch=m.writer_epoch + 1,
                created_ms=self._manifests.now_ms(),
                writer_nonce=token(8),
                claims=(*m.claims, m.id + 1)[-MAX_CLAIMS:],
                store_id=store_id,
                **({} if switching else {"wal_dir": self._wal_dir, "wal_id": wal_id}),
                wal_clean=m.wal_clean if switching else False,
                # segment wal_replay_from must exist unless the last writer closed cleanly
                wal_journal=m.wal_journal and not m.wal_clean,
            )
            try:
                mstore.write(claimed)
                break
            except FileExistsError:
                latest = mstore.load_latest()
                assert latest is not None
                m = latest
        self._manifests.claimed(claimed)
        epoch = claimed.writer_epoch
        if ownership is not None:  # other opens now see this writer's epoch
            ownership.claimed(epoch)
        if self._opts.seed is not None:  # reproducible, but distinct per writer session
            self._files.ids = IdGenerator(self._opts.seed * 1_000_003 + epoch, self._clock.time)
        cell = self._manifests.epoch_cell
        if cell is not None:
            cell.raise_to(epoch)  # tell an old writer, cheaply
        old_cell = getattr(self._old_wal_store, "open_epoch_cell", None)
        other = None if old_cell is None else old_cell(paths.EPOCH_CELL)
        if other is not None:  # the last writer's WAL was elsewhere: tell it there too
            try:
                other.raise_to(epoch)
            finally:
                other.close()
        return m, claimed, wal_id

    def _replay(self, m: Manifest, claimed: Manifest, journal: bool) -> tuple[ReplayResult, int]:
        """Steps 3 and 4: the replayed records and the next free WAL id."""
        opts = self._opts
        upto: int | None = None
        if journal:
            found = list_wal_ids(self._wal_store)
            next_id = max([i for i, _ in found] + [claimed.wal_replay_from - 1]) + 1
        else:  # step 3: fence the old writer's next WAL object
            next_id = _place_fence(self._wal_store, claimed.wal_replay_from)
            upto = next_id - 1
        source: ObjectStore | None = self._wal_store
        if self._switched_wal:  # replay the last writer's WAL, where it was; here is old
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
                cut_damage=opts.accept_wal_loss,
            )
        gap = missing_seq((r.seq for r in result.records), claimed.last_flushed_seq)
        if gap is not None:
            if not opts.accept_wal_loss:
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
            if not opts.accept_wal_loss:
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
        return result, next_id

    def _open_wal(
        self, journal: bool, next_id: int, data_ids: list[int]
    ) -> tuple[JournalWal | ObjectWal, int]:
        """A fresh WAL after everything replayed; returns it and its first id."""
        fence_check = self._manifests.fence_check
        on_fenced = self._health.mark_fenced
        if journal:
            while True:
                try:
                    journal_wal = JournalWal(
                        self._wal_store,
                        next_id,
                        fence_check,
                        on_fenced=on_fenced,
                        clock=self._clock,
                    )
                    return journal_wal, next_id
                except FileExistsError:
                    next_id += 1
        object_wal = ObjectWal(
            self._wal_store,
            next_id + 1,
            data_ids,
            fence_check=fence_check,
            fence_check_interval=self._opts.fence_check_interval,
            on_fenced=on_fenced,
            clock=self._clock,
        )
        return object_wal, next_id + 1

    def run(self, ownership: Any) -> Recovered:
        for st in {id(self._store): self._store, id(self._wal_store): self._wal_store}.values():
            if isinstance(st, LocalStore):
                st.cleanup_temp()
        opts = self._opts
        files = self._files
        retention = self._retention
        m, claimed, wal_id = self._claim(ownership)
        switching = self._switched_wal
        journal = self._use_journal()
        result, next_id = self._replay(m, claimed, journal)
        data_ids = result.data_ids if not journal and not switching else []
        last_seq = max([claimed.last_flushed_seq] + [r.seq for r in result.records])
        for meta in claimed.all_ssts():
            files.handle(meta)
        # step 5: replayed writes go to an SST; a fresh WAL segment starts.
        wal, first_id = self._open_wal(journal, next_id, data_ids)
        new_l0 = claimed.l0
        retention.seq_times.extend(claimed.seq_times)
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
            used = retention.watermark()  # the persisted one, or by age from the samples
            if opts.retention == "all" and used is None:
                used = claimed.last_flushed_seq
            handle = files.write_memtable(mt, [], used)
            new_l0 = (handle.meta, *claimed.l0)
        retention_seq = claimed.retention_seq
        if opts.retention == "all" and retention_seq is None:
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
            created_ms=self._manifests.now_ms(),
        )
        self._manifests.write(final)
        files.inflight.clear()  # the replayed SST is in the manifest now
        state = files.state(final, Memtable(first_id))
        if final.retention_seq is not None:
            retention.floor_seq = final.retention_seq
        else:  # SSTs hold the newest versions up to last_flushed_seq; replay kept from w
            w = retention.watermark()
            retention.floor_seq = last_seq if w is None else max(claimed.last_flushed_seq, w)
        wal.delete_before(first_id)
        self._queue_unreferenced(final)
        log.info(
            "opened %s: epoch %d, manifest %d, last seq %d, replayed %d writes",
            self._store.describe(),
            claimed.writer_epoch,
            final.id,
            last_seq,
            len(result.records),
        )
        return Recovered(wal, state, last_seq)

    def _queue_unreferenced(self, final: Manifest) -> None:
        """SSTs no manifest or checkpoint references (replaced, or left by a crash)
        go to GC; its grace counts from when a file became obsolete, as recorded."""
        self._checkpoints.load(final)
        live = {meta.id for meta in final.all_ssts()} | self._checkpoints.pinned()
        now = self._clock.time()
        recorded = {sst_id: ms / 1000 for sst_id, ms in final.obsolete}
        for name in self._store.list(paths.SST_DIR):
            sst_id = paths.parse_sst_name(name)
            if sst_id is not None and sst_id not in live:
                self._files.obsolete.append((min(recorded.get(sst_id, now), now), sst_id))


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
