"""``wal.id``: the identity of a WAL location.

Each WAL location (the store itself, or a ``wal_dir``) holds one small object
``wal.id`` beside ``wal/``, naming the store the WAL belongs to and the
location itself::

    wal.id := UTF-8 JSON object  {"store": <store id>, "wal": <location id>}

    written by json.dumps: keys in that order, ", " and ": " separators,
    e.g. b'{"store": "5f0c2a9e1b7d4c36", "wal": "9a41d03c7e5b2f18"}'
    store  the store's id (the manifest's ``store_id``)
    wal    16 hex digits, random, chosen when a writer first uses the location;
           the manifest records it as ``wal_id``

A writer creates it with ``put_if_absent`` (writers opening at the same time
agree on one) and replaces it whole when it takes over a location left by
another store; nothing edits it in place. It has no magic, version or
checksum of its own: it is a few bytes written in one call, and a damaged one
is refused rather than guessed at.

Decoding (:func:`decode_wal_identity`) is lenient in what JSON it accepts and
strict about the rest, as it always was:

* any JSON object with the keys ``store`` and ``wal`` is accepted; other keys
  are ignored, and the two values are read as strings (``str(value)``);
* anything else (not JSON, not UTF-8/16/32, not an object, a key missing,
  nesting too deep to parse) raises :class:`~kvstore.errors.CorruptionError`.

A location without ``wal.id`` is not an error: :func:`read_wal_identity`
returns None (a new location, or an old store from before the file existed).
docs/format/wal.md has the format; docs/s3.md the rules a writer applies at open.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from kvstore.errors import CorruptionError
from kvstore.paths import WAL_IDENTITY

if TYPE_CHECKING:
    from kvstore.objstore.base import ObjectStore


def encode_wal_identity(store_id: str, wal_id: str) -> bytes:
    """The bytes of a ``wal.id`` naming store ``store_id`` and location ``wal_id``."""
    return json.dumps({"store": store_id, "wal": wal_id}).encode()


def decode_wal_identity(data: bytes, *, where: str = WAL_IDENTITY) -> dict[str, str]:
    """``{"store": ..., "wal": ...}`` from the bytes of a ``wal.id``.

    Raises :class:`~kvstore.errors.CorruptionError` (naming ``where``) when
    they are not a JSON object with both keys.
    """
    try:
        ident = json.loads(data)
        return {"store": str(ident["store"]), "wal": str(ident["wal"])}
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise CorruptionError(f"unreadable: {exc}", object_name=where) from None


def read_wal_identity(store: ObjectStore) -> dict[str, str] | None:
    """The ``wal.id`` of a WAL location: ``{"store": ..., "wal": ...}``, or None."""
    try:
        data = store.get(WAL_IDENTITY)
    except FileNotFoundError:
        return None
    return decode_wal_identity(data)
