"""A byte-bounded LRU cache of decoded SST blocks, shared by all SSTs of a DB."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class BlockCache:
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.used = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: Any) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: Any, value: Any, charge: int) -> None:
        if charge > self.capacity:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.used -= old[1]
            self._items[key] = (value, charge)
            self.used += charge
            while self.used > self.capacity and self._items:
                _, (_, c) = self._items.popitem(last=False)
                self.used -= c

    def __len__(self) -> int:
        return len(self._items)
