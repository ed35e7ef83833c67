"""Which versions of a table are Iceberg snapshots (:mod:`lakehouse.iceberg.writer`
calls these): a version record's classification (:func:`classify`), the summary's
``lakehouse.operation`` (:func:`label`), and the scan of the records that keeps a
table's candidates in what a process knows of it (:class:`TableCache`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from lakehouse.iceberg.state import Light, SnapshotState
from lakehouse.model import TableChange, TableDef, VersionInfo

#: kinds of snapshot candidates: the first listed one (a full read), a version whose
#: record holds the table's TableChange, a definition change only, a rollback or export
FIRST, CHANGE, DDL, FULL = "first", "change", "ddl", "full"


@dataclass
class TableCache:
    """What this process knows of one table's Iceberg history."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    #: records up to this version were classified (-1: none)
    scanned: int = -1
    #: the version that created the table (None: before the versions scanned)
    created: int | None = None
    #: (version, kind) of every version that may be a snapshot, oldest first
    cands: list[tuple[int, str]] = field(default_factory=list)
    #: rollbacks and exports that left the table as it was: no snapshot
    skipped: set[int] = field(default_factory=set)
    lights: dict[int, Light] = field(default_factory=dict)
    #: the newest snapshot's whole state
    state: SnapshotState | None = None
    #: metadata JSON names known to exist
    found: set[str] = field(default_factory=set)
    #: (snapshot, generation) -> its remapped manifest list (None: not needed)
    remapped: dict[tuple[int, str], str | None] = field(default_factory=dict)
    #: the chain ``lights``, ``state``, ``remapped`` and ``skipped`` are of
    chain: int | None = None
    #: ``cands`` lists every candidate from here on (or from ``created``): a catch-up
    #: over an expiry skips the expired records, so a call whose oldest retained
    #: version is older than this (it read the store before that expiry) cannot use
    #: the cache
    floor: int = 0

    def use_chain(self, chain: int) -> None:
        """Forget what is of another chain (after an expiry, or a re-creation)."""
        if self.chain != chain:
            self.lights, self.state, self.remapped, self.skipped = {}, None, {}, set()
            self.chain = chain


def classify(rec: VersionInfo, d: TableDef) -> tuple[str | None, bool, TableChange | None]:
    """(kind or None when the record leaves the table alone, whether it created the
    table, its TableChange)."""
    q = d.qualified_name
    tc = next(
        (c for c in rec.data if c.table_id == d.table_id or (not c.table_id and c.table == q)),
        None,
    )
    named = [c for c in rec.changes if c.kind == "table" and c.name == q]
    create = any(c.op == "create" for c in named)
    if not named and tc is None:
        return None, False, None
    if rec.restores_state:
        return FULL, create, tc
    if create:
        return FIRST, True, tc
    return (CHANGE if tc is not None else DDL), False, tc


def label(rec: VersionInfo, d: TableDef, tc: TableChange | None) -> str:
    """The summary's ``lakehouse.operation``: what the version did to the table
    (``create``, ``alter``, then the data operations, joined by commas)."""
    if rec.rollback_of is not None:
        return "rollback"
    if rec.source is not None:
        return "export"
    ops = [  # a data change is stored as an alter that keeps the definition
        str(c.op)
        for c in rec.changes
        if c.kind == "table" and c.name == d.qualified_name and c.changes_definition
    ]
    ops += [str(op) for op in tc.ops] if tc is not None else []
    return ",".join(dict.fromkeys(ops))


def scan(
    c: TableCache,
    d: TableDef,
    v: int,
    oldest: int,
    record: Callable[[int], VersionInfo],
    found_at: Callable[[int], str | None],
) -> str | None:
    """Classify the records up to version ``v`` into ``c`` (``record(u)``: version
    u's record; ``found_at(u)``: the location of the metadata JSON of effective
    version u if it exists); returns that location when the newest snapshot's
    metadata exists already (then ``c`` is left as it was)."""
    if c.scanned < 0:
        cands: list[tuple[int, str]] = []
        created = None
        quick = True
        for u in range(v, oldest - 1, -1):
            kind, create, _ = classify(record(u), d)
            if kind is not None and quick:
                quick = False
                if kind != FULL and (found := found_at(u)) is not None:
                    return found
            if kind is not None:
                cands.append((u, kind))
            if create:
                created = u
                break
        if quick and (found := found_at(oldest)) is not None:
            return found
        c.cands, c.created, c.scanned = sorted(cands), created, v
        c.floor = 0 if created is not None else oldest
    elif v > c.scanned:
        start = c.scanned + 1
        if oldest > start:
            # versions after the ones scanned expired: their records are gone, and
            # nothing before the oldest is listed any more (the first snapshot is
            # a full read at the oldest, or the table's creation after it)
            c.cands = [(u, k) for u, k in c.cands if u >= oldest]
            c.floor = max(c.floor, oldest)
            start = oldest
        for u in range(start, v + 1):
            kind, create, _ = classify(record(u), d)
            if create:
                c.created, c.cands = u, []
            if kind is not None:
                c.cands.append((u, kind))
        c.scanned = v
    return None


def listed(c: TableCache, v: int, oldest: int) -> list[tuple[int, str]]:
    """The snapshots of versions ``oldest..v`` (scanned before): the first one
    (the table's creation or the oldest version), then the candidates after it."""
    first = c.created if c.created is not None and c.created >= oldest else oldest
    rest = [(u, k) for u, k in c.cands if first < u <= v and u not in c.skipped]
    return [(first, FIRST), *rest]
