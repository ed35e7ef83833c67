"""Blocked bloom filter over user keys (mmh3), one 512-bit block per probe.

Layout::

    k:u8  nblocks:u32  blocks: nblocks x 64 bytes (each a little-endian 512-bit int)

For a key, ``h1, h2 = mmh3.hash64(key, signed=False)``; the key lives in block
``h1 mod nblocks`` and sets the bits ``(h2 >> 9*i) & 511`` for ``i < k``
(k <= 7, so the k 9-bit positions fit in 64 bits). All of a key's bits share
one block, so a probe touches one machine word group and, in Python, is one
``&`` of two ints. With 10 bits per key and k = 7 the false-positive rate is
about 1 % (slightly above the 0.8 % of an unblocked filter).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import cast

import mmh3

from kvstore._accel import speedups as _c

_HEAD = struct.Struct("<BI")
BLOCK_BITS = 512
BLOCK_BYTES = BLOCK_BITS // 8
MAX_K = 7


def optimal_k(bits_per_key: int) -> int:
    return max(1, min(MAX_K, round(bits_per_key * 0.69)))


def _mask(h2: int, k: int) -> int:
    mask = 0
    for i in range(k):
        mask |= 1 << ((h2 >> (9 * i)) & 511)
    return mask


def _mask7(h2: int) -> int:
    return (
        (1 << (h2 & 511))
        | (1 << ((h2 >> 9) & 511))
        | (1 << ((h2 >> 18) & 511))
        | (1 << ((h2 >> 27) & 511))
        | (1 << ((h2 >> 36) & 511))
        | (1 << ((h2 >> 45) & 511))
        | (1 << ((h2 >> 54) & 511))
    )


def build(keys: Iterable[bytes], count: int, bits_per_key: int) -> bytes:
    k = optimal_k(bits_per_key)
    nblocks = max(1, -(-count * bits_per_key // BLOCK_BITS))
    if _c is not None:
        return cast(
            bytes, _c.bloom_build(keys if isinstance(keys, list) else list(keys), nblocks, k)
        )
    return _build_py(keys, nblocks, k)


def _build_py(keys: Iterable[bytes], nblocks: int, k: int) -> bytes:
    masks = [0] * nblocks
    hash64 = mmh3.hash64
    for key in keys:
        h1, h2 = hash64(key, signed=False)
        masks[h1 % nblocks] |= _mask7(h2) if k == 7 else _mask(h2, k)
    return _HEAD.pack(k, nblocks) + b"".join(m.to_bytes(BLOCK_BYTES, "little") for m in masks)


class BloomFilter:
    __slots__ = ("_blocks", "_data", "_k", "_n", "size_bytes")

    def __init__(self, data: bytes) -> None:
        if len(data) < _HEAD.size:
            raise ValueError("bloom filter too short")
        self._k, self._n = cast("tuple[int, int]", _HEAD.unpack_from(data, 0))
        if (
            not 1 <= self._k <= MAX_K
            or self._n == 0
            or len(data) != _HEAD.size + self._n * BLOCK_BYTES
        ):
            raise ValueError("bloom filter header does not match its size")
        self._data = bytes(data)
        self.size_bytes = len(data)
        self._blocks: list[int] = []
        if _c is not None:
            return
        base = _HEAD.size
        self._blocks = [
            int.from_bytes(data[base + i * BLOCK_BYTES : base + (i + 1) * BLOCK_BYTES], "little")
            for i in range(self._n)
        ]

    @property
    def data(self) -> bytes:
        """The filter's bytes (header included), as stored."""
        return self._data

    def may_contain(self, key: bytes) -> bool:
        if _c is not None:
            return cast(bool, _c.bloom_may_contain(self._data, key))
        h1, h2 = mmh3.hash64(key, signed=False)
        mask = _mask7(h2) if self._k == 7 else _mask(h2, self._k)
        return self._blocks[h1 % self._n] & mask == mask
