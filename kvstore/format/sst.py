"""Sorted string tables: immutable files of internal entries.

An internal entry is ``(key, seq, value)``; ``value is None`` is a tombstone.
Entries are sorted by key ascending, then seq descending (newest first), so
the first entry at or after ``(key, read_seq)`` is the version a read at
``read_seq`` sees.

File layout (all integers little-endian)::

    +----------------+----------------+-----+-------+-------+-------+--------+
    | data block 0   | data block 1   | ... | bloom | index | props | footer |
    +----------------+----------------+-----+-------+-------+-------+--------+

Every block (data, bloom, index, props) is stored as::

    body  compression:u8  crc32c(body + compression byte):u32
    compression 0 = none, 1 = zstd (used only when it saves at least 12.5 %)

Data block, decompressed (columnar, so decoding is a few ``struct`` calls)::

    n:u32
    shared:    n x u16   bytes shared with the previous key (0 at restarts)
    suffix:    n x u16   length of the rest of the key
    vlen:      n x u32   value length; 0xFFFFFFFF marks a tombstone
    seq:       n x u64
    suffixes, then values, concatenated
    r:u32  restarts: r x u32   entry indexes where shared == 0 (every 16th)

Index block: ``n:u32, offsets n x u64, sizes n x u32, first_seqs n x u64,
first_key_lens n x u16, first keys``: one row per data block.
Bloom block: see :mod:`kvstore.format.bloom` (absent when bits_per_key is 0).
Props block: ``count:u64 tombstones:u64 min_seq:u64 max_seq:u64
first_len:u16 first_key last_len:u16 last_key``.

Footer (52 bytes)::

    bloom_off:u64 bloom_len:u32 index_off:u64 index_len:u32 props_off:u64
    props_len:u32 format_version:u16 flags:u16 crc32c(previous 40 bytes):u32
    magic "KVSST\\x00\\x00\\x01"
"""

from __future__ import annotations

import itertools
import struct
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, compress, repeat
from operator import add, eq, le, lt, ne, neg
from typing import Any, NamedTuple, Protocol

import zstandard
from crc32c import crc32c

from kvstore._accel import speedups as _c
from kvstore.errors import CorruptionError
from kvstore.format import bloom as bloom_format

MAGIC = b"KVSST\x00\x00\x01"
FORMAT_VERSION = 1
FOOTER = struct.Struct("<QIQIQIHHI8s")
FOOTER_SIZE = FOOTER.size
TRAILER = struct.Struct("<BI")
TOMBSTONE_LEN = 0xFFFFFFFF
RESTART_INTERVAL = 16
MAX_KEY_LEN = 0xFFFF
MAX_BLOCK_BYTES = 1 << 31  # a block holds at least one entry, and values are < 4 GiB
COMPRESS_NONE = 0
COMPRESS_ZSTD = 1
COMPRESS_PROBES = 8
COMPRESS_SAMPLE = 16
_U32 = struct.Struct("<I")

Entry = tuple[bytes, int, "bytes | None"]

_tls = threading.local()
_reader_ids = itertools.count(1)


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_tls, "zd", None)
    if d is None:
        d = _tls.zd = zstandard.ZstdDecompressor()
    return d


# ---------------------------------------------------------------------------
# blocks
# ---------------------------------------------------------------------------


def seal_block(body: bytes, compressor: zstandard.ZstdCompressor | None) -> bytes:
    kind = COMPRESS_NONE
    if compressor is not None and len(body) > 64:
        packed = compressor.compress(body)
        # as RocksDB does: keep compression only when it saves at least 12.5 %,
        # otherwise every read pays for decompression to save almost nothing
        if len(packed) <= len(body) - (len(body) >> 3):
            body, kind = packed, COMPRESS_ZSTD
    head = body + bytes((kind,))
    return head + struct.pack("<I", crc32c(head))


