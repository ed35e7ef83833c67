"""WriteBatch: several puts and deletes applied atomically under one seq."""

from __future__ import annotations

from collections.abc import Iterator

from kvstore import _validate


class WriteBatch:
    """Collects puts and deletes; ``db.write(batch)`` applies them all or none.

    A later operation on the same key replaces an earlier one in the batch.
    """

    __slots__ = ("_ops",)

    def __init__(self) -> None:
        self._ops: dict[bytes, bytes | None] = {}

    def put(self, key: bytes, value: bytes) -> WriteBatch:
        k = _validate.key(key)
        v = _validate.value(value)
        self._ops.pop(k, None)
        self._ops[k] = v
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

    def _columns(self) -> tuple[list[bytes], list[bytes | None]]:
        return list(self._ops.keys()), list(self._ops.values())
