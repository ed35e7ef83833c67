"""The SST files of one writer: open handles, names in flight, the obsolete queue.

* ``handles``: an open :class:`~kvstore.readpath.SstHandle` per SST id the
  tree (or a checkpoint being read) uses, checked against its manifest entry.
* ``inflight``: SSTs written whose manifest is not written yet. GC never
  touches them; a writer that gives up on one removes it (an orphan then).
* ``obsolete``: ``(when, sst id)`` of files a manifest no longer references,
  oldest first: GC deletes each once its grace has passed since ``when``.

``lock`` (the GC lock) guards ``obsolete`` and whole GC passes; compaction
queues under it, checkpoints restart a grace under it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from kvstore import paths
from kvstore import readpath as rp
from kvstore.cache import BlockCache
from kvstore.entries import Columns, Entry
from kvstore.errors import CorruptionError
from kvstore.format.manifest import Manifest, SstMeta
from kvstore.format.sst import build_sst
from kvstore.format.sst_reader import SstReader
from kvstore.ids import IdGenerator
from kvstore.memtable import Memtable
from kvstore.objstore import ObjectStore
from kvstore.options import Options

log = logging.getLogger("kvstore")


def open_sst(store: ObjectStore, meta: SstMeta, cache: BlockCache | None) -> rp.SstHandle:
    """Open SST ``meta.id``, refusing one whose properties disagree with ``meta``."""
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


class SstFiles:
    def __init__(
        self, store: ObjectStore, options: Options, ids: IdGenerator, cache: BlockCache
    ) -> None:
        self.store = store
        self.ids = ids  # re-seeded by recovery once the writer epoch is known
        self.cache = cache
        self._opts = options
        self.handles: dict[str, rp.SstHandle] = {}
        self.inflight: set[str] = set()
        self.obsolete: list[tuple[float, str]] = []
        self.lock = threading.RLock()

    # -- handles -----------------------------------------------------------
    def handle(self, meta: SstMeta) -> rp.SstHandle:
        h = self.handles.get(meta.id)
        if h is None:
            h = self.handles[meta.id] = open_sst(self.store, meta, self.cache)
        return h

    def state(
        self, m: Manifest, active: Memtable, immutable: tuple[Memtable, ...] = ()
    ) -> rp.State:
        """The read state of manifest ``m`` with these memtables."""
        handle = self.handle
        return rp.State(
            active=active,
            immutable=immutable,
            l0=tuple(handle(s) for s in m.l0),
            runs=tuple(rp.SortedRun.of(tuple(handle(s) for s in run)) for run in m.runs),
        )

    # -- writing -----------------------------------------------------------
    def write_memtable(
        self, mt: Memtable, snapshot_seqs: list[int], watermark: int | None = None
    ) -> rp.SstHandle:
        return self.write(mt.flush_entries(snapshot_seqs, watermark))

    def write(self, entries: list[Entry] | Columns) -> rp.SstHandle:
        """Write one SST under a fresh name; it stays in ``inflight`` until a
        manifest names it (the caller's business)."""
        o = self._opts
        data, summary = build_sst(
            entries,
            block_bytes=o.block_bytes,
            bloom_bits_per_key=o.bloom_bits_per_key,
            compression=o.compression,
            compression_level=o.compression_level,
        )
        while True:
            sst_id = self.ids.ulid()
            self.inflight.add(sst_id)  # GC must not touch it until a manifest holds it
            try:
                self.store.put_if_absent(paths.sst_name(sst_id), data)
                break
            except FileExistsError:  # names never repeat: draw another
                self.inflight.discard(sst_id)
                log.warning("SST name %s already taken; drawing another", sst_id)
            except BaseException:
                # no manifest will name it: if it landed anyway, GC may collect it
                self.inflight.discard(sst_id)
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
            handle = self.handles[sst_id] = open_sst(self.store, meta, self.cache)
        except BaseException:
            self.inflight.discard(sst_id)
            raise
        return handle

    # -- the obsolete queue -------------------------------------------------
    def retire(self, ids: Iterable[str], when: float) -> None:
        """Queue SSTs a written manifest replaced (a GC pass may have queued some)."""
        with self.lock:
            queued = {sst_id for _, sst_id in self.obsolete}
            self.obsolete.extend((when, i) for i in ids if i not in queued)

    def restart_grace(self, ids: frozenset[str], now: float) -> None:
        """Files a deleted checkpoint pinned start a fresh grace at ``now``."""
        with self.lock:
            self.obsolete = [(now if i in ids else when, i) for when, i in self.obsolete]

    def obsolete_record(
        self, m: Manifest, retired: Iterable[str] = (), at: float | None = None
    ) -> tuple[tuple[str, int], ...]:
        """The ``obsolete`` field for manifest ``m``: SSTs waiting for GC and since when.

        Read without the GC lock: a pass may be changing the queue, so an entry
        can lag by one manifest; the record only ever says a file became
        obsolete later than it did (never earlier), so GC never deletes early."""
        live = {s.id for s in m.all_ssts()}
        record = {sst_id: int(when * 1000) for when, sst_id in list(self.obsolete)}
        if retired:
            assert at is not None
            ms = int(at * 1000)
            for sst_id in retired:
                record[sst_id] = ms
        return tuple(sorted((i, t) for i, t in record.items() if i not in live))
