"""kvstore: an embedded LSM key-value store in the style of SlateDB.

>>> import kvstore
>>> with kvstore.open("memory://doc") as db:
...     seq = db.put(b"k", b"v")
...     db.get(b"k")
b'v'

See ``README.md`` and ``docs/`` for the design, the formats and the numbers.
"""

from __future__ import annotations

import os
from typing import Any

from kvstore.batch import WriteBatch
from kvstore.clock import Clock
from kvstore.db import DB
from kvstore.errors import (
    CheckpointNotFound,
    ClosedError,
    CorruptionError,
    FencedError,
    KvError,
    SnapshotTooOld,
    TransactionConflict,
    TransactionExpired,
    WriterActive,
)
from kvstore.objstore import LocalStore, ObjectStore, open_store
from kvstore.options import Options
from kvstore.reader import Reader, ReadOnlyError
from kvstore.snapshot import Snapshot
from kvstore.txn import Isolation, Transaction

__all__ = [
    "DB",
    "CheckpointNotFound",
    "Clock",
    "ClosedError",
    "CorruptionError",
    "FencedError",
    "Isolation",
    "KvError",
    "Options",
    "ReadOnlyError",
    "Reader",
    "Snapshot",
    "SnapshotTooOld",
    "Transaction",
    "TransactionConflict",
    "TransactionExpired",
    "WriteBatch",
    "WriterActive",
    "open",
    "open_reader",
]

__version__ = "0.1.0"


def open(
    url: str | os.PathLike[str] | ObjectStore, *, clock: Clock | None = None, **options: Any
) -> DB:
    """Open (creating if missing) the store at ``url`` as its single writer.

    ``url`` is a local directory, ``file:///abs/dir``, ``memory://name``,
    ``s3://bucket/prefix`` (pass ``storage_options=`` for s3fs) or an
    :class:`~kvstore.objstore.ObjectStore`.

    One writer per store. On a local directory, opening while a live process
    or another open handle writes the store raises :class:`WriterActive`
    naming it, unless ``takeover=True``, which fences that writer; a crashed
    writer holds nothing. On object stores opening always fences the
    previous writer. A fenced handle's writes raise :class:`FencedError` and
    its reads show only what it made durable.
    Options are those of :class:`Options`; unknown names raise TypeError.
    ``clock``: a :class:`kvstore.clock.Clock` for wall time, monotonic time,
    sleeps and random bits (a :class:`~kvstore.clock.FakeClock` in tests).
    """
    opts = Options.from_kwargs(options)
    store = open_store(url, opts.storage_options)
    if not opts.fsync and isinstance(store, LocalStore):
        store.fsync = False
    return DB(store, opts, clock=clock)


def open_reader(
    url: str | os.PathLike[str] | ObjectStore,
    *,
    refresh_interval: float | None = None,
    storage_options: dict[str, Any] | None = None,
    block_cache_bytes: int = 64 << 20,
    wal_dir: str | os.PathLike[str] | None = None,
    checkpoint: str | None = None,
    clock: Clock | None = None,
) -> Reader:
    """A read-only view of what the writer has made durable.

    Call :meth:`Reader.refresh` to see newer writes, or pass
    ``refresh_interval`` (seconds) to refresh automatically on reads. A
    location without a store (a missing or empty directory, no manifest)
    raises FileNotFoundError: a reader never creates a store. The WAL is read
    where the manifest records its writer keeps it (the store, or the
    writer's ``wal_dir``); ``wal_dir`` here must name that same location, and
    a WAL that cannot be found raises ValueError (unless its writer closed
    cleanly). A reader never takes the writer lock and never fences the
    writer. With ``checkpoint=name`` the view is that checkpoint
    (static; :class:`CheckpointNotFound`, a ``KeyError``, if it does not
    exist). ``clock`` (a :class:`kvstore.clock.Clock`) times ``refresh_interval``
    and the retries of a refresh; tests pass a ``FakeClock``.
    """
    store = open_store(url, storage_options, create=False)
    wal_store = LocalStore(wal_dir, create=False) if wal_dir is not None else None
    return Reader(
        store,
        wal_store=wal_store,
        checkpoint=checkpoint,
        block_cache_bytes=block_cache_bytes,
        refresh_interval=refresh_interval,
        clock=clock,
    )
