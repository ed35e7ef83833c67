"""Automatic compaction: the writer compacts partitions with many small files itself.

After each commit of a :class:`~lakehouse.Lakehouse` (the writer; readers
never compact), :meth:`AutoCompactor.note` counts, per table partition, the
small files the commit added (below half the table's target file size). A
partition whose count reaches the table's ``compaction.min-files`` is queued
(and the whole table, once, the first time this writer adds a small file to
it: earlier writers may have left small files), and one background thread
compacts it in a transaction of its own
(``txn.compact(table, partition=..., min_files=...)``: only small files, merged
within size tiers, see :mod:`lakehouse.data.compaction`)::

    writer thread   commit ─ note ─┐ commit ─ note ─┐ ...            (counting only)
                                   ▼                ▼
    compactor thread            [queue] ── begin ─ compact(partition) ─ commit

Table properties (strings, set with ``create_table(properties=...)`` or
``alter_table(set_properties=...)``):

================================  =========  ==================================
``compaction.auto``               ``true``   ``"false"`` turns it off
``compaction.min-files``          ``16``     small files added to a partition
                                             (since this writer last compacted
                                             it) that queue it; also the size
                                             of a tier that is merged
``compaction.target-file-bytes``  64 MiB     target size; "small" is below half
``compaction.delete-threshold``   ``0.5``    deleted fraction of a file (deleted
                                             rows / rows, in (0, 1]) at which a
                                             commit's deletes queue its
                                             partition, whose compaction then
                                             rewrites it
``inline.flush_rows``             10 x max   live inlined rows of a table that
                                             make it flush them (0: any); by
                                             default 10 x its
                                             ``inline.max_rows``
================================  =========  ==================================

The rules: compaction never fails a writer and never fails because of one.
:meth:`note` only counts under a lock (nothing it does can raise into the
commit that called it). The compactor's transaction rebases over concurrent
deletes and updates like any compaction; when it conflicts (another
compaction of the same files, an overwrite) or fails for any other reason,
the error is logged (``logging``, logger ``lakehouse``), the partition keeps
its count and is queued again by the next commit that adds a small file to
it. Its own commits add no count. A kill at any point loses nothing: a
compaction is one commit (its files are orphans until then, removed by
``remove_orphan_files``).

**Deleted rows.** A commit that deletes rows (a delete, update or merge) looks
up the files it deleted from (their records, which the transaction read) and
queues the partition of each file whose deleted fraction, its earlier
deletions included, reaches ``compaction.delete-threshold``. The partition's
incremental compaction rewrites the files at the threshold, binned by size,
besides the small files it merges anyway (a file below it keeps its
deletion vector). The rewrite carries deletes committed meanwhile like any
compaction.

**Inlined rows** (inline data files, :mod:`lakehouse.data.inline`) are
counted per table apart from small files: a commit's inline files add their
rows and their number. Once this writer has added ``inline.flush_rows``
rows or ``compaction.min-files`` inline files to a table since it last
flushed it, the table is queued (every partition); the compaction then
moves its inline files into Parquet when the table really holds that many
live inlined rows or inline files (:func:`lakehouse.data.compaction.flush_due`,
which also lets the first look at a table flush what earlier writers left),
merged with their partitions' smallest files. ``compaction.auto = "false"``
turns this off as well.

``lh.close()`` stops the thread: a compaction in progress is abandoned at its
next file read (rolled back: its new files deleted), queued ones are dropped.
``lh.wait_for_compaction()`` (a testing aid) blocks until the queue is empty
and no compaction runs, so tests see a deterministic state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyroaring import AbstractBitMap

from lakehouse.data import compaction, partitioning
from lakehouse.errors import NotFound, RetryableConflict
from lakehouse.model import CompactResult, DataFile, DataOp, TableDef

if TYPE_CHECKING:
    from lakehouse.data.table import TableIntent
    from lakehouse.intent import TxnIntent
    from lakehouse.txn import Transaction

log = logging.getLogger("lakehouse")

#: default of ``compaction.min-files``
MIN_FILES = 16


class _Stop(Exception):
    """The lakehouse is closing: abandon the compaction in progress."""


@dataclass(frozen=True)
class Settings:
    """A table's automatic-compaction properties, parsed."""

    auto: bool
    min_files: int
    target: int
    #: live inlined rows that make the table's inline files flushed
    flush_rows: int
    #: a file's deleted fraction that queues its partition
    delete_threshold: float = compaction.DELETE_THRESHOLD


