"""The write-ahead log: durability and group commit.

Two implementations behind one interface, chosen by the store:

* :class:`JournalWal` (local disk): one append-only segment file per memtable
  generation, ``wal/<id>.log``. A commit appends its frame to an in-memory
  buffer under the commit lock; a durable commit then calls :meth:`sync`.
* :class:`ObjectWal` (object stores): every sync writes the buffered frames as
  one immutable object ``wal/<id>.wal`` with ``put_if_absent``. Finding the
  next id taken means another writer fenced us.

Group commit. Positions are logical byte counts (LSNs). ``sync(lsn)`` returns
once everything up to ``lsn`` is durable. One thread at a time is the
*leader*: it takes every frame buffered so far, writes it, fsyncs (or PUTs)
once, publishes the new durable LSN and wakes every waiter; those whose LSN
is now durable return at once. Before syncing, a leader whose previous group
had several writers waits briefly (at most half the last sync's duration)
for as many frames to be buffered, so groups stay large under concurrency
while a lone writer never waits::

    t1: append ─ sync: lead ─ write+fsync(f1,f2,f3) ─────────── return
    t2:   append ─ sync: wait for leader ─────────────────────── durable, return
    t3:     append ─ sync: wait ──────────────────────────────── durable, return

Lock order: commit lock -> sync condition -> buffer lock. The buffer lock is held
while bytes are written (so appends never reorder) but not while fsyncing.

Fencing. A journal is a plain file that a stale writer could keep appending
to, so after every fsync the leader asks ``fence_check()`` whether a newer
writer has claimed the store (a manifest with a higher epoch exists). If so,
nothing of that group is acknowledged. The new writer bumps the epoch
*before* reading the old segments, so any frame the old writer acknowledged
was fsynced before the bump and is replayed; frames written after the new
writer's replay sit in a segment below its ``wal_replay_from`` and are never
read again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kvstore import paths
from kvstore.clock import Clock
from kvstore.errors import CorruptionError, FencedError, KvError
from kvstore.format.manifest import Manifest
from kvstore.format.wal import (
    SEGMENT_HEADER_SIZE,
    DecodedSegment,
    WalRecord,
    all_zero,
    decode_frames,
    decode_object,
    decode_segment,
    encode_object,
    encode_record,
    segment_header,
)
from kvstore.objstore.base import Journal, ObjectStore

log = logging.getLogger("kvstore.wal")

#: for the module functions called without a clock (no state of its own)
_REAL_CLOCK = Clock()

FenceCheck = Callable[[], None]
#: told when the WAL itself finds it was fenced (its next segment or object taken)
OnFenced = Callable[[FencedError], None]


class WalFailed(KvError):
    """The WAL could not be written or synced; the database must be reopened."""


class _GroupCommit:
    """Buffering, LSNs and the leader/follower sync shared by both WALs."""

    #: the leader waits at most this fraction of the last sync's duration for
    #: the rest of the previous group to append (PostgreSQL's commit_delay idea)
    GATHER_FRACTION = 0.5
    MAX_GATHER_S = 0.002

    def __init__(self, on_fenced: OnFenced | None = None, clock: Clock | None = None) -> None:
        self._on_fenced = on_fenced
        #: time for the sync durations that size the gathering wait
        self._clock = clock if clock is not None else Clock()
        self._cv = threading.Condition(threading.Lock())
        self._syncing = False
        self._buf_lock = threading.Lock()
        self._pending: list[bytes] = []
        #: bytes appended and not yet handed to storage (the commit path reads it on
        #: every non-durable write, so a plain attribute, not a property)
        self.pending_bytes = 0
        self._appended = 0  # LSN of the end of the last appended frame
        self._synced = 0  # LSN durable so far
        #: the first failure (an I/O error, or FencedError when a newer writer took
        #: the next name); once set the WAL accepts nothing more: see raise_if_failed
        self.error: BaseException | None = None
        self._last_group = 1
        self._last_sync_s = 0.0
        self._taken_frames = 0
        self.syncs = 0
        # a gathering leader blocks on this lock; the append that completes its
        # group releases it (no spinning, so the writers it waits for get the GIL)
        self._gathering: threading.Lock | None = None
        self._gather_want = 0

    @property
    def appended(self) -> int:
        """The LSN of the end of the last appended frame (bytes appended so far)."""
        return self._appended

    def append(self, frame: bytes) -> int:
        with self._buf_lock:
            pending = self._pending
            pending.append(frame)
            self.pending_bytes += len(frame)
            self._appended += len(frame)
            gathering = self._gathering
            if gathering is not None and len(pending) >= self._gather_want:
                self._gathering = None
                gathering.release()  # the leader's group is complete: sync now
            return self._appended

    def append_record(self, seq: int, keys: list[bytes], values: list[bytes | None]) -> int:
        """Encode one commit's record and append it; returns its LSN (see :meth:`append`)."""
        return self.append(encode_record(seq, keys, values))

    def _take_pending(self) -> tuple[bytes, int]:
        data = b"".join(self._pending)
        self._taken_frames = len(self._pending)
        self._last_group = max(1, len(self._pending))
        self._pending.clear()
        self.pending_bytes = 0
        return data, self._appended

    def _fence(self, message: str) -> FencedError:
        """Record that a newer writer took this WAL's next name; returns the error."""
        exc = FencedError(message)
        if self.error is None:
            self.error = exc
        if self._on_fenced is not None:
            self._on_fenced(exc)
        return exc

    def raise_if_failed(self) -> None:
        """Raise FencedError or :class:`WalFailed` if :attr:`error` is set."""
        if self.error is not None:
            if isinstance(self.error, FencedError):
                raise FencedError(str(self.error))
            raise WalFailed(f"WAL unusable after an earlier failure: {self.error}")

    def sync(self, lsn: int) -> None:
        """Return once everything up to ``lsn`` is durable (one leader syncs for all)."""
        cv = self._cv
        with cv:
            while True:
                self.raise_if_failed()
                if self._synced >= lsn:
                    return
                if not self._syncing:
                    self._syncing = True
                    break
                cv.wait()
        target = 0
        try:
            self._gather()
            monotonic = self._clock.monotonic
            started = monotonic()
            target = self._write_and_sync()
            self._last_sync_s = monotonic() - started
            self.syncs += 1
        except BaseException as exc:
            if self.error is None:
                self.error = exc
            raise
        finally:
            with cv:
                self._syncing = False
                if self.error is None:
                    self._synced = max(self._synced, target)
                cv.notify_all()

    def _gather(self) -> None:
        """Let the writers of the last group append before syncing (no wait when alone).

        The leader blocks (releasing the GIL) until as many frames as its last
        group had are buffered, or at most GATHER_FRACTION of the last sync's
        duration.
        """
        want = self._last_group
        if want <= 1:
            return
        timeout = min(self._last_sync_s * self.GATHER_FRACTION, self.MAX_GATHER_S)
        gate = threading.Lock()
        gate.acquire()
        with self._buf_lock:
            if len(self._pending) >= want:
                return
            self._gathering, self._gather_want = gate, want
        gate.acquire(timeout=timeout)
        with self._buf_lock:
            self._gathering = None

    def _write_and_sync(self) -> int:
        raise NotImplementedError


