"""Argument checks shared by every public call: typed errors that name the argument."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from kvstore.entries import MAX_KEY_LEN

_BYTES_LIKE = (bytes, bytearray, memoryview)
_BYTES = {bytes}


def key(value: Any, name: str = "key") -> bytes:
    if type(value) is not bytes:
        if not isinstance(value, _BYTES_LIKE):
            raise TypeError(f"{name} must be bytes, not {type(value).__name__}")
        value = bytes(value)
    if not value:
        raise ValueError(f"{name} must not be empty")
    if len(value) > MAX_KEY_LEN:
        raise ValueError(f"{name} is {len(value)} bytes; the limit is {MAX_KEY_LEN}")
    return cast(bytes, value)


def value(v: Any, name: str = "value") -> bytes:
    if type(v) is bytes:
        return v
    if not isinstance(v, _BYTES_LIKE):
        raise TypeError(f"{name} must be bytes, not {type(v).__name__}")
    return bytes(v)


def bound(v: Any, name: str) -> bytes | None:
    if v is None:
        return None
    if not isinstance(v, _BYTES_LIKE):
        raise TypeError(f"{name} must be bytes or None, not {type(v).__name__}")
    return bytes(v)


def flag(v: Any, name: str) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"{name} must be a bool, not {type(v).__name__}")
    return v


def prefix_end(prefix: bytes) -> bytes | None:
    """Smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


def fresh_pairs(pairs: Sequence[Any], existing: Mapping[bytes, Any]) -> dict[bytes, bytes] | None:
    """``pairs`` as a dict when every pair is a valid plain-``bytes`` key and value
    and the keys are distinct and not in ``existing`` (checked in a few C-level
    passes: ``put_many``'s fast path); None otherwise, and the caller puts the
    pairs one at a time, whose checks name any problem."""
    try:
        new = dict(pairs)
    except (TypeError, ValueError):  # a malformed pair
        return None
    if len(new) != len(pairs) or (existing and not existing.keys().isdisjoint(new)):
        return None
    if new and not (
        set(map(type, new)) == _BYTES
        and set(map(type, new.values())) == _BYTES
        and min(map(len, new)) > 0
        and max(map(len, new)) <= MAX_KEY_LEN
    ):
        return None
    return new
