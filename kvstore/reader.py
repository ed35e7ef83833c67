"""A read-only view of a store, usable from any process.

It loads the latest manifest and replays the WAL (complete frames only: a
frame still being written is simply not there yet) into a private memtable.
The WAL is read where the manifest says its writer keeps it (the store, or
the recorded ``wal_dir``); a ``wal_dir`` passed in must be that location (its
``wal.id``), and a WAL that cannot be found is refused with ValueError rather
than silently showing only the flushed state. A location without a store
(no manifest) raises FileNotFoundError: a reader never shows a store that
is not there.
:meth:`Reader.refresh` repeats that when the writer has moved on; with
``refresh_interval`` set, reads refresh at most that often on their own.

A refresh costs what changed. While the latest manifest is still the one
loaded last (the same id: manifests are never rewritten), it reads only the
WAL written since: the part of the last journal segment after its last
complete frame (``get_range`` from that frame boundary, torn-tail rule and
re-reads as in a full replay), and the segments/objects that appeared after
it. The new records are applied to the memtable in place: it keeps every
version by seq and its reads take no lock, so snapshots handed out earlier
read exactly what they read before. Anything unexpected (another manifest, a
segment read before now gone, an id appearing below one read, damage, a
record that does not continue the seq) takes the full path above, with its
retries and errors.
Every write call raises :class:`PermissionError`-free :class:`KvError`
subclasses: a reader has no write methods at all, so ``put`` is an
AttributeError... except that users expect a clear message, so the write
calls exist and raise :class:`ReadOnlyError`.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from kvstore import paths
from kvstore import readpath as rp
from kvstore.cache import BlockCache
from kvstore.clock import Clock
from kvstore.engine.sstfiles import open_sst
from kvstore.errors import CheckpointNotFound, ClosedError, CorruptionError, KvError
from kvstore.format.manifest import Manifest
from kvstore.format.wal import SEGMENT_HEADER_SIZE, DecodedSegment, WalRecord, decode_object
from kvstore.format.wal_id import read_wal_identity
from kvstore.manifest_store import ManifestStore
from kvstore.memtable import Memtable
from kvstore.objstore import LocalStore, ObjectStore
from kvstore.reads import ReadSurface
from kvstore.wal import (
    ReplayResult,
    decode_journal,
    decode_journal_from,
    list_wal_ids,
    live_segment_missing,
    missing_seq,
    replay,
)


@dataclass(frozen=True)
class _WalRead:
    """How far a refresh read the WAL of the manifest it loaded."""

    wal: ObjectStore | None  # where (None: nothing to replay)
    ids: frozenset[int]  # the WAL ids at or after its ``wal_replay_from`` read whole so far
    tail: tuple[int, int] | None  # the last one, a journal segment: (id, end of its last frame)


class ReadOnlyError(KvError):
    """A write was attempted through a read-only view."""


class Reader(ReadSurface):
    def __init__(
        self,
        store: ObjectStore,
        *,
        wal_store: ObjectStore | None = None,
        checkpoint: str | None = None,
        block_cache_bytes: int = 64 << 20,
        refresh_interval: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        #: times ``refresh_interval`` and the retries of a refresh that raced the writer
        self._clock = clock if clock is not None else Clock()
        self._store = store
        #: the WAL location the caller named (None: the one manifests record)
        self._given_wal = wal_store
        self._wal_cache: dict[tuple[str | None, str | None], ObjectStore] = {}
        self.checkpoint = checkpoint
        self._mstore = ManifestStore(store)
        self._cache = BlockCache(block_cache_bytes)
        self._handles: dict[str, rp.SstHandle] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._interval = refresh_interval
        self._last_refresh = 0.0
        self._manifest: Manifest | None = None
        self._state = rp.State(Memtable(0), (), (), ())
        self._seq = 0
        #: how far the WAL of ``_manifest`` was read (None: refresh the full way)
        self._wal_read: _WalRead | None = None
        self.refresh()
        if self._manifest is None:
            raise FileNotFoundError(f"no kvstore at {store.describe()} (no manifest found)")

    def refresh(self) -> int:
        """Load what the writer has made durable since the last refresh; returns the seq."""
        if self._closed:
            raise ClosedError("the reader is closed")
        with self._lock:
            if self._catch_up():
                self._last_refresh = self._clock.monotonic()
                return self._seq
            self._wal_read = None
            gap_in: int | None = None  # the manifest whose replay had a gap last time
            for _attempt in range(100):
                try:
                    m = self._mstore.load_latest()
                except FileNotFoundError:
                    continue  # GC removed the manifest we listed: look again
                if m is not None and self.checkpoint is not None:
                    self._load_checkpoint(m)
                    break
                if m is None:
                    self._state = rp.State(Memtable(0), (), (), ())
                    self._seq = 0
                    break
                try:
                    wal = self._wal_for(m)
                    result = (
                        ReplayResult([], [], 0, [])
                        if wal is None
                        else replay(wal, m.wal_replay_from, m.last_flushed_seq, clock=self._clock)
                    )
                    handles = {
                        meta.id: self._handles.get(meta.id)
                        or open_sst(self._store, meta, self._cache)
                        for meta in m.all_ssts()
                    }
                except FileNotFoundError:
                    continue  # the writer flushed and deleted meanwhile: retry
                gap = missing_seq((r.seq for r in result.records), m.last_flushed_seq)
                if gap is None and wal is not None and live_segment_missing(m, result.ids):
                    gap = m.last_flushed_seq + 1  # its live journal segment is gone
                if self._mstore.latest_id() != m.id or gap is not None:
                    # The writer advanced while we read: WAL segments our manifest
                    # points to may have been deleted before we listed them, which
                    # would leave a gap between its SSTs and what we replayed.
                    # A listing, not a probe of m.id+1: GC may have deleted that
                    # one already. (Segments are deleted only after a newer
                    # manifest is written, so m still being the latest proves
                    # the replay complete; every commit takes the next seq, so
                    # a gap in the records would prove it incomplete too.)
                    if gap is not None and m.id == gap_in and _attempt >= 3:
                        # the same manifest, the same hole: not a race, damage
                        raise CorruptionError(
                            f"WAL records from seq {gap} on are missing (manifest {m.id} "
                            f"has everything up to seq {m.last_flushed_seq}); the WAL or "
                            "a newer manifest was lost"
                        )
                    gap_in = m.id if gap is not None else None
                    self._clock.sleep(0.001 * _attempt)
                    continue
                mt = Memtable(0)
                for rec in result.records:
                    mt.apply(rec.seq, rec.keys, rec.values)
                self._handles = handles
                self._manifest = m
                self._state = rp.State(
                    mt,
                    (),
                    tuple(handles[s.id] for s in m.l0),
                    tuple(rp.SortedRun.of(tuple(handles[s.id] for s in run)) for run in m.runs),
                )
                self._seq = max([m.last_flushed_seq] + [r.seq for r in result.records])
                if self.checkpoint is None:
                    self._wal_read = _WalRead(wal, frozenset(result.ids), result.tail)
                break
            else:
                raise KvError("the store changed too quickly to load a consistent view")
            self._last_refresh = self._clock.monotonic()
            return self._seq

    def _catch_up(self) -> bool:
        """Refresh by reading only what the WAL gained since the last refresh, when
        the latest manifest is still the one loaded; False: refresh the full way."""
        m = self._manifest
        done = self._wal_read
        if m is None or done is None or self._mstore.latest_id() != m.id:
            return False
        wal = done.wal
        if wal is None:
            return True  # its writer closed cleanly: the SSTs hold everything
        try:
            found = [(i, kind) for i, kind in list_wal_ids(wal) if i >= m.wal_replay_from]
            ids = frozenset(i for i, _ in found)
            new = [(i, kind) for i, kind in found if i not in done.ids]
            if not done.ids <= ids or (new and done.ids and new[0][0] < max(done.ids)):
                return False  # one read before is gone, or one appeared below: not ours to judge
            if not new and done.tail is None:
                return True  # nothing new (WAL objects are written whole, never appended to)
            records: list[WalRecord] = []
            tail = done.tail
            if tail is not None:
                tail = self._read_journal(wal, *tail, records)
            for wal_id, kind in new:
                if kind == "log":
                    tail = self._read_journal(wal, wal_id, 0, records)
                else:
                    name = paths.wal_object_name(wal_id)
                    records += decode_object(wal.get(name), where=name)[0]
                    tail = None
        except (FileNotFoundError, CorruptionError):
            return False  # the full path retries, or raises what it finds
        records.sort(key=lambda r: r.seq)
        if missing_seq((r.seq for r in records), self._seq) is not None:
            return False  # not a continuation of what we hold: let the full path judge
        if records and self._mstore.latest_id() != m.id:
            return False  # the writer moved on while we read (see the full path)
        mt = self._state.active
        for rec in records:  # seqs above every snapshot's: invisible to them
            mt.apply(rec.seq, rec.keys, rec.values)
        if records:
            self._seq = records[-1].seq
        self._wal_read = _WalRead(wal, ids, tail)
        return True

    def _read_journal(
        self, wal: ObjectStore, wal_id: int, start: int, into: list[WalRecord]
    ) -> tuple[int, int]:
        """Add the frames of journal segment ``wal_id`` from byte ``start`` (a frame
        boundary; 0: the whole segment) to ``into``; returns where the next read resumes."""
        name = paths.wal_segment_name(wal_id)
        decoded: DecodedSegment
        if start >= SEGMENT_HEADER_SIZE:
            decoded = decode_journal_from(wal, name, start, clock=self._clock)
        else:  # new, or its header was not there yet
            decoded = decode_journal(wal, name, wal.get(name), clock=self._clock)[1]
        into += decoded.records
        return wal_id, decoded.valid_length

    def _wal_for(self, m: Manifest) -> ObjectStore | None:
        """Where ``m``'s writer keeps its WAL; None when there is nothing to replay.

        ValueError when that location cannot be found (or the one given is
        another), unless its writer closed cleanly (then SSTs hold everything).
        """
        key = (m.wal_id, m.wal_dir)
        found = self._wal_cache.get(key)
        if found is not None:
            return found
        given = self._given_wal
        if given is not None:
            candidate: ObjectStore | None = given
        elif m.wal_dir is None:
            candidate = self._store
        else:
            candidate = LocalStore(m.wal_dir, create=False) if os.path.isdir(m.wal_dir) else None
        ok = candidate is not None
        if ok and m.wal_id is not None and (given is not None or m.wal_dir is not None):
            ident = read_wal_identity(candidate)  # type: ignore[arg-type]
            ok = ident is not None and ident["wal"] == m.wal_id
        elif ok and given is not None and m.wal_id is None and m.wal_dir is not None:
            ok = os.path.abspath(getattr(given, "root", "")) == m.wal_dir  # an old store
        if ok:
            assert candidate is not None
            self._wal_cache[key] = candidate
            return candidate
        if m.wal_clean:
            return None  # the writer closed with everything in SSTs
        where = "in the store" if m.wal_dir is None else f"in wal_dir={m.wal_dir!r}"
        if given is not None:
            raise ValueError(
                f"{given.describe()} is not the WAL of {self._store.describe()}: its writer "
                f"keeps the WAL {where}; open the reader with that wal_dir (or none)"
            )
        raise ValueError(
            f"the writer of {self._store.describe()} keeps its WAL {where}, which is not "
            "here: open the reader with wal_dir= naming that directory"
        )

    def _load_checkpoint(self, latest: Manifest) -> None:
        """A checkpoint is static: its manifest's SSTs, read at its seq, no WAL."""
        cp = latest.checkpoints.get(self.checkpoint or "")
        if cp is None:
            raise CheckpointNotFound(self.checkpoint or "")
        m = self._mstore.load(int(cp["manifest_id"]))
        handles = {
            meta.id: self._handles.get(meta.id) or open_sst(self._store, meta, self._cache)
            for meta in m.all_ssts()
        }
        self._handles = handles
        self._manifest = m
        self._state = rp.State(
            Memtable(0),
            (),
            tuple(handles[s.id] for s in m.l0),
            tuple(rp.SortedRun.of(tuple(handles[s.id] for s in run)) for run in m.runs),
        )
        self._seq = int(cp["seq"])

    def _maybe_refresh(self) -> None:
        if self._closed:
            raise ClosedError("the reader is closed")
        interval = self._interval
        if interval is not None and self._clock.monotonic() - self._last_refresh >= interval:
            self.refresh()

    @property
    def last_seq(self) -> int:
        return self._seq

    @property
    def manifest(self) -> Manifest:
        """The manifest this reader loaded last (a frozen value; read-only inspection)."""
        m = self._manifest
        assert m is not None  # __init__ refused a store without one
        return m

    def _view(self) -> tuple[rp.State, int]:
        self._maybe_refresh()
        return self._state, self._seq

    def snapshot(self, seq: int | None = None) -> ReaderSnapshot:
        """A view fixed at ``seq`` (default: the latest loaded) of what this reader
        loaded; later refreshes do not move it. Versions below the store's
        retention watermark may already be compacted away."""
        self._maybe_refresh()
        last = self._seq
        if seq is None:
            seq = last
        elif isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise TypeError(f"seq must be a non-negative int, not {seq!r}")
        elif seq > last:
            raise ValueError(f"seq {seq} is newer than what the reader has loaded ({last})")
        return ReaderSnapshot(self._state, seq)

    def _read_only(self, *_: Any, **__: Any) -> Any:
        raise ReadOnlyError("this is a read-only view; open the store with kvstore.open to write")

    put = delete = write = flush = _read_only

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReaderSnapshot(ReadSurface):
    """A reader's state at one seq: ``get`` / ``scan`` / ``scan_prefix``, like a Snapshot."""

    def __init__(self, state: rp.State, seq: int) -> None:
        self._state = state
        self.seq = seq

    def _view(self) -> tuple[rp.State, int]:
        return self._state, self.seq

    def close(self) -> None:
        """Nothing to release (kept for the Snapshot interface)."""

    def __enter__(self) -> ReaderSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
