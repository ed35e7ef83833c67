"""Public errors of :mod:`kvstore`.

Few and coarse, each telling the caller what to do:

==========================  ==================================================
``TransactionConflict``     retry the transaction on fresh data
``FencedError``             another writer owns the store; stop writing
``WriterActive``            a live writer holds the store; wait, read with
                            ``open_reader``, or open with ``takeover=True``
``ClosedError``             the handle was closed; open a new one
``CorruptionError``         stored bytes failed a checksum or a format check;
                            the data is damaged, do not retry blindly
``SnapshotTooOld``          the requested sequence number is no longer retained
``TransactionExpired``      the transaction outlived its time-to-live; retry
``CheckpointNotFound``      no checkpoint has that name (also a ``KeyError``)
==========================  ==================================================

Wrong argument types raise :class:`TypeError`, invalid values
:class:`ValueError`, missing objects :class:`FileNotFoundError`: Python's own
exceptions where they fit.
"""

from __future__ import annotations

from datetime import datetime


class KvError(Exception):
    """Base class of every kvstore error."""


class TransactionConflict(KvError):
    """A concurrent commit conflicts with this transaction; retry it."""


class FencedError(KvError):
    """A newer writer has opened the store; this handle may no longer write."""


class WriterActive(KvError):
    """A live process or handle writes this store (local directories only).

    The message names it; ``pid``, ``host`` and ``opened_at`` (a timezone-aware
    ``datetime``, or None when unknown) say the same as attributes. Read the
    store with ``kvstore.open_reader``, or open with ``takeover=True`` to fence
    that writer.
    """

    def __init__(
        self, message: str, *, pid: int = 0, host: str = "", opened_at: datetime | None = None
    ) -> None:
        super().__init__(message)
        self.pid = pid
        self.host = host
        self.opened_at = opened_at


class ClosedError(KvError):
    """The database, snapshot or transaction has been closed."""


class CorruptionError(KvError):
    """Persisted bytes are damaged (checksum, magic, version or layout mismatch)."""

    def __init__(self, message: str, *, object_name: str | None = None) -> None:
        if object_name is not None:
            message = f"{object_name}: {message}"
        super().__init__(message)
        self.object_name = object_name


class SnapshotTooOld(KvError):
    """The requested sequence number is below the retention watermark."""


class TransactionExpired(KvError):
    """The transaction ran longer than its time-to-live and can no longer commit."""


class CheckpointNotFound(KvError, KeyError):
    """No checkpoint has the given name (it was never created, deleted, or expired).

    Also a :class:`KeyError`, so ``except KeyError`` keeps working. ``name``
    is the name asked for.
    """

    def __init__(self, name: str) -> None:
        super().__init__(f"no checkpoint named {name!r}")
        self.name = name

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])
