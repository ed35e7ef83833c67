"""The sorted in-memory table that receives every write.

Layout: a dict ``key -> (seq, value)`` for a key with one version, or
``key -> [(seq, value), ...]`` (commit order, newest last) once it has
several, plus a sorted index of the distinct keys. Plain tuples of ints and
bytes are untracked by CPython's cyclic GC, so a large memtable of mostly
single-version keys adds almost nothing to collection pauses. Point reads
(:meth:`Memtable.value`) are one dict lookup. The sorted index is maintained
lazily: new keys go to an unsorted list, and the first scan after some writes
merges them into a :class:`SortedList`; a flush that finds no scan happened
sorts the keys once (Timsort, in C). A write-heavy load therefore never pays
for a sorted insert.

Writers apply under the database's commit lock, so versions of a key are
appended in increasing seq order. Readers take no lock for point reads; range
iterators re-seek in chunks under the memtable's own small lock, which keeps
them correct while writers insert new keys concurrently (a SortedList may not
be iterated while it is modified).

Memory accounting (:attr:`size`) charges each version its key and value
bytes plus a fixed Python overhead, so ``memtable_bytes`` bounds real memory.
"""

from __future__ import annotations

import enum
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import repeat
from operator import itemgetter

from sortedcontainers import SortedList

from kvstore.entries import Columns, Entry

ENTRY_OVERHEAD = 270  # dict slot, version list, tuple, int and bytes headers
VERSION_OVERHEAD = 150
_CHUNK = 256

Version = tuple[int, "bytes | None"]


_seq_of = itemgetter(0)


class Absent(enum.Enum):
    """The type of :data:`ABSENT`."""

    ABSENT = "absent"


#: :meth:`Memtable.value` found no version (None would be a tombstone)
ABSENT = Absent.ABSENT


def _newest_first(vs: Version | list[Version]) -> list[Version] | tuple[Version]:
    return (vs,) if type(vs) is tuple else vs[::-1]  # type: ignore[return-value]


def _retained(
    key: bytes, vs: list[Version], snapshot_seqs: list[int], watermark: int | None
) -> list[Entry]:
    """:func:`kvstore.iterators.retain` of one key's versions (``vs`` ascending by seq),
    newest first, without visiting every version.

    Version ``i`` is visible to reads in ``[seq_i, seq_i+1)``. Besides the
    newest, it is kept when that interval reaches above ``watermark``
    (``seq_i+1 > watermark``: every ``i`` from the first version above the
    watermark, minus one) or holds a snapshot (for each snapshot ``s`` in
    ``[seq_0, seq_newest)``, the newest version at or below ``s``). So a key
    rewritten many times costs O(log versions) per snapshot, not O(versions).
    """
    newest = len(vs) - 1
    kept: set[int] = set()
    if watermark is not None:
        kept.update(range(max(bisect_right(vs, watermark, key=_seq_of) - 1, 0), newest))
    if snapshot_seqs:
        lo = bisect_left(snapshot_seqs, vs[0][0])
        hi = bisect_left(snapshot_seqs, vs[newest][0], lo)
        for s in snapshot_seqs[lo:hi]:
            kept.add(bisect_right(vs, s, key=_seq_of) - 1)
    seq, value = vs[newest]
    if not kept:
        return [(key, seq, value)]
    return [(key, seq, value), *((key, *vs[i]) for i in sorted(kept, reverse=True))]