def open_block(stored: bytes, *, where: str) -> bytes:
    """Verify a stored block's checksum and return its decompressed body."""
    if len(stored) < TRAILER.size:
        raise CorruptionError("block shorter than its trailer", object_name=where)
    kind, crc = TRAILER.unpack_from(stored, len(stored) - TRAILER.size)
    if crc32c(memoryview(stored)[: len(stored) - 4]) != crc:
        raise CorruptionError("block checksum mismatch", object_name=where)
    body = stored[: len(stored) - TRAILER.size]
    if kind == COMPRESS_NONE:
        return body
    if kind == COMPRESS_ZSTD:
        try:
            size = zstandard.frame_content_size(body)
            if size < 0 or size > MAX_BLOCK_BYTES:
                raise CorruptionError(
                    f"compressed block claims {size} bytes (limit {MAX_BLOCK_BYTES})",
                    object_name=where,
                )
            return _decompressor().decompress(body)
        except (zstandard.ZstdError, MemoryError) as exc:
            raise CorruptionError(f"block does not decompress: {exc}", object_name=where) from None
    raise CorruptionError(f"unknown block compression {kind}", object_name=where)


def common_prefix_len(a: bytes, b: bytes) -> int:
    m = min(len(a), len(b))
    x = int.from_bytes(a[:m], "big") ^ int.from_bytes(b[:m], "big")
    return m - (x.bit_length() + 7) // 8


def encode_data_block(entries: list[Entry]) -> bytes:
    """Encode one block from internal entries (see :func:`encode_block_columns`)."""
    return encode_block_columns(
        [e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries]
    )


def encode_block_columns(keys: list[bytes], seqs: list[int], values: list[bytes | None]) -> bytes:
    """Encode one block. Within a restart interval every entry but the first
    shares the prefix common to the whole interval (sorted keys make it a
    prefix of each neighbour too), computed once per interval."""
    if _c is not None:
        return _c.block_encode(keys, seqs, values)
    return encode_block_columns_py(keys, seqs, values)


def encode_block_columns_py(
    keys: list[bytes], seqs: list[int], values: list[bytes | None]
) -> bytes:
    """The pure-Python :func:`encode_block_columns` (the C one must match it byte for byte)."""
    n = len(keys)
    shared: list[int] = []
    suffixes: list[bytes] = []
    restarts = list(range(0, n, RESTART_INTERVAL))
    for r in restarts:
        group = keys[r : r + RESTART_INTERVAL]
        p = common_prefix_len(group[0], group[-1])
        shared.append(0)
        suffixes.append(group[0])
        if len(group) > 1:
            shared.extend([p] * (len(group) - 1))
            suffixes.extend([k[p:] for k in group[1:]])
    if None in values:
        vlens = [TOMBSTONE_LEN if v is None else len(v) for v in values]
        vbytes = b"".join([v for v in values if v is not None])
    else:
        vlens = [len(v) for v in values]  # type: ignore[arg-type]
        vbytes = b"".join(values)  # type: ignore[arg-type]
    return b"".join(
        (
            struct.pack(f"<I{n}H{n}H{n}I{n}Q", n, *shared, *map(len, suffixes), *vlens, *seqs),
            b"".join(suffixes),
            vbytes,
            struct.pack(f"<I{len(restarts)}I", len(restarts), *restarts),
        )
    )


