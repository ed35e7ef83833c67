"""A byte-bounded cache of decoded SST blocks, shared by all SSTs of a DB.

Eviction is *second chance* (CLOCK): a hit only sets a reference flag, so
lookups take no lock; inserts evict from the oldest end under a lock, giving
referenced entries one more round. Close to LRU, much cheaper in Python.

The entries live in an :class:`~collections.OrderedDict`: its
``popitem(last=False)`` is O(1), where ``next(iter(d))`` on a plain dict
that keeps losing its oldest entries walks over their freed slots (that
walk once cost more than the block reads it served).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class BlockCache:
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self._items: OrderedDict[Any, list[Any]] = OrderedDict()  # key -> [value, charge, ref]
        self._lock = threading.Lock()
        self.used = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: Any) -> Any:
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            return None
        item[2] = True
        self.hits += 1
        return item[0]

    def put(self, key: Any, value: Any, charge: int) -> None:
        if charge > self.capacity:
            return
        with self._lock:
            items = self._items
            old = items.pop(key, None)
            if old is not None:
                self.used -= old[1]
            items[key] = [value, charge, False]
            self.used += charge
            while self.used > self.capacity and items:
                oldest, item = items.popitem(last=False)
                if item[2] and oldest != key:
                    item[2] = False
                    items[oldest] = item  # second chance: back to the young end
                else:
                    self.used -= item[1]

    def __len__(self) -> int:
        return len(self._items)
