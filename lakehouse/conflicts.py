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

**Table data** is decided per row, not per table. A version that changed a
table's rows but not its definition records ``alter`` with an unchanged
definition id; such a change never conflicts at the object level. Instead
:data:`DATA` gives, for each pair (my data operation, theirs) on one table,
whether it is compatible (nothing to check), rebases (the per-row checks of
:mod:`lakehouse.data.rebase` decide), or must be retried. :data:`DATA_VS_SCHEMA`
does the same against a concurrent change of the table's *definition*
(schema or properties): new rows were matched to the old schema, so writers
of rows retry, while deletes and compactions (which write no new values)
go on. Under SERIALIZABLE a data read conflicts with a concurrent data
change only through the rows it could have returned (rebase.py), never
through the table's definition id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from lakehouse.model import DATA_OPS, DataOp, Isolation, ObjectChange, VersionInfo

RETRYABLE = "retryable"
INCOMPATIBLE = "incompatible"
COMPATIBLE = "compatible"
REBASE = "rebase"


_C, _B, _R = COMPATIBLE, REBASE, RETRYABLE
#: (my data operation, theirs) on the same table -> outcome. REBASE runs the
#: per-row checks: rows both changed (pure deletes union; otherwise retry),
#: rows they inserted that my overwrite predicate, merge keys or
#: SERIALIZABLE reads cover, deletion vectors merged and followed through
#: compactions.
A, D, U, M, W, C, R = DataOp  # APPEND, DELETE, UPDATE, MERGE, OVERWRITE, COMPACT, RESTORE
#: the operations that change rows in place (by position)
_ROW_CHANGERS = (D, U, M, W)

DATA: dict[tuple[DataOp, DataOp], str] = {
    # appends never conflict (files get fresh ids); restore replaces everything
    **{(A, t): _C for t in DATA_OPS},
    (A, R): _R,
    # row changers: disjoint rows rebase, overlapping ones retry
    **{(m, t): _B for m in _ROW_CHANGERS for t in DATA_OPS},
    **{(m, R): _R for m in _ROW_CHANGERS},
    # a delete or update of rows does not care about rows appended meanwhile
    # (SERIALIZABLE reads still do: rebase checks them)
    (D, A): _B,
    (U, A): _B,
    # compaction: moves rows, follows concurrent deletes in either order
    **{(C, t): _B for t in DATA_OPS},
    (C, A): _C,
    (C, R): _R,
    # restore_table must equal the old state exactly
    **{(R, t): _R for t in DATA_OPS},
}

#: my data operation vs a concurrent change of the table's definition
DATA_VS_SCHEMA: dict[DataOp, str] = {
    A: RETRYABLE,  # rows were matched to the old schema
    U: RETRYABLE,
    M: RETRYABLE,
    W: RETRYABLE,
    R: RETRYABLE,
    D: COMPATIBLE,  # positions do not depend on the schema
    C: COMPATIBLE,  # output files carry column ids
}

del A, D, U, M, W, C, R

_RANK = {COMPATIBLE: 0, REBASE: 1, RETRYABLE: 2, INCOMPATIBLE: 3}


def data_outcome(mine: Iterable[DataOp], theirs: Iterable[DataOp]) -> str:
    """The worst outcome over every pair of my and their data operations."""
    worst = COMPATIBLE
    for m in mine:
        for t in theirs:
            o = DATA.get((m, t), RETRYABLE)
            if _RANK[o] > _RANK[worst]:
                worst = o
    return worst


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
    #: tables whose rows (not definitions) I change -> my data operations
    data_only: Mapping[ObjectRef, frozenset[DataOp]] = field(default_factory=dict)


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
        theirs_data_only = (
            c.kind == "table" and c.op == "alter" and c.old_id is not None and c.old_id == c.new_id
        )
        if mine is not None and theirs_data_only:
            continue  # rows only: decided per row (lakehouse.data.rebase)
        my_ops = intent.data_only.get(ref)
        if mine is not None and my_ops is not None and c.op == "alter":
            worst_ops = sorted(o for o in my_ops if DATA_VS_SCHEMA.get(o, RETRYABLE) != COMPATIBLE)
            if worst_ops:
                worst = worst or Conflict(
                    RETRYABLE,
                    u,
                    f"version {u} changed the definition of table {c.name} while this "
                    f"transaction wrote rows to it ({', '.join(worst_ops)}); re-run it",
                    (ref,),
                )
            continue
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
        if theirs_data_only:
            continue  # a data read conflicts through its rows only (rebase.py)
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


# -- the tables as Markdown (docs/lakehouse.md embeds them; tools/conflict_matrix.py) --------


def data_matrix_markdown() -> str:
    """:data:`DATA` and :data:`DATA_VS_SCHEMA` as the Markdown table of the docs."""
    head = ["mine \\ theirs", *(str(t) for t in DATA_OPS), "schema change"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in DATA_OPS:
        cells = [DATA[(m, t)] for t in DATA_OPS] + [DATA_VS_SCHEMA[m]]
        lines.append(f"| **{m}** | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_write_markdown() -> str:
    """:data:`WRITE_WRITE` as a Markdown table (an object both changed)."""
    ops = ("create", "alter", "drop")
    lines = ["| mine \\ theirs | " + " | ".join(ops) + " |", "|" + "---|" * (len(ops) + 1)]
    for m in ops:
        lines.append(f"| **{m}** | " + " | ".join(WRITE_WRITE[(m, t)] for t in ops) + " |")
    return "\n".join(lines) + "\n"


#: the generated tables, by the name their markers in docs/lakehouse.md carry
GENERATED = {"data matrix": data_matrix_markdown, "write-write matrix": write_write_markdown}