def settings(d: TableDef) -> Settings:
    """``d``'s properties (ValueError naming the property if one is malformed)."""
    p = d.properties
    auto = p.get("compaction.auto", "true").strip().lower()
    if auto not in ("true", "false"):
        raise ValueError(
            f"table {d.qualified_name}: property compaction.auto must be 'true' or 'false', "
            f"not {p['compaction.auto']!r}"
        )
    raw = p.get("compaction.min-files", str(MIN_FILES))
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 2:
        raise ValueError(
            f"table {d.qualified_name}: property compaction.min-files must be an integer "
            f">= 2, not {raw!r}"
        )
    return Settings(
        auto == "true",
        n,
        compaction.target_bytes(d, None),
        compaction.flush_rows(d),
        compaction.delete_threshold(d),
    )


#: a job's key: (table id, partition; None: every partition; :data:`_INLINE`: the
#: table's flush of inlined rows)
_Key = tuple[str, compaction.PartKey | str | None]
_INLINE = "inline"


@dataclass(frozen=True)
class _Job:
    table: str
    table_id: str
    #: None: every partition (the first look at a table, or a flush of inlined rows)
    partition: Mapping[str, Any] | None
    key: _Key


def _heavy(
    intent: TxnIntent, w: TableIntent, threshold: float
) -> dict[compaction.PartKey, DataFile]:
    """Per partition, a file ``w`` deleted rows from whose deleted fraction now
    reaches ``threshold`` (its record and earlier deletions as the transaction
    read them: point lookups when it did not load the table whole)."""
    base = intent.base_files(w.ns, w.name)
    out: dict[compaction.PartKey, DataFile] = {}
    for fid, new in w.deletes.items():
        dv: AbstractBitMap | None
        if fid in w.added:
            f, dv = w.added[fid], w.added_dvs.get(fid)
        else:
            fs = base.get(fid)
            if fs is None:
                continue
            f, dv = fs
        if f.is_inline or not f.record_count:
            continue  # inline files are flushed by their own rule
        deleted = len(new | dv) if dv else len(new)
        if deleted / f.record_count >= threshold:  # as compaction.candidates counts it
            out.setdefault(compaction.part_key(f), f)
    return out


