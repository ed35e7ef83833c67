"""One iterator protocol for every source of entries.

Every source (memtable, SST, sorted run) yields internal entries
``(key, seq, value)`` (``value is None`` is a tombstone):

* forward: key ascending, and for one key seq descending (newest first);
* reverse: key descending, and for one key *still* seq descending.

Keeping "newest first within a key" in both directions lets one visibility
layer serve both::

    sources --merge--> all versions, ordered --visible(read_seq)--> (key, value)

``visible`` keeps, for each key, the first version with ``seq <= read_seq``
and drops the key if that version is a tombstone. Seqs are unique across
sources (one seq per write, keys unique within a write), so the merge never
has to break ties (a transaction's own writes are the one exception, see
:class:`OwnWrites`). Sources implement :class:`EntrySource`.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from operator import eq, itemgetter
from typing import Protocol

from kvstore.entries import Columns, Entry

#: a block's entries as parallel columns (keys, seqs, values)
BlockColumns = tuple[list[bytes], tuple[int, ...], list["bytes | None"]]


class EntrySource(Protocol):
    """An ordered source of entries: memtables, SSTs, sorted runs and a
    transaction's own writes (:class:`OwnWrites`) all are one."""

    def iter_forward(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        """Entries with ``start <= key < end``: key ascending, newest first per key."""
        ...

    def iter_reverse(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        """The same entries, key descending (still newest first per key)."""
        ...


class OwnWrites:
    """A transaction's buffered writes as an entry source at its read seq.

    Listed first in a merge, an own write sorts before a committed version
    with the same key and seq (``heapq.merge`` is stable), so
    :func:`visible` at ``read_seq`` shows it and hides what it overwrote or
    deleted. The one place two sources may share a seq."""

    __slots__ = ("_items", "_seq")

    def __init__(self, writes: dict[bytes, bytes | None], read_seq: int) -> None:
        self._items = sorted(writes.items())
        self._seq = read_seq

    def _range(self, start: bytes | None, end: bytes | None) -> list[tuple[bytes, bytes | None]]:
        items = self._items
        lo = 0 if start is None else bisect_left(items, (start,))
        hi = len(items) if end is None else bisect_left(items, (end,))
        return items[lo:hi]

    def any_in(self, start: bytes | None, end: bytes | None) -> bool:
        return bool(self._range(start, end))

    def iter_forward(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        seq = self._seq
        return ((k, seq, v) for k, v in self._range(start, end))

    def iter_reverse(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        seq = self._seq
        return ((k, seq, v) for k, v in reversed(self._range(start, end)))


def _fwd(e: Entry) -> tuple[bytes, int]:
    return (e[0], -e[1])


def _rev(e: Entry) -> tuple[bytes, int]:
    return (e[0], e[1])


def merge(sources: list[Iterator[Entry]], *, reverse: bool = False) -> Iterator[Entry]:
    """Merge ordered sources into one ordered stream of every version."""
    if not sources:
        return iter(())
    if len(sources) == 1:
        return sources[0]
    if reverse:
        return heapq.merge(*sources, key=_rev, reverse=True)
    return heapq.merge(*sources, key=_fwd)


def visible(entries: Iterable[Entry], read_seq: int) -> Iterator[tuple[bytes, bytes]]:
    """The user's view at ``read_seq``: newest visible version per key, no tombstones."""
    last = None
    for key, seq, value in entries:
        if seq > read_seq or key == last:
            continue
        last = key
        if value is not None:
            yield key, value


def retain(
    entries: Iterable[Entry], snapshot_seqs: list[int], watermark: int | None = None
) -> Iterator[Entry]:
    """Drop versions no reader can see.

    A version is visible to reads at seqs in ``[its seq, the next newer
    version's seq)``. Keep the newest version of each key, and an older one
    only if that interval holds a snapshot in ``snapshot_seqs`` (ascending)
    or reaches above the retention ``watermark`` (every read at or above the
    watermark must stay exact; None means no watermark). Tombstones are kept
    (older versions may sit in older files)::

        versions of k:   seq 9        seq 6        seq 2
        snapshots:              s=7                       s=1
        kept:            9 (newest)   6 (s=7 sees it)     2 dropped (no s in [2, 6))
        with watermark 4:                                 2 kept ([2, 6) reaches 4..5)
    """
    last = None
    newer_seq = 0
    for entry in entries:
        key, seq, _ = entry
        if key != last:
            last = key
            newer_seq = seq
            yield entry
            continue
        if watermark is not None and newer_seq > watermark:
            yield entry
        else:
            # keep if a snapshot s exists with seq <= s < newer_seq
            i = bisect_left(snapshot_seqs, seq)
            if i < len(snapshot_seqs) and snapshot_seqs[i] < newer_seq:
                yield entry
        newer_seq = seq


def merge_batches(sources: list[Iterator[Entry]], batch: int = 8192) -> Iterator[list[Entry]]:
    """Forward merge in batches: each yielded list is ordered and holds whole key groups.

    ``sources`` must be in recency order (newest first) and each forward
    ordered. Every round buffers up to ``batch`` entries per source, takes
    from each buffer the entries below the smallest *last buffered key*
    (nothing below it can still arrive from any source), concatenates them
    newest source first and sorts by user key with Python's stable sort. The
    stable sort keeps a newer source's versions before an older one's, and
    each source's own seq-descending order: exactly the internal order. The
    sort runs in C and exploits the pre-sorted runs, which makes compaction
    several times faster than a heap merge with a Python key function.
    """
    first = itemgetter(0)
    iters = [iter(s) for s in sources]
    bufs: list[list[Entry]] = [list(islice(it, batch)) for it in iters]
    done = [len(b) < batch for b in bufs]
    while True:
        live = [i for i, b in enumerate(bufs) if b]
        if not live:
            return
        open_ends = [bufs[i][-1][0] for i in live if not done[i]]
        if not open_ends:  # every source is fully buffered
            out = [e for i in live for e in bufs[i]]
            out.sort(key=first)
            yield out
            return
        bound = min(open_ends)
        out = []
        for i in live:
            b = bufs[i]
            cut = bisect_left(b, bound, key=first)
            if cut:
                out.extend(b[:cut])
                del b[:cut]
        if out:
            out.sort(key=first)
            yield out
        for i in live:  # refill: a buffer holding only `bound` must grow to pass it
            b = bufs[i]
            if not done[i] and (len(b) < batch // 2 or b[0][0] == bound):
                more = list(islice(iters[i], batch))
                done[i] = len(more) < batch
                b.extend(more)


def merge_columns(
    sources: Sequence[Iterator[BlockColumns]], batch: int = 8192
) -> Iterator[Columns]:
    """:func:`merge_batches` on columns: no tuple is made per entry.

    Each source yields its blocks as ``(keys, seqs, values)`` (forward, in
    recency order, newest source first). Every round takes, from each
    source's buffered columns, the entries below the smallest last buffered
    key, and orders their concatenation (newest source first) by a stable
    sort of *positions* by key; ``itemgetter`` then gathers the three columns
    in that order, all in C. Yields whole key groups in internal order.
    """
    iters = [iter(s) for s in sources]
    count = len(iters)
    bufs: list[tuple[list[bytes], list[int], list[bytes | None]]] = [([], [], []) for _ in iters]
    done = [False] * count

    def fill(i: int, want: int) -> None:
        keys, seqs, values = bufs[i]
        while len(keys) < want:
            block = next(iters[i], None)
            if block is None:
                done[i] = True
                return
            keys.extend(block[0])
            seqs.extend(block[1])
            values.extend(block[2])

    for i in range(count):
        fill(i, batch)
    while True:
        live = [i for i in range(count) if bufs[i][0]]
        if not live:
            return
        open_ends = [bufs[i][0][-1] for i in live if not done[i]]
        bound = min(open_ends) if open_ends else None
        parts: list[tuple[list[bytes], list[int], list[bytes | None]]] = []
        for i in live:
            keys, seqs, values = bufs[i]
            cut = len(keys) if bound is None else bisect_left(keys, bound)
            if cut:
                parts.append((keys[:cut], seqs[:cut], values[:cut]))
                del keys[:cut], seqs[:cut], values[:cut]
        if parts:
            yield _merge_parts(parts)
        if bound is None:
            return
        for i in live:  # refill: a buffer holding only `bound` must grow to pass it
            keys = bufs[i][0]
            if not done[i] and (len(keys) < batch // 2 or keys[0] == bound):
                fill(i, len(keys) + batch)


def _merge_parts(parts: list[tuple[list[bytes], list[int], list[bytes | None]]]) -> Columns:
    joined = Columns.concat(parts)  # newest source first
    if len(parts) == 1:
        return joined
    keys, seqs, values = joined
    gather = itemgetter(*sorted(range(len(keys)), key=keys.__getitem__))  # stable
    return Columns(list(gather(keys)), list(gather(seqs)), list(gather(values)))


def retain_batch(
    entries: list[Entry], snapshot_seqs: list[int], watermark: int | None = None
) -> list[Entry]:
    """:func:`retain` over a list of whole key groups (fast path without snapshots)."""
    if snapshot_seqs or watermark is not None:
        return list(retain(entries, snapshot_seqs, watermark))
    keys = [e[0] for e in entries]
    return [e for e, dup in zip(entries, map(eq, keys, [None, *keys[:-1]])) if not dup]


def visible_slices(
    slices: Iterable[tuple[list[bytes], tuple[int, ...], list[bytes | None]]], read_seq: int
) -> Iterator[tuple[bytes, bytes]]:
    """:func:`visible` for ONE ordered source given as per-block column slices.

    A block whose versions are all at or below ``read_seq``, with no tombstone
    and one version per key (the usual state of compacted data), is emitted
    with ``zip`` in C; any other block goes entry by entry. ``last`` carries
    the current key across blocks, since a key's versions may span two.
    """
    last: bytes | None = None
    for keys, seqs, values in slices:
        if (
            keys[0] != last
            and max(seqs) <= read_seq
            and None not in values
            and not any(map(eq, keys, keys[1:]))
        ):
            yield from zip(keys, values)  # type: ignore[misc,unused-ignore]
            last = keys[-1]
            continue
        for key, seq, value in zip(keys, seqs, values):
            if seq > read_seq or key == last:
                continue
            last = key
            if value is not None:
                yield key, value
