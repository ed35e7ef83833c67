"""Conflict rules of the commit protocol: pure functions over version records.

A committing transaction that began at version ``v`` finds the lakehouse at
``w > v`` and must decide, for each version ``u`` in ``v+1..w``, whether its
own changes still make sense on top of ``u``. The rules (data, not code, so
they can be read and tested as a table):

* **write-write** (both isolation levels): ``u`` changed an object we change.
  The outcome depends on the pair of operations (mine, theirs), see
  :data:`WRITE_WRITE`: incompatible when re-running could not succeed (the
  name we create was taken, the object we alter or drop is gone), retryable
  otherwise (re-run the logic on the latest definition).
* **read-write** (SERIALIZABLE): ``u`` changed an object we read, even one we
  found missing (reads of absent objects are recorded too) -> retryable.
* **phantom** (SERIALIZABLE): ``u`` created or dropped an object inside a
  listing we read (``list_tables(ns)`` sees a new table) -> retryable.
  Alters do not change a listing: listings return names only.
* **exclusive** transactions (rollback) conflict with every version in
  between: their result must equal an old state exactly.

Anything else is compatible: the transaction's changes are rebased onto
``w`` unchanged, because none of the objects it wrote moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lakehouse.model import Isolation, ObjectChange, VersionInfo

RETRYABLE = "retryable"
INCOMPATIBLE = "incompatible"

#: (my operation, their operation) on the same object -> outcome
WRITE_WRITE: dict[tuple[str, str], str] = {
    ("create", "create"): INCOMPATIBLE,  # the name was taken
    ("create", "alter"): RETRYABLE,
    ("create", "drop"): RETRYABLE,  # created and dropped in between: try again
    ("alter", "create"): RETRYABLE,  # dropped and re-created in between
    ("alter", "alter"): RETRYABLE,
    ("alter", "drop"): INCOMPATIBLE,  # the object is gone
    ("drop", "create"): RETRYABLE,
    ("drop", "alter"): RETRYABLE,
    ("drop", "drop"): INCOMPATIBLE,  # already dropped
}

_PAST = {"create": "created", "alter": "altered", "drop": "dropped"}

ObjectRef = tuple[str, str]  # (kind, qualified name)
ListingRef = tuple[str, str]  # ("namespaces", "") | ("tables", ns) | ("views", ns)


@dataclass(frozen=True)
class Intent:
    """What a committing transaction wrote and read, as the rules need it."""

    isolation: Isolation
    writes: Mapping[ObjectRef, str]  # object -> my op
    reads: frozenset[ObjectRef] = frozenset()
    listings: frozenset[ListingRef] = frozenset()
    exclusive: bool = False


@dataclass(frozen=True)
class Conflict:
    outcome: str  # RETRYABLE or INCOMPATIBLE
    version: int
    reason: str
    objects: tuple[ObjectRef, ...] = field(default=())


def listing_of(change: ObjectChange) -> ListingRef | None:
    """The listing whose membership ``change`` alters, if any."""
    if change.op == "alter":
        return None
    if change.kind == "namespace":
        return ("namespaces", "")
    if change.kind in ("table", "view"):
        return (change.kind + "s", change.name.split(".", 1)[0])
    return None


def check(intent: Intent, record: VersionInfo) -> Conflict | None:
    """The first conflict between ``intent`` and committed version ``record``."""
    u = record.version
    if intent.exclusive:
        return Conflict(RETRYABLE, u, f"version {u} was committed while restoring an old state", ())
    worst: Conflict | None = None
    for c in record.changes:
        ref = (c.kind, c.name)
        mine = intent.writes.get(ref)
        if mine is not None:
            outcome = WRITE_WRITE.get((mine, c.op), RETRYABLE)
            conflict = Conflict(
                outcome,
                u,
                f"version {u} also changed {c.kind} {c.name} ({c.op}; this transaction: {mine})",
                (ref,),
            )
            if outcome == INCOMPATIBLE:
                return conflict
            worst = worst or conflict
            continue
        if intent.isolation is not Isolation.SERIALIZABLE or worst is not None:
            continue
        if ref in intent.reads:
            worst = Conflict(
                RETRYABLE,
                u,
                f"version {u} changed {c.kind} {c.name}, which this SERIALIZABLE "
                f"transaction read ({c.op})",
                (ref,),
            )
            continue
        listing = listing_of(c)
        if listing is not None and listing in intent.listings:
            what = (
                "the namespace list"
                if listing[0] == "namespaces"
                else (f"the {listing[0]} of namespace {listing[1]}")
            )
            worst = Conflict(
                RETRYABLE,
                u,
                f"version {u} {_PAST[c.op]} {c.kind} {c.name} in {what}, which this SERIALIZABLE "
                "transaction listed (phantom)",
                (ref,),
            )
    return worst