class AutoCompactor:
    """Counts small files per partition after commits; compacts on its own thread."""

    def __init__(self, begin: Callable[[], Transaction]) -> None:
        self._begin = begin
        self._cond = threading.Condition()
        self._counts: dict[_Key, int] = {}
        #: inlined rows and inline files this writer added per table (by table id)
        #: since it last flushed the table
        self._inline: dict[str, tuple[int, int]] = {}
        #: tables this writer added small files to already (by table id)
        self._seen: set[str] = set()
        self._queue: list[_Job] = []
        self._queued: set[_Key] = set()
        self._running = False
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- the writer's side ------------------------------------------------------------
    def note(self, intent: TxnIntent) -> None:
        """A commit of ``intent`` succeeded: count its small files (never raises)."""
        try:
            self._note(intent)
        except Exception:  # counting must never fail a commit that already succeeded
            log.exception("automatic compaction: could not count the files of a commit")

    def _note(self, intent: TxnIntent) -> None:
        for (ns, name), w in intent.table_writes.items():
            if not (w.added or w.deletes) or set(w.ops) <= {DataOp.COMPACT}:
                continue
            change = intent.touched.get(("table", f"{ns}.{name}"))
            d = None if change is None else change.final
            if not isinstance(d, TableDef):
                continue
            try:
                s = settings(d)
            except ValueError as exc:
                log.warning("automatic compaction of %s skipped: %s", d.qualified_name, exc)
                continue
            if not s.auto:
                continue
            small: dict[compaction.PartKey, Any] = {}
            counts: dict[compaction.PartKey, int] = {}
            inlined = inline_files = 0
            for f in w.added.values():
                if f.is_inline:
                    inlined += f.record_count
                    inline_files += 1
                elif f.size < s.target // 2:
                    k = compaction.part_key(f)
                    counts[k] = counts.get(k, 0) + 1
                    small.setdefault(k, f)
            heavy = _heavy(intent, w, s.delete_threshold) if w.deletes else {}
            with self._cond:
                if (counts or inline_files) and d.table_id not in self._seen:
                    self._seen.add(d.table_id)  # small or inline files of earlier writers?
                    self._enqueue(_Job(d.qualified_name, d.table_id, None, (d.table_id, None)))
                if inline_files:
                    rows, n = self._inline.get(d.table_id, (0, 0))
                    rows, n = rows + inlined, n + inline_files
                    self._inline[d.table_id] = (rows, n)
                    if rows >= s.flush_rows or n >= s.min_files:
                        flush = (d.table_id, _INLINE)
                        self._enqueue(_Job(d.qualified_name, d.table_id, None, flush))
                for k, n in counts.items():
                    key = (d.table_id, k)
                    total = self._counts[key] = self._counts.get(key, 0) + n
                    if total >= s.min_files:
                        part = partitioning.partition_dict(d, small[k])
                        self._enqueue(_Job(d.qualified_name, d.table_id, part, key))
                for k, f in heavy.items():  # the same job: it rewrites these files too
                    part = partitioning.partition_dict(d, f)
                    self._enqueue(_Job(d.qualified_name, d.table_id, part, (d.table_id, k)))

    def _enqueue(self, job: _Job) -> None:
        if job.key not in self._queued and not self._closed:
            self._queue.append(job)
            self._queued.add(job.key)
            self._start()

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._loop, name="lakehouse-auto-compaction", daemon=True
            )
            self._thread.start()
        self._cond.notify_all()

    # -- the compactor thread ---------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._closed or not self._queue:
                    self._thread = None
                    self._cond.notify_all()
                    return
                job = self._queue.pop(0)
                self._running = True
                taken = None
                if job.key[1] == _INLINE:
                    # counted afresh from here: inline files added while it runs may
                    # queue the next flush (it takes only those it sees at its begin)
                    taken = self._inline.pop(job.table_id, None)
                    self._queued.discard(job.key)
            res: CompactResult | None = None
            try:
                res = self._run(job)
            except BaseException as exc:  # nothing above this thread to raise to
                log.error("automatic compaction of %s stopped: %r", job.table, exc)
            finally:
                with self._cond:
                    self._running = False
                    self._queued.discard(job.key)
                    if res is None:
                        if taken is not None:  # failed: the count stays
                            rows, n = self._inline.get(job.table_id, (0, 0))
                            self._inline[job.table_id] = (rows + taken[0], n + taken[1])
                    elif job.key[1] == _INLINE:
                        pass  # flushed, or not due (counted afresh)
                    elif job.partition is None:
                        pass  # the first look at a table
                    elif res.files_removed:
                        # what it wrote may be small too (a tier up): counted afresh
                        self._counts[job.key] = res.files_added
                    else:
                        self._counts.pop(job.key, None)  # nothing to do: count afresh
                    self._cond.notify_all()

    def _run(self, job: _Job) -> CompactResult | None:
        """Compact one partition: what it did (nothing removed: nothing to do), None
        when it failed (the count stays)."""

        def progress(_done: int, _total: int) -> None:
            if self._closed:
                raise _Stop

        try:
            txn = self._begin()
            with txn:
                d = txn.describe_table(job.table)
                s = settings(d)
                if d.table_id != job.table_id or not s.auto:
                    return CompactResult()  # dropped and re-created, or turned off meanwhile
                res = txn.compact(
                    job.table, partition=job.partition, progress=progress, min_files=s.min_files
                )
            if res.files_removed:
                log.info(
                    "automatic compaction of %s %s: %d files -> %d (version %s)",
                    job.table,
                    "(every partition)" if job.partition is None else dict(job.partition),
                    res.files_removed,
                    res.files_added,
                    txn.committed_version,
                )
            return res
        except _Stop:
            return None
        except NotFound:
            return CompactResult()  # the table was dropped or renamed: nothing to compact
        except RetryableConflict as exc:
            log.info("automatic compaction of %s deferred: %s", job.table, exc)
        except Exception as exc:  # never raised to the user: the writer goes on
            if not self._closed:
                log.warning("automatic compaction of %s failed: %s", job.table, exc, exc_info=True)
        return None

    # -- lifetime ---------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running (True) or ``timeout`` passed."""
        with self._cond:
            return self._cond.wait_for(lambda: not (self._queue or self._running), timeout)

    def close(self) -> None:
        """Stop: drop what is queued, abandon the compaction in progress, join."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._queued.clear()
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
