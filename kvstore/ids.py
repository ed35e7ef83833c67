"""Unique, time-ordered ids for SST names (ULIDs), from an injectable clock and RNG."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Protocol


class _Bits(Protocol):
    def getrandbits(self, k: int, /) -> int: ...


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class IdGenerator:
    def __init__(
        self,
        seed: int | None = None,
        clock: Callable[[], float] = time.time,
        rng: _Bits | None = None,
    ) -> None:
        """``seed`` seeds the ids; else ``rng`` (a seeded Clock reproduces them) draws
        them, else the system's randomness."""
        self._rng: _Bits = (
            random.Random(seed)
            if seed is not None
            else rng
            if rng is not None
            else random.SystemRandom()
        )
        self._clock = clock
        self._lock = threading.Lock()

    def ulid(self) -> str:
        with self._lock:
            ms = int(self._clock() * 1000) & ((1 << 48) - 1)
            value = (ms << 80) | self._rng.getrandbits(80)
        chars = []
        for _ in range(26):
            chars.append(_CROCKFORD[value & 31])
            value >>= 5
        return "".join(reversed(chars))