class PyBlock:
    """A verified, decompressed data block, decoded lazily (pure Python).

    The first point lookup in a block binary-searches its restart keys and
    decodes one restart interval (at most 16 entries); the second access, or
    any scan, decodes the whole block into parallel lists (``keys``, ``seqs``,
    ``values``) so that later lookups are a C-level ``bisect``.
    """

    __slots__ = (
        "_keys",
        "_rkeys",
        "_values",
        "body",
        "charge",
        "first_seq",
        "n",
        "restarts",
        "seqs",
        "shared",
        "soff",
        "touched",
        "vlens",
        "voff",
        "where",
    )

    def __init__(self, body: bytes, *, where: str) -> None:
        self.body = body
        self.where = where
        try:
            (n,) = _U32.unpack_from(body, 0)
            head = struct.unpack_from(f"<{n}H{n}H{n}I{n}Q", body, 4)
            self.shared = head[:n]
            suf = head[n : 2 * n]
            self.vlens = vlens = head[2 * n : 3 * n]
            self.seqs: tuple[int, ...] = head[3 * n :]
            self.soff = list(accumulate(suf, initial=4 + 16 * n))
            real = (
                [0 if v == TOMBSTONE_LEN else v for v in vlens] if TOMBSTONE_LEN in vlens else vlens
            )
            self.voff = list(accumulate(real, initial=self.soff[-1]))
            rpos = self.voff[-1]
            (r,) = _U32.unpack_from(body, rpos)
            self.restarts = struct.unpack_from(f"<{r}I", body, rpos + 4)
        except (struct.error, MemoryError, OverflowError) as exc:
            raise CorruptionError(f"malformed data block: {exc}", object_name=where) from None
        if rpos + 4 + 4 * r != len(body) or n == 0:
            raise CorruptionError("data block lengths do not add up", object_name=where)
        restarts = self.restarts
        if (
            restarts[:1] != (0,)
            or any(i >= n or self.shared[i] for i in restarts)
            or not all(map(lt, restarts, restarts[1:]))
        ):
            raise CorruptionError("data block restart points are invalid", object_name=where)
        self.n = n
        self.first_seq = self.seqs[0]
        self.touched = False
        self._keys: list[bytes] | None = None
        self._values: list[bytes | None] | None = None
        self._rkeys: list[bytes] | None = None
        self.charge = len(body) + 40 * n

    @property
    def first_key(self) -> bytes:
        return self.body[self.soff[0] : self.soff[1]]

    # -- full decode ------------------------------------------------------
    @property
    def keys(self) -> list[bytes]:
        keys = self._keys
        if keys is None:
            keys = self._keys = self._decode_keys()
            self.charge = len(self.body) + 100 * self.n
        return keys

    @property
    def values(self) -> list[bytes | None]:
        values = self._values
        if values is None:
            body = self.body
            voff = self.voff
            if TOMBSTONE_LEN in self.vlens:
                values = [
                    None if vl == TOMBSTONE_LEN else body[a:b]
                    for vl, a, b in zip(self.vlens, voff, voff[1:])
                ]
            else:
                values = [body[a:b] for a, b in zip(voff, voff[1:])]
            self._values = values
        return values

    def _decode_keys(self) -> list[bytes]:
        body, shared, soff = self.body, self.shared, self.soff
        if any(shared):
            fast = self._decode_interval_keys()
            if fast is not None:
                return self._checked(fast)
            keys: list[bytes] = []
            append = keys.append
            prev = b""
            for s, a, b in zip(shared, soff, soff[1:]):
                if s > len(prev):
                    raise CorruptionError(
                        "data block key prefix out of range", object_name=self.where
                    )
                prev = prev[:s] + body[a:b]
                append(prev)
        else:
            keys = [body[a:b] for a, b in zip(soff, soff[1:])]
        return self._checked(keys)

    def _decode_interval_keys(self) -> list[bytes] | None:
        """Fast path for blocks whose restart intervals each share one prefix length.

        That is how :func:`encode_block_columns` writes them; each interval is
        then one list comprehension. Returns None for other layouts.
        """
        body, shared, soff, n = self.body, self.shared, self.soff, self.n
        bounds = [*self.restarts, n]
        keys: list[bytes] = []
        for r, nxt in zip(bounds, bounds[1:]):
            first = body[soff[r] : soff[r + 1]]
            keys.append(first)
            if nxt - r > 1:
                p = shared[r + 1]
                if shared[r + 1 : nxt].count(p) != nxt - r - 1 or p > len(first):
                    return None
                prefix = first[:p]
                keys.extend(
                    [prefix + body[a:b] for a, b in zip(soff[r + 1 : nxt], soff[r + 2 : nxt + 1])]
                )
        return keys

    def _checked(self, keys: list[bytes]) -> list[bytes]:
        if not all(map(le, keys, keys[1:])):
            raise CorruptionError("data block entries out of order", object_name=self.where)
        same = list(map(eq, keys, keys[1:]))
        if any(same):
            seqs = self.seqs
            if any(seqs[i] <= seqs[i + 1] for i in compress(range(len(same)), same)):
                raise CorruptionError(
                    "data block versions of a key out of order", object_name=self.where
                )
        return keys

    def value(self, i: int) -> bytes | None:
        if self._values is not None:
            return self._values[i]
        if self.vlens[i] == TOMBSTONE_LEN:
            return None
        return self.body[self.voff[i] : self.voff[i + 1]]

    # -- point lookup ---------------------------------------------------------
    def find(self, key: bytes, read_seq: int) -> tuple[bool, Entry | None]:
        """``(done, entry)``: the newest version of key with seq <= read_seq.

        ``done`` is False when the block ended before the search could decide
        (the key's versions may continue in the next block).
        """
        if self._keys is None and not self.touched:
            self.touched = True
            return self._find_partial(key, read_seq)
        keys = self.keys
        seqs = self.seqs
        i = bisect_left(keys, key)
        n = self.n
        if i < n and keys[i] == key and seqs[i] > read_seq:
            # skip newer versions by binary search (seqs descend within a key)
            j = bisect_right(keys, key, i)
            i = bisect_left(seqs, -read_seq, i, j, key=neg)
            if i < j:
                return True, (key, seqs[i], self.value(i))
            return j < n, None
        if i < n and keys[i] == key:
            return True, (key, seqs[i], self.value(i))
        return i < n, None

    def _find_partial(self, key: bytes, read_seq: int) -> tuple[bool, Entry | None]:
        body, shared, soff, seqs, restarts = (
            self.body,
            self.shared,
            self.soff,
            self.seqs,
            self.restarts,
        )
        rkeys = self._rkeys
        if rkeys is None:
            rkeys = self._rkeys = [body[soff[r] : soff[r + 1]] for r in restarts]
        j = bisect_left(rkeys, key) - 1
        i = restarts[j] if j > 0 else 0
        n = self.n
        prev = body[soff[i] : soff[i + 1]]
        last_seq = -1
        while True:
            if prev >= key:
                if prev != key:
                    return True, None
                if last_seq >= 0 and seqs[i] >= last_seq:
                    raise CorruptionError(
                        "data block versions of a key out of order", object_name=self.where
                    )
                if seqs[i] <= read_seq:
                    return True, (key, seqs[i], self.value(i))
                last_seq = seqs[i]
            i += 1
            if i >= n:
                return False, None
            s = shared[i]
            if s > len(prev):
                raise CorruptionError("data block key prefix out of range", object_name=self.where)
            prev = prev[:s] + body[soff[i] : soff[i + 1]]


