"""Bloom filter over user keys (mmh3, double hashing).

Layout::

    k:u8  nbits:u32  bits: ceil(nbits/8) bytes (bit i is byte i>>3, mask 1<<(i&7))

Probe positions are ``(h1 + i*h2) mod nbits`` for ``i in range(k)``, where
``h1, h2`` are the two halves of ``mmh3.hash64(key, signed=False)``. With 10
bits per key and k=7 the false-positive rate is about 0.8 %.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import mmh3

_HEAD = struct.Struct("<BI")


def optimal_k(bits_per_key: int) -> int:
    return max(1, min(30, round(bits_per_key * 0.69)))


def build(keys: Iterable[bytes], count: int, bits_per_key: int) -> bytes:
    nbits = max(64, count * bits_per_key)
    k = optimal_k(bits_per_key)
    bits = bytearray((nbits + 7) // 8)
    hash64 = mmh3.hash64
    for key in keys:
        h1, h2 = hash64(key, signed=False)
        for i in range(k):
            pos = (h1 + i * h2) % nbits
            bits[pos >> 3] |= 1 << (pos & 7)
    return _HEAD.pack(k, nbits) + bytes(bits)


class BloomFilter:
    __slots__ = ("_bits", "_k", "_nbits")

    def __init__(self, data: bytes) -> None:
        if len(data) < _HEAD.size:
            raise ValueError("bloom filter too short")
        self._k, self._nbits = _HEAD.unpack_from(data, 0)
        self._bits = data[_HEAD.size :]
        if self._k == 0 or self._nbits == 0 or len(self._bits) != (self._nbits + 7) // 8:
            raise ValueError("bloom filter header does not match its size")

    def may_contain(self, key: bytes) -> bool:
        h1, h2 = mmh3.hash64(key, signed=False)
        bits = self._bits
        nbits = self._nbits
        for i in range(self._k):
            pos = (h1 + i * h2) % nbits
            if not bits[pos >> 3] & (1 << (pos & 7)):
                return False
        return True

    @property
    def size_bytes(self) -> int:
        return len(self._bits) + _HEAD.size
