"""SstReader: random access to one SST (layout in :mod:`kvstore.format.sst`).

Opening a reader reads the footer and the meta blocks, and checks them
before trusting any offset::

    footer    magic, crc32c, format_version; bloom, index and props tile the
              bytes from bloom_off up to the footer exactly
    bloom     a stored block (kvstore/format/block.py) holding a valid filter
    index     n >= 1 rows that add up to the block; no data block past bloom_off
    props     lengths add up; gives count, tombstones, seq range, key range

Any failure is :class:`~kvstore.errors.CorruptionError` naming the SST. Data
blocks are read on demand through ``read(offset, length)``; each is checked
(its crc32c, its layout, and its first entry against the index row) before
use, and a decoded block can be kept in a shared block cache under
``(cache_id, block index)``. ``cache_id`` comes from a process-wide counter,
never ``id(reader)``, which a dead reader's successor could reuse.

With the C accelerator (:mod:`kvstore._accel`) and a ``view`` of the whole
file (a local file's mapping), point reads and scans check and search the
uncompressed blocks in place, in C, without copying or caching them; the
pure-Python path (:class:`~kvstore.format.block.PyBlock`, no view) gives the
same results and the same errors.
"""

from __future__ import annotations

import itertools
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from itertools import accumulate
from operator import neg
from typing import Any, Protocol, cast

from crc32c import crc32c

from kvstore._accel import speedups as _c
from kvstore.entries import Entry
from kvstore.errors import CorruptionError
from kvstore.format import bloom as bloom_format
from kvstore.format.block import Block, CBlock, PyBlock, open_block
from kvstore.format.sst import FOOTER, FOOTER_SIZE, FORMAT_VERSION, MAGIC

_reader_ids = itertools.count(1)

ReadFn = Callable[[int, int], bytes]


class BlockCacheLike(Protocol):
    def get(self, key: Any) -> Any: ...

    def put(self, key: Any, value: Any, charge: int) -> None: ...


