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
``CorruptionError``         stored metadata failed a format check
==========================  ==================================================

``CommitConflict`` is the common base of the two conflict kinds. Bad input
raises Python's own :class:`TypeError` / :class:`ValueError`, with a message
that names the argument.
"""

from __future__ import annotations


class LakehouseError(Exception):
    """Base class of every lakehouse error."""


class NotFound(LakehouseError, LookupError):
    """The namespace, table, view or version does not exist."""


class AlreadyExists(LakehouseError):
    """An object with that name already exists."""


class NamespaceNotEmpty(LakehouseError):
    """The namespace still holds tables or views."""


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


class ClosedError(LakehouseError):
    """The lakehouse, transaction or view is closed."""


class CorruptionError(LakehouseError):
    """Stored metadata failed a format check (unknown format version, bad JSON)."""
