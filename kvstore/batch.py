"""WriteBatch: several puts and deletes applied atomically under one seq."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from kvstore import _validate
from kvstore.entries import MAX_KEY_LEN


class WriteBatch:
    """Collects puts and deletes; ``db.write(batch)`` applies them all or none.

    A later operation on the same key replaces an earlier one in the batch.
    """

    __slots__ = ("_ops",)

    def __init__(self) -> None:
        self._ops: dict[bytes, bytes | None] = {}

    def put(self, key: bytes, value: bytes) -> WriteBatch:
        if type(key) is not bytes or not key or len(key) > MAX_KEY_LEN:
            key = _validate.key(key)
        if type(value) is not bytes:
            value = _validate.value(value)
        ops = self._ops
        if key in ops:
            del ops[key]  # the latest operation on a key goes last
        ops[key] = value
        return self

    def put_many(self, items: Iterable[tuple[bytes, bytes]]) -> WriteBatch:
        """:meth:`put` for every ``(key, value)`` pair, in order (same checks, same errors).

        New keys given as plain ``bytes`` are checked and added in a few C-level
        passes; anything else (repeated keys, bytes-like objects, bad input)
        goes through :meth:`put` one pair at a time.
        """
        pairs = items if isinstance(items, (list, tuple)) else list(items)
        new = _validate.fresh_pairs(pairs, self._ops)
        if new is not None:
            self._ops.update(new)
            return self
        for item in pairs:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise TypeError(f"put_many takes (key, value) pairs, not {item!r:.40}")
            self.put(*item)
        return self

    def delete(self, key: bytes) -> WriteBatch:
        k = _validate.key(key)
        self._ops.pop(k, None)
        self._ops[k] = None
        return self

    def clear(self) -> None:
        self._ops.clear()

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[tuple[bytes, bytes | None]]:
        return iter(self._ops.items())

    def __repr__(self) -> str:
        return f"WriteBatch({len(self._ops)} ops)"

    def columns(self) -> tuple[list[bytes], list[bytes | None]]:
        """The operations as ``(keys, values)`` lists in batch order (None: a delete)."""
        return list(self._ops.keys()), list(self._ops.values())