class CBlock:
    """A verified, decompressed data block, searched and decoded in C.

    Construction checks the layout (lengths, restart points); a point lookup
    binary-searches the restart keys and scans one interval of the raw bytes
    without decoding the block; ``keys``/``seqs``/``values`` decode the whole
    block on first use (scans). Same results and errors as :class:`PyBlock`.
    """

    __slots__ = (
        "_keys",
        "_seqs",
        "_values",
        "body",
        "charge",
        "first_key",
        "first_seq",
        "n",
        "where",
    )

    def __init__(self, body: bytes, *, where: str) -> None:
        assert _c is not None
        self.body = body
        self.where = where
        try:
            self.n, self.first_key, self.first_seq = _c.block_layout(body)
        except ValueError as exc:
            raise CorruptionError(str(exc), object_name=where) from None
        self._keys: list[bytes] | None = None
        self._seqs: tuple[int, ...] = ()
        self._values: list[bytes | None] = []
        self.charge = len(body) + 200

    def _decode(self) -> list[bytes]:
        assert _c is not None
        try:
            keys, self._seqs, self._values = _c.block_decode(self.body)
        except ValueError as exc:
            raise CorruptionError(str(exc), object_name=self.where) from None
        self._keys = keys
        return keys

    @property
    def keys(self) -> list[bytes]:
        keys = self._keys
        return keys if keys is not None else self._decode()

    @property
    def seqs(self) -> tuple[int, ...]:
        if self._keys is None:
            self._decode()
        return self._seqs

    @property
    def values(self) -> list[bytes | None]:
        if self._keys is None:
            self._decode()
        return self._values

    def find(self, key: bytes, read_seq: int) -> tuple[bool, Entry | None]:
        """``(done, entry)``, as :meth:`PyBlock.find`."""
        assert _c is not None
        try:
            found = _c.block_find(self.body, key, read_seq)
        except ValueError as exc:
            raise CorruptionError(str(exc), object_name=self.where) from None
        if found is None:
            return True, None
        if found is False:
            return False, None
        return True, (key, found[0], found[1])