class Memtable:
    def __init__(self, wal_start: int) -> None:
        self._versions: dict[bytes, Version | list[Version]] = {}
        self._keys = SortedList()
        self._unsorted: list[bytes] = []  # new keys not yet in _keys
        self._lock = threading.Lock()
        self.wal_start = wal_start  # first WAL segment/object id holding its writes
        self.size = 0
        self.min_seq = 0
        self.max_seq = 0
        self.entries = 0

    def __len__(self) -> int:
        return len(self._versions)

    def apply(self, seq: int, keys: list[bytes], values: list[bytes | None]) -> int:
        """Add one write (keys unique within it). Caller holds the commit lock.

        Returns the key and value bytes written (without the overhead charged to
        :attr:`size`).
        """
        versions = self._versions
        old = versions.keys() & keys if len(keys) > 8 else None
        if old is not None and len(old) * 8 <= len(keys):
            # bulk path: a batch of keys mostly new to this memtable (a commit's few
            # rewritten keys, such as a head pointer, go on their version lists first, so
            # a concurrent read at an older seq never finds one without its older versions)
            if old:
                fresh = dict(zip(keys, zip(repeat(seq), values)))
                for k in old:
                    latest = fresh.pop(k)
                    prior = versions[k]
                    if type(prior) is tuple:
                        versions[k] = [prior, latest]
                    else:
                        prior.append(latest)  # type: ignore[union-attr]
                versions.update(fresh)
                new_keys = list(fresh)
            else:
                versions.update(zip(keys, zip(repeat(seq), values)))
                new_keys = keys
            written = sum(map(len, keys)) + sum(map(len, filter(None, values)))
            added = (
                written
                + ENTRY_OVERHEAD * len(new_keys)
                + sum(VERSION_OVERHEAD - len(k) for k in old)
            )
        else:
            new_keys = []
            written = added = 0
            for key, value in zip(keys, values):
                n = len(key) if value is None else len(key) + len(value)
                written += n
                existing = versions.get(key)
                if existing is None:
                    versions[key] = (seq, value)
                    new_keys.append(key)
                    added += n + ENTRY_OVERHEAD
                elif type(existing) is tuple:
                    versions[key] = [existing, (seq, value)]
                    added += n - len(key) + VERSION_OVERHEAD
                else:
                    existing.append((seq, value))  # type: ignore[union-attr]
                    added += n - len(key) + VERSION_OVERHEAD
        if new_keys:
            with self._lock:
                self._unsorted.extend(new_keys)
        self.size += added
        self.entries += len(keys)
        if not self.min_seq:
            self.min_seq = seq
        self.max_seq = seq
        return written

    def value(self, key: bytes, read_seq: int) -> bytes | Absent | None:
        """The value of ``key`` as of ``read_seq`` (None: a tombstone), or
        :data:`ABSENT` when no version of it at or below ``read_seq`` is here."""
        vs = self._versions.get(key)
        if vs is None:
            return ABSENT
        if isinstance(vs, tuple):
            return vs[1] if vs[0] <= read_seq else ABSENT
        newest = vs[-1]
        if newest[0] <= read_seq:  # the common case: a read at or after the last write
            return newest[1]
        # versions ascend by seq: binary search, so an old read costs log(versions)
        i = bisect_right(vs, read_seq, key=_seq_of) - 1
        return vs[i][1] if i >= 0 else ABSENT

    def _index(self) -> SortedList:
        """The sorted key index, brought up to date. Caller holds ``_lock``."""
        if self._unsorted:
            self._keys.update(self._unsorted)
            self._unsorted = []
        return self._keys

    def iter_forward(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        versions = self._versions
        cur = start
        inclusive = True
        while True:
            with self._lock:
                keys = self._index()
                if cur is None:
                    i = 0
                else:
                    i = keys.bisect_left(cur) if inclusive else keys.bisect_right(cur)
                chunk = list(keys.islice(i, i + _CHUNK))
            if not chunk:
                return
            for key in chunk:
                if end is not None and key >= end:
                    return
                for seq, value in _newest_first(versions[key]):
                    yield (key, seq, value)
            cur = chunk[-1]
            inclusive = False

    def iter_reverse(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        versions = self._versions
        cur = end
        while True:
            with self._lock:
                keys = self._index()
                j = len(keys) if cur is None else keys.bisect_left(cur)
                chunk = list(keys.islice(max(0, j - _CHUNK), j))
            if not chunk:
                return
            for key in reversed(chunk):
                if start is not None and key < start:
                    return
                for seq, value in _newest_first(versions[key]):
                    yield (key, seq, value)
            cur = chunk[0]

    def flush_entries(
        self, snapshot_seqs: list[int], watermark: int | None = None
    ) -> list[Entry] | Columns:
        """The entries to write to an SST, in internal order (key asc, seq desc).

        Keeps the newest version of each key and the older versions some
        snapshot in ``snapshot_seqs`` reads (see :func:`kvstore.iterators.retain`).
        Only for a frozen memtable (no concurrent writers).
        """
        with self._lock:
            keys = list(self._keys) if not self._unsorted else sorted(self._versions)
        versions = self._versions
        if self.entries == len(versions):  # one version per key: the common case
            only = [versions[k] for k in keys]
            return Columns(keys, [v[0] for v in only], [v[1] for v in only])  # type: ignore[misc]
        out: list[Entry] = []
        append = out.append
        for key in keys:
            vs = versions[key]
            if type(vs) is tuple:
                append((key, *vs))
            else:
                out.extend(_retained(key, vs, snapshot_seqs, watermark))  # type: ignore[arg-type]
        return out

    def _check(self) -> None:
        """Assert the invariants (tests call this after random operations)."""
        with self._lock:
            assert list(self._index()) == sorted(self._versions), "key index out of sync"
        for key, vs in self._versions.items():
            seqs = [s for s, _ in _newest_first(vs)][::-1]
            assert seqs == sorted(set(seqs)), f"versions of {key!r} out of order"