class SstReader:
    """Random access to one SST through ``read(offset, length)``.

    ``block_cache`` (optional) is any object with ``get(key)`` and
    ``put(key, block, charge)``; decoded blocks are cached under
    ``(cache_id, block_index)``.
    """

    @staticmethod
    def uses_view() -> bool:
        """Whether a ``view`` (the whole file in memory) is used: only with the C
        accelerator, so callers need not map files that would not be read."""
        return _c is not None

    def __init__(
        self,
        read: ReadFn,
        size: int,
        *,
        name: str,
        block_cache: BlockCacheLike | None = None,
        view: memoryview | None = None,
    ) -> None:
        self.name = name
        self._read = read
        self._cache = block_cache
        # the whole file in memory (a local file's mapping): point reads then
        # check and search uncompressed blocks in place, in C, without copying
        # or caching them (the OS page cache holds them, as for sqlite and LMDB)
        self._view = view if self.uses_view() and view is not None and len(view) == size else None
        self._bloom_data: bytes | None = None
        if size < FOOTER_SIZE:
            raise CorruptionError("file shorter than an SST footer", object_name=name)
        footer = read(size - FOOTER_SIZE, FOOTER_SIZE)
        if len(footer) != FOOTER_SIZE:
            raise CorruptionError("SST footer truncated", object_name=name)
        fields = FOOTER.unpack(footer)
        (
            bloom_off,
            bloom_len,
            index_off,
            index_len,
            props_off,
            props_len,
            version,
            _flags,
            crc,
            magic,
        ) = fields
        if magic != MAGIC:
            raise CorruptionError("bad SST magic", object_name=name)
        if crc32c(footer[: FOOTER_SIZE - 12]) != crc:
            raise CorruptionError("SST footer checksum mismatch", object_name=name)
        if version != FORMAT_VERSION:
            raise CorruptionError(f"unsupported SST format version {version}", object_name=name)
        body_end = size - FOOTER_SIZE
        if not (
            bloom_off + bloom_len == index_off
            and index_off + index_len == props_off
            and props_off + props_len == body_end
        ):
            raise CorruptionError("SST footer offsets are inconsistent", object_name=name)
        meta = read(bloom_off, body_end - bloom_off)
        self.bloom: bloom_format.BloomFilter | None = None
        if bloom_len:
            try:
                self.bloom = bloom_format.BloomFilter(open_block(meta[:bloom_len], where=name))
            except ValueError as exc:
                raise CorruptionError(f"bad bloom filter: {exc}", object_name=name) from None
        if self.bloom is not None:
            self._bloom_data = self.bloom.data
        index = open_block(meta[bloom_len : bloom_len + index_len], where=name)
        props = open_block(meta[bloom_len + index_len :], where=name)
        try:
            (n,) = struct.unpack_from("<I", index, 0)
            pos = 4
            self._offsets = struct.unpack_from(f"<{n}Q", index, pos)
            pos += 8 * n
            self._sizes = struct.unpack_from(f"<{n}I", index, pos)
            pos += 4 * n
            first_seqs = struct.unpack_from(f"<{n}Q", index, pos)
            pos += 8 * n
            klens = struct.unpack_from(f"<{n}H", index, pos)
            pos += 2 * n
            koff = list(accumulate(klens, initial=pos))
            self.count, self.tombstones, self.min_seq, self.max_seq = struct.unpack_from(
                "<QQQQ", props, 0
            )
            (fl,) = struct.unpack_from("<H", props, 32)
            self.first_key = props[34 : 34 + fl]
            (ll,) = struct.unpack_from("<H", props, 34 + fl)
            self.last_key = props[36 + fl : 36 + fl + ll]
        except struct.error as exc:
            raise CorruptionError(
                f"malformed SST index or props: {exc}", object_name=name
            ) from None
        if koff[-1] != len(index) or n == 0 or 36 + fl + ll != len(props):
            raise CorruptionError("SST index or props lengths do not add up", object_name=name)
        if any(o + s > bloom_off for o, s in zip(self._offsets, self._sizes)):
            raise CorruptionError("SST index points past the data", object_name=name)
        first_keys = [index[a:b] for a, b in zip(koff, koff[1:])]
        # Internal order as sortable tuples: (key, -seq).
        self._first_keys = first_keys
        self._first_seqs = first_seqs
        self.num_blocks = n
        # never id(self): a freed reader's id is reused, and the cache would then
        # serve a dead SST's blocks for a new one
        self.cache_id = next(_reader_ids)

    # -- blocks -----------------------------------------------------------
    def block(self, i: int, *, fill_cache: bool = True) -> PyBlock | CBlock:
        cache = self._cache
        ck = (self.cache_id, i)
        if cache is not None:
            hit = cache.get(ck)
            if hit is not None:
                return cast("PyBlock | CBlock", hit)
        return self._load_block(i, fill_cache=fill_cache)

    def _load_block(self, i: int, *, fill_cache: bool = True) -> PyBlock | CBlock:
        cache = self._cache
        ck = (self.cache_id, i)
        stored = self._read(self._offsets[i], self._sizes[i])
        where = f"{self.name} block {i}"
        if len(stored) != self._sizes[i]:
            raise CorruptionError("data block truncated", object_name=where)
        blk = Block(open_block(stored, where=where), where=where)
        if blk.first_seq != self._first_seqs[i] or blk.first_key != self._first_keys[i]:
            raise CorruptionError("data block does not match the index", object_name=where)
        if cache is not None and fill_cache:
            cache.put(ck, blk, blk.charge)
        return blk

    def _seek_block(self, key: bytes) -> int:
        """A block at or before the first entry of ``key`` (the following blocks are read on)."""
        # Block i-1 holds keys in [first_keys[i-1], first_keys[i]]; when first_keys[i]
        # equals key, its newest versions may still end block i-1.
        return max(0, bisect_left(self._first_keys, key) - 1)

    # -- lookups ------------------------------------------------------------
    def may_contain(self, key: bytes) -> bool:
        if key < self.first_key or key > self.last_key:
            return False
        return self.bloom is None or self.bloom.may_contain(key)

    def get(self, key: bytes, read_seq: int) -> Entry | None:
        """Newest version of ``key`` with seq <= read_seq, or None."""
        if key < self.first_key or key > self.last_key:
            return None
        fk = self._first_keys
        b = bisect_left(fk, key) - 1
        if b < 0:
            b = 0
        elif b + 2 < len(fk) and fk[b + 2] == key:
            # the key's versions fill whole blocks: pick the block by seq
            # (first seqs descend among blocks starting with this key)
            hi = bisect_right(fk, key, b + 1)
            b = max(b, bisect_left(self._first_seqs, -read_seq, b + 1, hi, key=neg) - 1)
        if self._view is not None:
            # the bloom probe in C directly (this is the hottest read path)
            if self._bloom_data is not None and not _c.bloom_may_contain(  # type: ignore[union-attr]
                self._bloom_data, key
            ):
                return None
            return self._get_in_view(key, read_seq, b)
        # A cached block answers as cheaply as the bloom filter; consult the
        # filter only when it can save a block read.
        cache = self._cache
        blk = cache.get((self.cache_id, b)) if cache is not None else None
        if blk is None:
            if self.bloom is not None and not self.bloom.may_contain(key):
                return None
            blk = self._load_block(b)
        while True:
            done, entry = blk.find(key, read_seq)
            if done:
                return entry
            b += 1
            if b >= self.num_blocks:
                return None
            blk = self.block(b)

    def _get_in_view(self, key: bytes, read_seq: int, b: int) -> Entry | None:
        """:meth:`get` on the mapped file from block ``b`` on (the bloom filter has
        passed): every block visited is checked (crc32c, bounds, agreement with
        the index) and searched in C; compressed blocks go through the cache."""
        assert _c is not None
        view, offsets, sizes, fks, fss = (
            self._view,
            self._offsets,
            self._sizes,
            self._first_keys,
            self._first_seqs,
        )
        while True:
            try:
                found = _c.stored_find(view, offsets[b], sizes[b], fks[b], fss[b], key, read_seq)
            except ValueError as exc:
                raise CorruptionError(str(exc), object_name=f"{self.name} block {b}") from None
            if found is True:  # compressed: decompress once, keep it in the cache
                done, entry = self.block(b).find(key, read_seq)
                if done:
                    return entry
            elif found is None:
                return None
            elif found is not False:
                return key, found[0], found[1]
            b += 1
            if b >= self.num_blocks:
                return None

    def iter_forward(
        self, start: bytes | None, end: bytes | None, *, fill_cache: bool = True
    ) -> Iterator[Entry]:
        """Entries with start <= key < end in internal order. ``fill_cache=False``
        (compaction) reads without evicting the blocks that serve user reads."""
        b = 0 if start is None else self._seek_block(start)
        for bi in range(b, self.num_blocks):
            if fill_cache:
                keys, seqs, values = self._columns(bi)
            else:  # compaction: pread, so its pass over whole files does not map them
                blk = self.block(bi, fill_cache=False)
                keys, seqs, values = blk.keys, blk.seqs, blk.values
            i = 0 if start is None else bisect_left(keys, start)
            if end is None:
                j = len(keys)
                yield from zip(keys[i:j], seqs[i:j], values[i:j])
            else:
                j = bisect_left(keys, end, i)
                yield from zip(keys[i:j], seqs[i:j], values[i:j])
                if j < len(keys):
                    return
            start = None

    def _columns(self, i: int) -> tuple[list[bytes], tuple[int, ...], list[bytes | None]]:
        """Block ``i`` decoded as ``(keys, seqs, values)`` for a scan.

        From the cache if it is there; otherwise, with a mapped file, checked
        and decoded in C straight from the mapping and *not* cached (a scan
        would only evict the blocks that serve point reads).
        """
        cache = self._cache
        blk = cache.get((self.cache_id, i)) if cache is not None else None
        if blk is None and self._view is not None:
            assert _c is not None
            try:
                cols = _c.stored_decode(
                    self._view,
                    self._offsets[i],
                    self._sizes[i],
                    self._first_keys[i],
                    self._first_seqs[i],
                )
            except ValueError as exc:
                raise CorruptionError(str(exc), object_name=f"{self.name} block {i}") from None
            if cols is not True:
                return cast("tuple[list[bytes], tuple[int, ...], list[bytes | None]]", cols)
        if blk is None:
            blk = self._load_block(i)
        return blk.keys, blk.seqs, blk.values

    def iter_block_columns(
        self,
    ) -> Iterator[tuple[list[bytes], tuple[int, ...], list[bytes | None]]]:
        """Every block as ``(keys, seqs, values)``, forward, read without filling
        the cache (compaction: a pass over whole files must not evict user reads)."""
        for bi in range(self.num_blocks):
            blk = self.block(bi, fill_cache=False)
            yield blk.keys, blk.seqs, blk.values

    def iter_block_slices(
        self, start: bytes | None, end: bytes | None
    ) -> Iterator[tuple[list[bytes], tuple[int, ...], list[bytes | None]]]:
        """Forward ``(keys, seqs, values)`` slices, one per block, within [start, end)."""
        b = 0 if start is None else self._seek_block(start)
        for bi in range(b, self.num_blocks):
            keys, seqs, values = self._columns(bi)
            i = 0 if start is None else bisect_left(keys, start)
            j = len(keys) if end is None else bisect_left(keys, end, i)
            if i == 0 and j == len(keys):
                yield keys, seqs, values
            elif i < j:
                yield keys[i:j], seqs[i:j], values[i:j]
            if j < len(keys):
                return
            start = None

    def iter_reverse(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        """Entries with start <= key < end, key descending, seq descending per key."""
        b = self.num_blocks - 1 if end is None else self._seek_block(end)
        group: list[Entry] = []
        for bi in range(b, -1, -1):
            keys, seqs, values = self._columns(bi)
            j = len(keys) if end is None else bisect_left(keys, end)
            i = 0 if start is None else bisect_left(keys, start, 0, j)
            for x in range(j - 1, i - 1, -1):
                k = keys[x]
                if group and group[0][0] != k:
                    yield from reversed(group)
                    group = []
                group.append((k, seqs[x], values[x]))
            if i > 0:
                break
        if group:
            yield from reversed(group)