#: the block class in use: :class:`CBlock` when the C accelerator is built
Block: type[PyBlock] | type[CBlock] = CBlock if _c is not None else PyBlock


def decode_data_block(body: bytes, *, where: str) -> PyBlock | CBlock:
    """Verify the layout of a data block and decode it completely."""
    blk = Block(body, where=where)
    _ = blk.keys, blk.values
    return blk


# ---------------------------------------------------------------------------
# builder
# ---------------------------------------------------------------------------


class Columns(NamedTuple):
    """Internal entries in order as three parallel lists (no tuple per entry,
    so nothing for the cyclic GC to track while a large SST is built)."""

    keys: list[bytes]
    seqs: list[int]
    values: list[bytes | None]

    @classmethod
    def concat(cls, parts: Sequence[tuple[list[bytes], list[int], list[bytes | None]]]) -> Columns:
        """The parts' columns one after another (the only part itself when alone)."""
        if len(parts) == 1:
            return cls(*parts[0])
        return cls(
            [k for p in parts for k in p[0]],
            [s for p in parts for s in p[1]],
            [v for p in parts for v in p[2]],
        )


@dataclass(frozen=True, slots=True)
class SstSummary:
    """What the manifest records about an SST."""

    count: int
    tombstones: int
    min_seq: int
    max_seq: int
    first_key: bytes
    last_key: bytes
    size: int


