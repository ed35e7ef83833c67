"""Public errors of :mod:`lakehouse`.

Few and coarse, each telling the caller what to do:

==========================  ==================================================
``NotFound``                the object or version does not exist; fix the name
``AlreadyExists``           the name is taken; pick another or drop it first
``NamespaceNotEmpty``       drop the namespace's tables and views first
``RetryableConflict``       a concurrent version changed what this transaction
                            wrote or (SERIALIZABLE) read; re-run the
                            transaction's logic on the latest version
``TransactionExpired``      (a ``RetryableConflict``) the transaction outlived
                            the lakehouse's transaction TTL; re-run it
``IncompatibleConflict``    a concurrent version made this transaction
                            impossible (its namespace was dropped, the name it
                            creates was taken); re-running as is cannot succeed
``VersionExpired``          the version was removed by ``expire_versions``
``ClosedError``             the lakehouse, transaction or view was closed
``CorruptionError``         stored metadata or a data file failed a check
``WriterActive``            another live process writes this lakehouse: read it
                            with ``lakehouse.open_reader``, or open with
                            ``takeover=True`` to fence that writer
``FencedError``             another writer took over; this handle can no
                            longer commit (nothing it did not commit is visible)
``ReadOnlyError``           a write through ``lakehouse.open_reader``
``StorageError``            the storage below failed otherwise
==========================  ==================================================

**One hierarchy.** Errors from the kvstore below are raised as their
lakehouse counterparts (each is also the kvstore class, so code catching
``kvstore.FencedError`` keeps working): ``except lakehouse.LakehouseError``
catches everything the lakehouse raises on purpose.

``CommitConflict`` is the common base of the two conflict kinds. Bad input
raises Python's own :class:`TypeError` / :class:`ValueError`, with a message
that names the argument.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import kvstore
from kvstore.reader import ReadOnlyError as _KvReadOnly


class LakehouseError(Exception):
    """Base class of every lakehouse error."""


class NotFound(LakehouseError, LookupError):
    """The namespace, table, view or version does not exist."""


class AlreadyExists(LakehouseError):
    """An object with that name already exists."""


class NamespaceNotEmpty(LakehouseError):
    """The namespace still holds tables or views."""


class DuplicateKey(LakehouseError, ValueError):
    """A write would give two live rows of a table the same primary key (the
    message names the key); nothing of the write was applied."""


class MergeKeyError(LakehouseError, ValueError):
    """A merge by key columns refused its keys before writing anything: a source key
    is null or appears twice, or matches two target rows (the message says which)."""


class CommitConflict(LakehouseError):
    """A concurrent commit conflicts with this transaction; nothing of it was committed.

    ``version`` is the committed version that caused the conflict (None when
    the commit gave up after too many lost races), ``objects`` the
    ``(kind, name)`` pairs involved.
    """

    def __init__(
        self,
        message: str,
        *,
        version: int | None = None,
        objects: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.version = version
        self.objects = objects


class RetryableConflict(CommitConflict):
    """Re-run the transaction's logic on the latest version."""


class TransactionExpired(RetryableConflict):
    """The transaction ran longer than the lakehouse's transaction TTL."""


class IncompatibleConflict(CommitConflict):
    """A concurrent version made this transaction's changes impossible."""


class VersionExpired(LakehouseError):
    """The requested version is older than the oldest retained version."""


class ClosedError(LakehouseError, kvstore.ClosedError):
    """The lakehouse, transaction or view is closed."""


class CorruptionError(LakehouseError, kvstore.CorruptionError):
    """Stored metadata or a data file failed a check (format, checksum, missing file)."""


class DataFileMissing(CorruptionError):
    """A data file a version references is not in storage.

    Reads raise it where no better answer is known; the lakehouse turns it
    into :class:`VersionExpired` when the version read has expired (its files
    were deleted by ``expire_versions``), so only a file lost otherwise stays
    a corruption.
    """

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class WriterActive(LakehouseError, kvstore.WriterActive):
    """A live process writes this lakehouse (local directories only)."""


class FencedError(LakehouseError, kvstore.FencedError):
    """Another writer took over the lakehouse; this handle cannot commit any more."""


class ReadOnlyError(LakehouseError, _KvReadOnly):
    """A write through a read-only lakehouse reader."""


class StorageError(LakehouseError):
    """The key-value store below failed (see ``__cause__``)."""


_MAP: tuple[tuple[type[Exception], type[LakehouseError]], ...] = (
    (kvstore.WriterActive, WriterActive),
    (kvstore.FencedError, FencedError),
    (kvstore.CorruptionError, CorruptionError),
    (kvstore.ClosedError, ClosedError),
    (_KvReadOnly, ReadOnlyError),
)

F = TypeVar("F", bound=Callable[..., Any])


def translated(exc: BaseException) -> BaseException:
    """The lakehouse error for a kvstore error (others unchanged)."""
    if isinstance(exc, LakehouseError) or not isinstance(exc, kvstore.KvError):
        return exc
    for kv, ours in _MAP:
        if isinstance(exc, kv):
            return ours(str(exc))
    return StorageError(f"{type(exc).__name__}: {exc}")


def _wrap(fn: F) -> F:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except kvstore.KvError as exc:
            new = translated(exc)
            if new is exc:
                raise
            raise new from exc
        except OSError as exc:  # the storage below failed (credentials revoked, endpoint gone)
            where = _location(args[0]) if args else "the lakehouse's storage"
            raise StorageError(f"{where}: {type(exc).__name__}: {exc}") from exc

    return call  # type: ignore[return-value]


def _location(obj: Any) -> str:
    """The URL of the lakehouse behind a Lakehouse, transaction or view (for messages)."""
    getters: tuple[Callable[[Any], Any], ...] = (
        lambda o: o.url,
        lambda o: o.data_url,
    )
    for get in getters:
        try:
            found = get(obj)
        except Exception:
            continue
        if isinstance(found, str) and found:
            return found
    return "the lakehouse's storage"


def storage_errors_name_url(fn: F) -> F:
    """For ``open``/``open_reader(url, ...)``: a failure of the storage below (a
    missing bucket, bad or missing credentials, an unreachable endpoint: an
    ``OSError`` from the object store) is a :class:`StorageError` naming ``url``."""

    @functools.wraps(fn)
    def call(url: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(url, *args, **kwargs)
        except OSError as exc:
            where = url.describe() if hasattr(url, "describe") else str(url)
            if isinstance(exc, FileNotFoundError):
                why = "not found (a missing bucket or path?)"
            elif isinstance(exc, PermissionError):
                why = "access denied (missing or wrong credentials?)"
            else:
                why = "storage unreachable or failing"
            detail = exc.strerror if isinstance(exc.strerror, str) else str(exc)
            raise StorageError(f"cannot open {where}: {why}: {detail}") from exc

    return call  # type: ignore[return-value]


def one_hierarchy(cls: type) -> type:
    """Class decorator: public methods and properties raise lakehouse errors only."""
    for name, attr in list(vars(cls).items()):
        if name.startswith("_") and name not in ("__enter__", "__exit__"):
            continue
        if isinstance(attr, property):
            setattr(cls, name, property(_wrap(attr.fget) if attr.fget else None, attr.fset))
        elif callable(attr) and not isinstance(attr, (staticmethod, classmethod, type)):
            setattr(cls, name, _wrap(attr))
    return cls