class JournalWal(_GroupCommit):
    def __init__(
        self,
        store: ObjectStore,
        segment_id: int,
        fence_check: FenceCheck,
        *,
        on_fenced: OnFenced | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(on_fenced, clock)
        self._store = store
        self._fence_check = fence_check
        self.segment_id = segment_id
        self._journal = self._create(segment_id)

    def _create(self, segment_id: int) -> Journal:
        journal = self._store.open_journal(paths.wal_segment_name(segment_id))
        if journal is None:
            raise ValueError(f"{self._store.describe()} cannot hold a WAL journal")
        journal.append(segment_header())  # synced with the first frames
        return journal

    def write_out(self) -> None:
        """Hand buffered frames to the OS (no fsync): survives a process kill."""
        with self._buf_lock:  # checked under the lock: nothing may land after a hole
            self.raise_if_failed()
            data, _ = self._take_pending()
            if data:
                self._append_or_fail(self._journal, data)

    def _append_or_fail(self, journal: Journal, data: bytes) -> None:
        """Append taken frames; if that fails they are gone, so the WAL is unusable.

        Without this, a later sync would report the dropped frames as durable.
        """
        try:
            journal.append(data)
        except BaseException as exc:
            self.error = exc
            raise

    def _write_and_sync(self) -> int:
        with self._buf_lock:
            self.raise_if_failed()  # a failed write_out dropped frames: no sync covers them
            data, target = self._take_pending()
            journal = self._journal
            if data:
                self._append_or_fail(journal, data)
        journal.sync()
        self._fence_check()
        return target

    def rotate(self) -> int:
        """Close the current segment (durably) and start the next; returns its id."""
        with self._cv:
            while self._syncing:
                self._cv.wait()
            with self._buf_lock:
                self.raise_if_failed()  # under the lock: nothing may land after a hole
                data, target = self._take_pending()
                if data:
                    self._append_or_fail(self._journal, data)
                try:
                    self._journal.sync()
                except BaseException as exc:
                    self.error = exc
                    raise
                self._fence_check()
                try:
                    journal = self._create(self.segment_id + 1)
                except FileExistsError:
                    raise self._fence(
                        f"WAL segment {self.segment_id + 1} was created by a newer writer"
                    ) from None
                except BaseException as exc:  # e.g. EIO: the WAL cannot go on
                    self.error = exc
                    raise
                self._journal.close()
                self._journal = journal
                self.segment_id += 1
            self._synced = max(self._synced, target)
        return self.segment_id

    def delete_before(self, first_live: int) -> None:
        """Delete the journal segments below ``first_live`` (their writes are in SSTs).

        Best effort: a failure is logged and the rest stay; leftovers are
        harmless, replay skips flushed seqs.
        """
        try:
            for wal_id, kind in list_wal_ids(self._store):
                if wal_id < first_live and kind == "log":
                    self._store.delete(paths.wal_segment_name(wal_id))
        except OSError as exc:
            log.warning("could not delete old WAL segments: %s", exc)

    def close(self) -> None:
        try:
            if self.error is None:
                self.sync(self._appended)
        finally:
            self._journal.close()

    def release(self) -> None:
        """Close the open segment without writing out what is buffered (after a
        failure; idempotent, and :meth:`close` does it too)."""
        self._journal.close()


class ObjectWal(_GroupCommit):
    def __init__(
        self,
        store: ObjectStore,
        next_id: int,
        data_ids: list[int] | None = None,
        *,
        fence_check: FenceCheck | None = None,
        fence_check_interval: float = 1.0,
        on_fenced: OnFenced | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(on_fenced, clock)
        self._store = store
        self.next_id = next_id
        self._fence_check = fence_check
        self._fence_interval = fence_check_interval
        self._last_fence_check = self._clock.monotonic()
        #: ids of WAL objects holding frames (fence objects are never listed here,
        #: and never deleted)
        self.data_ids: list[int] = list(data_ids or [])

    def write_out(self) -> None:
        self.sync(self._appended)

    def _write_and_sync(self) -> int:
        with self._buf_lock:
            data, target = self._take_pending()
            frames = self._taken_frames
        if data:
            name = paths.wal_object_name(self.next_id)
            try:
                self._store.put_if_absent(name, encode_object(data, frames))
            except FileExistsError:
                raise self._fence(f"WAL object {name} was taken by a newer writer") from None
            self.data_ids.append(self.next_id)
            self.next_id += 1
            self._maybe_check_fence()
        return target

    def _maybe_check_fence(self) -> None:
        """A writer that keeps committing must still learn it was fenced.

        The new writer places its fence above the highest WAL id it sees, and a
        busy old writer keeps taking the next id first. So every
        ``fence_check_interval`` the old writer asks the manifest. The group
        just written stays acknowledged (it lies below any fence and will be
        replayed); only later writes fail.
        """
        if self._fence_check is None:
            return
        now = self._clock.monotonic()
        if now - self._last_fence_check < self._fence_interval:
            return
        self._last_fence_check = now
        try:
            self._fence_check()
        except FencedError as exc:
            self.error = exc

    def rotate(self) -> int:
        """Write out what is buffered; later writes start at a fresh object id."""
        self.sync(self._appended)
        return self.next_id

    def delete_before(self, first_live: int) -> None:
        """Delete this writer's WAL data objects below ``first_live`` (in SSTs now).

        Only ids in :attr:`data_ids` (fence objects are never deleted); each
        deleted id leaves that list. Best effort: a failure is logged and the
        rest stay for a later call; replay skips flushed seqs.
        """
        try:
            ids = self.data_ids
            for wal_id in [i for i in ids if i < first_live]:
                self._store.delete(paths.wal_object_name(wal_id))
                ids.remove(wal_id)
        except OSError as exc:
            log.warning("could not delete old WAL segments: %s", exc)

    def close(self) -> None:
        if self.error is None:
            self.sync(self._appended)

    def release(self) -> None:
        """Nothing to close: each group is its own object (see JournalWal.release)."""


Wal = JournalWal | ObjectWal


@dataclass(frozen=True)
class ReplayResult:
    records: list[WalRecord]
    ids: list[int]  # every WAL id found at or after the start
    max_id: int  # highest WAL id seen anywhere (0 if none)
    data_ids: list[int]  # WAL objects holding frames (not fences)
    #: ``(id, end of its last complete frame)`` when the last id read is a journal
    #: segment: where decoding its later frames can resume (:func:`decode_journal_from`)
    tail: tuple[int, int] | None = None


def list_wal_ids(store: ObjectStore) -> list[tuple[int, str]]:
    out = []
    for name in store.list(paths.WAL_DIR):
        parsed = paths.parse_wal_name(name)
        if parsed is not None:
            out.append(parsed)
    out.sort()
    return out


def replay(
    store: ObjectStore,
    start_id: int,
    after_seq: int,
    *,
    upto_id: int | None = None,
    tolerate_missing: bool = False,
    cut_damage: bool = False,
    clock: Clock | None = None,
) -> ReplayResult:
    """Read every WAL segment/object with ``start_id <= id (<= upto_id)``.

    Returns the records with ``seq > after_seq`` in seq order. Journal
    segments may end in a torn tail (cut); WAL objects are written whole, so
    a short one is corruption. ``clock`` times the re-reads of a segment
    caught mid-write (see :func:`decode_journal`).
    """
    found = list_wal_ids(store)
    max_id = max((i for i, _ in found), default=0)
    records: list[WalRecord] = []
    ids: list[int] = []
    data_ids: list[int] = []
    seen: set[int] = set()
    tail: tuple[int, int] | None = None
    for wal_id, kind in found:
        if wal_id < start_id or (upto_id is not None and wal_id > upto_id):
            continue
        name = (paths.wal_segment_name if kind == "log" else paths.wal_object_name)(wal_id)
        try:
            data = store.get(name)
            if kind == "log":  # (may read the segment again)
                try:
                    data, decoded = decode_journal(store, name, data, clock=clock)
                except CorruptionError as exc:
                    # Unsynced pages of the live segment may reach the disk out of
                    # order in a power loss; a writer that accepts WAL loss cuts
                    # there. Older segments were synced whole: never cut.
                    if not cut_damage or not _nothing_after(store, found, wal_id, upto_id):
                        raise
                    decoded = decode_segment(data, where=name, lenient=True)
                    log.error(
                        "cut %s at byte %d, losing what follows (accept_wal_loss): %s",
                        name,
                        decoded.valid_length,
                        exc,
                    )
        except FileNotFoundError:
            if tolerate_missing:
                continue
            raise
        ids.append(wal_id)
        if kind == "wal":
            recs, fence = decode_object(data, where=name)
            if not fence:
                data_ids.append(wal_id)
            tail = None
        else:
            recs = decoded.records
            tail = (wal_id, decoded.valid_length)
            if decoded.torn:
                cut = len(data) - decoded.valid_length
                if all_zero(data, decoded.valid_length):  # preallocated, or zero-filled
                    log.debug("cut %d zero bytes after the last frame of %s", cut, name)
                else:
                    log.info("cut a torn tail of %d bytes from %s", cut, name)
        for rec in recs:
            if rec.seq in seen:
                raise CorruptionError(f"sequence number {rec.seq} appears twice", object_name=name)
            seen.add(rec.seq)
            if rec.seq > after_seq:
                records.append(rec)
    records.sort(key=lambda r: r.seq)
    return ReplayResult(records, ids, max_id, data_ids, tail)


def missing_seq(seqs: Iterable[int], after_seq: int) -> int | None:
    """The first seq missing from ascending replayed ``seqs`` after ``after_seq``.

    Every commit takes the next seq and is one WAL record, so what a replay
    returns must continue the SSTs' ``last_flushed_seq`` without a gap; a gap
    means WAL data (or the manifest that retired it) is missing.
    """
    for expected, seq in enumerate(seqs, after_seq + 1):
        if seq != expected:
            return expected
    return None


def _nothing_after(
    store: ObjectStore, found: list[tuple[int, str]], wal_id: int, upto_id: int | None
) -> bool:
    """Whether no journal segment after ``wal_id`` holds a frame: ``wal_id`` is then
    the live segment of the last writer (later ones were only opened), the one
    whose unsynced pages a power loss may have left out of order."""
    for later, kind in found:
        if kind != "log" or later <= wal_id or (upto_id is not None and later > upto_id):
            continue
        name = paths.wal_segment_name(later)
        try:
            if decode_segment(store.get(name), where=name, lenient=True).records:
                return False
        except FileNotFoundError:
            continue
    return True


#: how often a journal segment that fails to decode is read again before the
#: failure is believed (only segments ending in zero padding: see below)
LIVE_REREADS = 3


def decode_journal(
    store: ObjectStore, name: str, data: bytes, *, clock: Clock | None = None
) -> tuple[bytes, DecodedSegment]:
    """Decode a journal segment, reading it again if it may have been read mid-write.

    A live journal is preallocated, so a writer's ``pwrite`` lands inside the
    file rather than past its end, and a concurrent ``read`` is not atomic
    with it: the reader can copy the page holding a frame's start before the
    write and a later page after it, and see zeros followed by data, which
    the torn-tail rule reports as corruption. That can only happen in a
    segment that ends in zero padding (a closed segment has none), and it
    lasts only as long as the write, so such a segment is read again a few
    times, a moment apart (``clock.sleep``); damage on disk fails every time
    and is raised.
    """
    return _decode_rereading(
        lambda: store.get(name), lambda d: decode_segment(d, where=name), clock, data
    )


def decode_journal_from(
    store: ObjectStore, name: str, start: int, *, clock: Clock | None = None
) -> DecodedSegment:
    """The frames of journal segment ``name`` from byte ``start`` on, read with
    ``get_range`` (``valid_length`` stays an offset in the whole segment).

    ``start`` must be where an earlier decode of this segment stopped, at or
    after its header (a :attr:`DecodedSegment.valid_length`): a frame boundary.
    Frames before it never change, and the torn-tail rule only looks forward
    from a frame start, so this decodes exactly what a decode of the whole
    segment (:func:`decode_journal`, re-reads included) finds after ``start``.
    """
    if start < SEGMENT_HEADER_SIZE:
        raise ValueError(f"resume offset {start} of {name} is inside its header")
    _, decoded = _decode_rereading(
        lambda: _read_from(store, name, start), lambda d: decode_frames(d, where=name), clock
    )
    return DecodedSegment(decoded.records, start + decoded.valid_length, decoded.torn)


def _decode_rereading(
    read: Callable[[], bytes],
    decode: Callable[[bytes], DecodedSegment],
    clock: Clock | None,
    data: bytes | None = None,
) -> tuple[bytes, DecodedSegment]:
    """``(data, decode(data))`` of bytes got by ``read`` (first ``data``, when given),
    read again up to :data:`LIVE_REREADS` times, a moment apart, while the decode
    raises CorruptionError on bytes ending in zero padding (a live journal read
    mid-write, see :func:`decode_journal`); any other failure, or the last, is raised."""
    sleep = (clock if clock is not None else _REAL_CLOCK).sleep
    attempt = 0
    while True:
        if data is None:
            data = read()
        try:
            return data, decode(data)
        except CorruptionError:
            if attempt == LIVE_REREADS or not data.endswith(b"\0"):
                raise
        sleep(0.001 * 2**attempt)
        attempt += 1
        data = None


#: :func:`_read_from` asks for this much past the size it saw, so a file that grew
#: meanwhile is read to its new end (a preallocated journal grows a step at a time)
_READ_SLACK = 1 << 16


def _read_from(store: ObjectStore, name: str, start: int) -> bytes:
    """Everything of ``name`` from ``start`` to its end (at the time of reading);
    CorruptionError if it ends before ``start`` (a segment never shrinks below a frame)."""
    size = store.size(name)
    if size < start:
        raise CorruptionError(
            f"WAL segment is {size} bytes, shorter than the {start} already read of it",
            object_name=name,
        )
    want = size - start + _READ_SLACK
    parts = [store.get_range(name, start, want)]
    while len(parts[-1]) == want:  # it grew past what we asked for: read on
        start += want
        parts.append(store.get_range(name, start, want))
    return parts[0] if len(parts) == 1 else b"".join(parts)


def live_segment_missing(m: Manifest, found_ids: list[int]) -> bool:
    """Whether the journal segment ``m`` says replay starts at is gone.

    A journal writer creates that segment before any manifest names it and
    deletes it only after a newer manifest moved past it, so unless its
    writer closed cleanly (everything in SSTs) it must exist: missing, the
    acknowledged writes it held are lost. (Object WALs may legitimately have
    no object at ``wal_replay_from`` yet.)"""
    return m.wal_journal and not m.wal_clean and m.wal_replay_from not in found_ids


def sweep_wal_objects(store: ObjectStore, start: int, below: int) -> bool:
    """Delete the data WAL objects with ``start <= id < below``; True if all went.

    Everything below a manifest's ``wal_replay_from`` is in SSTs, so these
    objects are garbage: a writer deletes its own after each flush, but a
    crash between the manifest and the deletes leaves them. Fence objects
    stay (a fenced writer that is still running must keep finding its next
    name taken), and so does anything that does not decode as a WAL object.
    """
    complete = True
    for wal_id, kind in list_wal_ids(store):
        if kind != "wal" or not start <= wal_id < below:
            continue
        name = paths.wal_object_name(wal_id)
        try:
            _records, fence = decode_object(store.get(name), where=name)
            if not fence:
                store.delete(name)
                log.info("deleted %s, left behind by a crash (already in SSTs)", name)
        except FileNotFoundError:
            continue
        except CorruptionError as exc:  # not ours to judge here: keep it
            log.warning("kept %s below the replay start: %s", name, exc)
        except OSError as exc:
            log.warning("could not delete %s: %s", name, exc)
            complete = False
    return complete