def build_sst(
    entries: Iterable[Entry] | Columns,
    *,
    block_bytes: int = 4096,
    bloom_bits_per_key: int = 10,
    compression: str = "zstd",
    compression_level: int = 1,
) -> tuple[bytes, SstSummary]:
    """Encode sorted internal entries as an SST; returns the bytes and a summary.

    Works on whole columns (keys, seqs, values) so the per-entry work is a
    handful of C-level passes rather than a Python loop.
    """
    if isinstance(entries, Columns):
        keys, seqs, values = entries
        if not (len(keys) == len(seqs) == len(values)):
            raise ValueError("SST columns differ in length")
    else:
        ents = entries if isinstance(entries, list) else list(entries)
        keys = [e[0] for e in ents]
        seqs = [e[1] for e in ents]
        values = [e[2] for e in ents]
    if not keys:
        raise ValueError("an SST needs at least one entry")
    n = len(keys)
    if _c is not None:  # the checks and the summary below, in one C pass
        tombstones, min_seq, max_seq, versions = _c.sst_stats(keys, seqs, values)
    else:
        if max(map(len, keys)) > MAX_KEY_LEN:
            raise ValueError(f"a key exceeds {MAX_KEY_LEN} bytes")
        if not all(map(le, keys, keys[1:])):
            raise ValueError("SST entries must be sorted by key asc, seq desc")
        same = list(map(eq, keys, keys[1:]))
        versions = any(same)
        if versions and any(seqs[i] <= seqs[i + 1] for i in compress(range(n - 1), same)):
            raise ValueError("SST entries must be sorted by key asc, seq desc")
        tombstones = values.count(None)
        min_seq, max_seq = min(seqs), max(seqs)

    compressor = (
        zstandard.ZstdCompressor(level=compression_level) if compression == "zstd" else None
    )
    blocks, starts = (
        _c.build_blocks(keys, seqs, values, block_bytes)
        if _c is not None
        else _build_blocks_py(keys, seqs, values, block_bytes)
    )
    if compressor is not None:
        # Data that did not compress in COMPRESS_PROBES blocks in a row (random
        # values, already-compressed payloads) is tried again only every
        # COMPRESS_SAMPLE-th block; one block that compresses resumes every block.
        misses = 0
        for i, sealed in enumerate(blocks):
            if misses < COMPRESS_PROBES or misses % COMPRESS_SAMPLE == 0:
                packed = seal_block(sealed[: -TRAILER.size], compressor)
                if packed[-TRAILER.size] == COMPRESS_ZSTD:
                    blocks[i] = packed
                    misses = 0
                    continue
            misses += 1
    block_sizes = list(map(len, blocks))
    offsets = list(accumulate(block_sizes, initial=0))
    offset = offsets.pop()
    first_keys = [keys[i] for i in starts]
    first_seqs = [seqs[i] for i in starts]
    out = blocks

    bloom_off = offset
    bloom_stored = b""
    if bloom_bits_per_key > 0:
        distinct = keys if not versions else list(compress(keys, map(ne, keys, [None, *keys])))
        bloom_stored = seal_block(
            bloom_format.build(distinct, len(distinct), bloom_bits_per_key), None
        )
    out.append(bloom_stored)
    offset += len(bloom_stored)

    nb = len(offsets)
    index_body = b"".join(
        (
            struct.pack(
                f"<I{nb}Q{nb}I{nb}Q{nb}H",
                nb,
                *offsets,
                *block_sizes,
                *first_seqs,
                *map(len, first_keys),
            ),
            b"".join(first_keys),
        )
    )
    index_off = offset
    index_stored = seal_block(index_body, compressor)
    out.append(index_stored)
    offset += len(index_stored)

    first_key, last_key = keys[0], keys[-1]
    props_body = struct.pack("<QQQQ", n, tombstones, min_seq, max_seq) + b"".join(
        (struct.pack("<H", len(first_key)), first_key, struct.pack("<H", len(last_key)), last_key)
    )
    props_off = offset
    props_stored = seal_block(props_body, None)
    out.append(props_stored)
    offset += len(props_stored)

    head = FOOTER.pack(
        bloom_off,
        len(bloom_stored),
        index_off,
        len(index_stored),
        props_off,
        len(props_stored),
        FORMAT_VERSION,
        0,
        0,
        MAGIC,
    )[: FOOTER_SIZE - 12]
    out.append(head + struct.pack("<I", crc32c(head)) + MAGIC)
    data = b"".join(out)
    summary = SstSummary(n, tombstones, min_seq, max_seq, first_key, last_key, len(data))
    return data, summary


def _build_blocks_py(
    keys: list[bytes], seqs: list[int], values: list[bytes | None], block_bytes: int
) -> tuple[list[bytes], list[int]]:
    """The pure-Python ``_speedups.build_blocks``: sealed uncompressed blocks and
    the index of each block's first entry. A block ends with the entry that
    brings it to ``block_bytes`` (each entry counts 16 + key + value bytes)."""
    vlens = map(len, values) if None not in values else (len(v or b"") for v in values)  # type: ignore[arg-type]
    cum = list(accumulate(map(add, map(add, map(len, keys), vlens), repeat(16))))
    n = len(keys)
    blocks: list[bytes] = []
    starts: list[int] = []
    start = 0
    while start < n:
        base = cum[start - 1] if start else 0
        end = min(bisect_left(cum, base + block_bytes, start) + 1, n)
        body = encode_block_columns_py(keys[start:end], seqs[start:end], values[start:end])
        blocks.append(seal_block(body, None))
        starts.append(start)
        start = end
    return blocks, starts


# ---------------------------------------------------------------------------
# reader
# ---------------------------------------------------------------------------

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
                return hit
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
                return cols
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
