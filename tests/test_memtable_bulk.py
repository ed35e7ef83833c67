"""The memtable's bulk path (a batch of mostly new keys) equals the per-key path."""

from __future__ import annotations

import random

from kvstore.memtable import Memtable


def _apply_per_key(m: Memtable, seq: int, keys: list[bytes], values: list[bytes | None]) -> None:
    for i in range(0, len(keys), 8):  # batches of at most 8 keys take the per-key path
        m.apply(seq, keys[i : i + 8], values[i : i + 8])


def test_bulk_path_equals_per_key_path() -> None:
    rng = random.Random(7)
    bulk, slow = Memtable(0), Memtable(0)
    universe = [b"k%04d" % i for i in range(400)]
    for seq in range(1, 200):
        n = rng.choice([3, 9, 40, 120])
        keys = rng.sample(universe, n)
        values = [None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 20)) for _ in keys]
        bulk.apply(seq, keys, values)
        _apply_per_key(slow, seq, keys, values)
        assert bulk.size == slow.size and bulk.entries == slow.entries
    assert bulk._versions == slow._versions
    assert sorted(bulk._unsorted) == sorted(slow._unsorted)
    for k in universe:
        for seq in (0, 50, 199, 10**9):
            assert bulk.value(k, seq) == slow.value(k, seq)
