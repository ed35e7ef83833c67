"""What a transaction asks of a commit, and what the commit did: immutable values.

A :class:`~lakehouse.Transaction` is a buffer. When it commits, it freezes
that buffer once into a :class:`TxnIntent`; the commit protocol
(:func:`lakehouse.commit.run`) works from the intent alone and returns a
:class:`CommitOutcome`. Nothing flows back into the transaction except what
the transaction itself takes from the outcome::

    Transaction (mutable buffer) ──freeze()──▶ TxnIntent ──commit.run──▶ CommitOutcome

The services a commit uses of the open lakehouse are :class:`CommitServices`
(public names; :class:`lakehouse.context.Context` implements them, and unit
tests pass in-memory stand-ins).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from lakehouse import keys
from lakehouse.data.predicate import Predicate
from lakehouse.data.table import FileState, TableIntent
from lakehouse.model import Definition, Isolation, TableDef, VersionInfo

if TYPE_CHECKING:
    import kvstore
    from kvstore.objstore import ObjectStore


class ObjectNames:
    """The names of one object a transaction touched (``kind``, ``ns``, ``name``)."""

    kind: str
    ns: str
    name: str | None

    @property
    def key(self) -> bytes:
        """Its definition's kvstore key."""
        return keys.object_key(self.kind, self.ns, self.name)

    @property
    def qualified(self) -> str:
        return self.ns if self.name is None else f"{self.ns}.{self.name}"


@dataclass(frozen=True)
class DefinitionChange(ObjectNames):
    """One object a transaction touched: its definition at the begin version and at
    commit (``final`` None: dropped; equal to ``base``: looked at or data-only)."""

    kind: str
    ns: str
    name: str | None
    base: Definition | None
    base_bytes: bytes | None
    final: Definition | None


K = TypeVar("K")
V = TypeVar("V")

#: the empty read-only mapping frozen values share
EMPTY: Mapping[Any, Any] = MappingProxyType({})


def frozen_copy(m: Mapping[K, V]) -> Mapping[K, V]:
    """A read-only copy of ``m`` (:data:`EMPTY` when it is empty)."""
    return MappingProxyType(dict(m)) if m else EMPTY


@dataclass(frozen=True)
class TxnIntent:
    """A transaction's buffer, frozen at commit: everything the commit reads of it."""

    #: the version the transaction began at
    version: int
    isolation: Isolation
    txn_id: str
    #: when it began (the lakehouse clock's monotonic seconds; the TTL counts from it)
    started: float
    #: the oldest version whose data it uses (its base, or older after restore / clone)
    oldest_version_read: int
    #: idempotent writes: (app id, app version), or None
    app: tuple[str, int] | None
    #: every object touched, by (kind, qualified name), in the order first touched
    touched: Mapping[tuple[str, str], DefinitionChange]
    #: raw table-state keys to write (rollback, export: ``Transaction.apply_state``)
    state_writes: Mapping[bytes, bytes | None]
    #: tables whose state ``state_writes`` changes, as (namespace, table)
    state_tables: frozenset[tuple[str, str]]
    #: SERIALIZABLE: objects looked up and listings taken (empty otherwise)
    reads: frozenset[tuple[str, str]]
    listings: frozenset[tuple[str, str]]
    #: row changes, per (namespace, table)
    table_writes: Mapping[tuple[str, str], TableIntent]
    #: SERIALIZABLE: predicates of the data reads, per (namespace, table)
    data_reads: Mapping[tuple[str, str], tuple[Predicate, ...]]
    #: SERIALIZABLE: each table of ``data_reads`` as the transaction sees it at
    #: commit (absent: it dropped the table)
    read_tables: Mapping[tuple[str, str], TableDef]
    #: a table's files at the begin version, by file id (looked up lazily)
    base_files: Callable[[str, str], Mapping[str, FileState]]

    @property
    def serializable(self) -> bool:
        return self.isolation is Isolation.SERIALIZABLE


#: called inside each commit attempt just before the kvstore commit, with the
#: intent and the attempt number (1, 2, ...): a testing injection point
CommitHook = Callable[[TxnIntent, int], None]


@dataclass(frozen=True)
class CommitOptions:
    """How a commit differs from a plain transaction's (rollback, export), and the
    testing injection point the lakehouse passes in (``Options.commit_hook``)."""

    #: conflict with every version committed meanwhile (the result must equal an old state)
    exclusive: bool = False
    #: write a version even when nothing changed
    force: bool = False
    #: the version a rollback restores
    rollback_of: int | None = None
    #: where an export came from
    source: dict[str, Any] | None = None
    #: testing injection point (see :data:`CommitHook`); None in production
    hook: CommitHook | None = None


@dataclass(frozen=True)
class CommitOutcome:
    """What a commit did."""

    #: the version created; the begin version when nothing was written; with
    #: ``skipped``, the version that recorded the app version
    version: int
    #: a new version was written
    created: bool
    #: the app version was recorded already: nothing written
    skipped: bool
    #: commit attempts made (0: read-only, never reached the store; 1: first won)
    attempts: int
    #: versions committed by others that this one was rebased over, in order
    rebased_over: tuple[int, ...]
    #: the record written (None when nothing was)
    record: VersionInfo | None = None
    #: why the commit failed (a conflict, an expired transaction, a storage or
    #: fencing error); nothing was written. The transaction raises it.
    error: Exception | None = None

    @property
    def committed_version(self) -> int | None:
        """The version created, or None (read-only, nothing changed, skipped, failed)."""
        return self.version if self.created else None


class CommitServices(Protocol):
    """What the commit protocol uses of the open lakehouse."""

    @property
    def db(self) -> kvstore.DB: ...
    @property
    def data(self) -> ObjectStore: ...
    @property
    def transaction_ttl(self) -> float: ...
    @property
    def commit_retries(self) -> int: ...
    @property
    def durable(self) -> bool: ...
    def monotonic(self) -> float: ...
    def now_ms(self) -> int: ...
    def backoff(self, attempt: int) -> float: ...
    def sleep(self, seconds: float) -> None: ...
    def record(self, version: int, get: Callable[[bytes], bytes | None]) -> VersionInfo: ...
    def remember(self, rec: VersionInfo) -> None: ...
