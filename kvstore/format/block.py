"""SST blocks: the stored block envelope and the data block codec.

Every block of an SST (data, bloom, index, props; the file layout is in
:mod:`kvstore.format.sst`) is stored as its body and a 5-byte trailer::

    stored  := body  compression:u8  crc:u32                   (LE)
               compression 0 = none, 1 = zstd
               crc = crc32c(body + compression byte)

:func:`seal_block` writes it, compressing with zstd only when that saves at
least 12.5 % (as RocksDB does: otherwise every read pays for decompression
to save almost nothing); :func:`open_block` checks the crc, decompresses,
and refuses a zstd frame that claims more than ``MAX_BLOCK_BYTES``.

Data block body, decompressed. Columnar, so that encoding and decoding are a
few ``struct`` calls (or one C call) rather than a Python loop per entry::

    n:u32                                                      n >= 1
    shared:    n x u16   bytes shared with the previous key (0 at restarts)
    suffix:    n x u16   length of the rest of the key
    vlen:      n x u32   value length; 0xFFFFFFFF (TOMBSTONE_LEN) marks a tombstone
    seq:       n x u64
    suffixes, then values, concatenated
    r:u32  restarts: r x u32   entry indexes where shared == 0 (every 16th)

Entries are internal entries (:mod:`kvstore.entries`) in internal order. The
encoder (:func:`encode_block_columns`) gives every entry of a restart interval
after the first the prefix common to the whole interval; the decoder accepts
any ``shared[i] <= len(key[i-1])``.

Two decoders, same results and same errors (:class:`~kvstore.errors.CorruptionError`
on a malformed block): :class:`CBlock` searches and decodes in C
(:mod:`kvstore._speedups`), :class:`PyBlock` is the pure-Python reference.
:data:`Block` is the one in use: ``CBlock`` unless the accelerator is missing
or ``KVSTORE_PURE_PYTHON=1`` (see :mod:`kvstore._accel`). docs/format/sst.md
lists every check and when it runs.
"""

from __future__ import annotations

import struct
import threading
from bisect import bisect_left, bisect_right
from itertools import accumulate, compress
from operator import eq, le, lt, neg
from typing import cast

import zstandard
from crc32c import crc32c

from kvstore._accel import speedups as _c
from kvstore.entries import Entry
from kvstore.errors import CorruptionError

TRAILER = struct.Struct("<BI")
TOMBSTONE_LEN = 0xFFFFFFFF
RESTART_INTERVAL = 16
MAX_BLOCK_BYTES = 1 << 31  # a block holds at least one entry, and values are < 4 GiB
COMPRESS_NONE = 0
COMPRESS_ZSTD = 1
_U32 = struct.Struct("<I")

_tls = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_tls, "zd", None)
    if d is None:
        d = _tls.zd = zstandard.ZstdDecompressor()
    return d


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
        return cast(bytes, _c.block_encode(keys, seqs, values))
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
        return cast(list[bytes], keys)

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
