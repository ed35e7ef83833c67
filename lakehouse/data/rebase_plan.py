"""Rebasing one table's write over concurrent versions: the policy, without I/O.

:func:`plan` is a pure function of the transaction's table write (a
:class:`~lakehouse.data.table.TableIntent`), the table's files at the head
(any ``Mapping[str, FileState]``; the commit passes a lazy one, tests a dict)
and the changes the versions committed since the transaction began made to
the table (``(version, TableChange)`` pairs, oldest first). It never reads a
kvstore, an object store or a Parquet file. It returns a :class:`RebasePlan`:

* ``checks``: the rows of concurrent versions that must be *read* before the
  write can be trusted (:class:`RowChecks`: the files a version added, to
  match against our overwrite predicates, merge keys and SERIALIZABLE reads;
  the rows it deleted, against those reads). :mod:`lakehouse.data.rebase`
  runs them, in order, before anything else.
* ``result``: either a :class:`Conflict` (the version and the message of the
  ``RetryableConflict`` to raise once the checks pass) or :class:`Rebased`,
  the write at the head: files removed, the deletion vectors to write, the
  added files with their initial deletion vectors, and the version record's
  :class:`~lakehouse.model.TableChange`.

The steps, in the order their conflicts are reported:

1. **The matrix** (:func:`lakehouse.conflicts.data_outcome`), version by
   version: pairs of operations that can never be rebased (anything against
   a concurrent ``restore_table``).
2. **Rows both changed** (:func:`check_rows`): positions we deleted or files
   we removed, against those a concurrent version deleted or removed,
   followed through concurrent compactions. Disjoint rows rebase; the same
   row deleted by two pure deletes too (their union is either order's
   result); any other overlap is a lost update.
3. **Keys at the head** (:func:`rebase_at_head`): our deletes are followed to
   the file that holds their rows at the head (a position ``p`` of a
   compaction's source becomes ``offset(source) + p - rank(deleted at
   planning, p)`` in its output) and unioned with the head's deletion
   vectors; our own compaction deletes in its output the rows deleted in its
   sources since it was planned, so it never resurrects a row in either
   commit order (Lance #6653, delta-rs #3337).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import pyarrow as pa
from pyroaring import AbstractBitMap, BitMap, FrozenBitMap

from lakehouse import conflicts
from lakehouse.data import dv as dvfmt
from lakehouse.data.predicate import Predicate
from lakehouse.data.table import FileState, TableIntent
from lakehouse.model import DataFile, Rewrite, TableChange, VersionInfo

#: operations that only delete or move rows: two of them deleting the same row agree
_PURE_DELETE = frozenset({"delete", "append", "compact"})

#: concurrent changes to one table: (version, what it did to the table's rows)
Concurrent = Sequence[tuple[int, TableChange]]


@dataclass(frozen=True)
class Conflict:
    """The write cannot be rebased over ``version``; ``message`` says why."""

    version: int
    message: str


@dataclass(frozen=True)
class VersionRows:
    """The rows one concurrent version inserted or deleted that must be read."""

    version: int
    #: files it added (compaction outputs excluded): matched against our
    #: predicates and merge keys
    inserted: tuple[str, ...]
    #: positions it deleted, by file, and files it removed whole (not by a
    #: compaction): matched against SERIALIZABLE reads (empty without reads)
    deleted: tuple[tuple[str, FrozenBitMap], ...] = ()
    removed: tuple[str, ...] = ()


@dataclass(frozen=True)
class RowChecks:
    """What must be read before the write can commit, and what to match it against."""

    ns: str
    name: str
    #: overwrite predicates: rows inserted meanwhile must not match them
    guards: tuple[Predicate, ...]
    #: SERIALIZABLE read predicates: rows inserted or deleted meanwhile must not match
    reads: tuple[Predicate, ...]
    #: merge key columns and the rows this transaction inserted by them
    keys: tuple[str, ...]
    key_rows: tuple[pa.Table, ...]
    #: per concurrent version with something to read, oldest first
    versions: tuple[VersionRows, ...]

    @property
    def qualified(self) -> str:
        return f"{self.ns}.{self.name}"


@dataclass(frozen=True)
class Rebased:
    """The write at the head: what to write and the version record's entry."""

    #: files removed at the head (their record and deletion vector keys go)
    removed: tuple[str, ...]
    #: the whole new deletion vector of each head file whose rows the write deletes
    dvs: Mapping[str, FrozenBitMap]
    #: files added, and the deletion vector each starts with (absent: none)
    added: Mapping[str, DataFile]
    added_dvs: Mapping[str, FrozenBitMap]
    #: added files re-added whole over a deletion vector at the head (restore): cleared
    cleared: frozenset[str]
    change: TableChange


@dataclass(frozen=True)
class RebasePlan:
    """Row checks to run first, then the rebased write or the conflict."""

    checks: RowChecks
    result: Rebased | Conflict


class _Stop(Exception):
    """A step found a conflict (caught by :func:`plan`)."""

    def __init__(self, version: int, message: str) -> None:
        super().__init__(message)
        self.conflict = Conflict(version, message)


def changes_to(table: str, records: Iterable[VersionInfo]) -> list[tuple[int, TableChange]]:
    """The changes ``records`` made to the rows of ``table`` (qualified name), in order."""
    return [(r.version, c) for r in records for c in r.data if c.table == table]


def plan(
    w: TableIntent,
    head: Mapping[str, FileState],
    theirs: Concurrent,
    reads: Sequence[Predicate] = (),
) -> RebasePlan:
    """Rebase ``w`` over the concurrent changes ``theirs`` onto ``head``; ``reads``
    are the SERIALIZABLE predicates the transaction read the table with."""
    versions: list[VersionRows] = []
    result: Rebased | Conflict
    try:
        for u, c in theirs:
            check_matrix(w, u, c)
            rows = version_rows(w.guards, reads, bool(w.inserted), u, c)
            if rows is not None:
                versions.append(rows)
        check_rows(w, theirs)
        result = rebase_at_head(w, head, theirs)
    except _Stop as stop:
        result = stop.conflict
    return RebasePlan(_row_checks(w, reads, versions), result)


def plan_reads(ns: str, name: str, theirs: Concurrent, reads: Sequence[Predicate]) -> RowChecks:
    """The row checks of SERIALIZABLE reads of a table the transaction does not write."""
    found = (version_rows((), reads, False, u, c) for u, c in theirs)
    return RowChecks(ns, name, (), tuple(reads), (), (), tuple(v for v in found if v))


def _row_checks(w: TableIntent, reads: Sequence[Predicate], v: list[VersionRows]) -> RowChecks:
    return RowChecks(w.ns, w.name, tuple(w.guards), tuple(reads), w.keys, w.inserted, tuple(v))


# -- step 1: the matrix ------------------------------------------------------------


def check_matrix(w: TableIntent, u: int, c: TableChange) -> None:
    """Pairs of operations that can never be rebased (:data:`lakehouse.conflicts.DATA`)."""
    outcome = conflicts.data_outcome(w.ops, c.ops)
    if outcome != conflicts.COMPATIBLE and outcome != conflicts.REBASE:
        raise _Stop(
            u,
            f"version {u} changed the rows of {w.qualified} ({', '.join(c.ops)}) in a way "
            f"this transaction ({', '.join(w.ops)}) cannot be rebased over; re-run it",
        )


def version_rows(
    guards: Sequence[Predicate],
    reads: Sequence[Predicate],
    has_keys: bool,
    u: int,
    c: TableChange,
) -> VersionRows | None:
    """What of version ``u``'s change must be read, if anything."""
    inserted = tuple(fid for fid in c.added if fid not in _outputs(c))
    if not (guards or reads or has_keys):
        return None
    if not (inserted or (reads and (c.deleted or c.removed))):
        return None
    if not reads:
        return VersionRows(u, inserted)
    moved = _compacted(c)
    deleted = tuple((fid, FrozenBitMap(dvfmt.decode(raw))) for fid, raw in c.deleted.items())
    removed = tuple(fid for fid in c.removed if fid not in moved)
    if not (inserted or deleted or removed):
        return None  # a compaction: it moved rows, inserted and deleted none
    return VersionRows(u, inserted, deleted, removed)


# -- step 2: rows both changed -----------------------------------------------------

#: rows this write changed, by file of its base state; None: the whole file
Touched = dict[str, BitMap | None]


def check_rows(w: TableIntent, theirs: Concurrent) -> None:
    """Rows both changed, over every concurrent version in order, following our rows
    through their compactions (a row a compaction moved keeps its identity)."""
    touched = rows_touched(w)
    pure_mine = set(w.ops) <= _PURE_DELETE
    for u, c in theirs:
        _check_overlap(w, touched, u, c, pure=pure_mine and set(c.ops) <= _PURE_DELETE)
        _follow_compactions(touched, c)


def rows_touched(w: TableIntent) -> Touched:
    """The rows ``w`` deletes or removes, by file of its base state (rows it deletes
    in its own compaction's output are followed back to their sources)."""
    mine_moved = _compacted_by(w.rewrites)
    touched: Touched = {}
    for fid, pos in w.deletes.items():
        if fid not in w.added and fid not in mine_moved:
            touched[fid] = BitMap(pos)
    for fid in w.removed:
        if fid not in mine_moved:
            touched[fid] = None
    for r in w.rewrites:
        mine_out = w.deletes.get(r.new_id)
        if mine_out:
            for src, p in untranslate(r, mine_out).items():
                touched[src] = (touched.get(src) or BitMap()) | p
    return touched


def _check_overlap(w: TableIntent, touched: Touched, u: int, c: TableChange, pure: bool) -> None:
    moved = _compacted(c)
    for fid, mine_pos in touched.items():
        theirs_removed = fid in c.removed and fid not in moved
        if not (theirs_removed or fid in c.deleted):
            continue
        disjoint = (
            not theirs_removed
            and mine_pos is not None
            and (pure or not (mine_pos & dvfmt.decode(c.deleted[fid])))
        )
        if not disjoint:
            raise _Stop(
                u,
                f"version {u} also changed rows of {w.qualified} (data file {fid}) that this "
                f"transaction ({'/'.join(w.ops)}) changed; re-run it on the latest version",
            )


def _follow_compactions(touched: Touched, c: TableChange) -> None:
    """Move the rows in ``touched`` that ``c``'s compactions rewrote to their outputs."""
    for r in c.rewrites:
        acc = BitMap()
        for src, rows, _ in r.sources:
            if src in touched:
                was = touched.pop(src)
                acc |= translate(r, src, BitMap(range(rows)) if was is None else was)
        if acc and r.new_id:
            touched[r.new_id] = (touched.get(r.new_id) or BitMap()) | acc


# -- step 3: the write at the head -------------------------------------------------

#: a file a concurrent compaction consumed -> (its version, the rewrite)
Consumed = dict[str, tuple[int, Rewrite]]


def rebase_at_head(w: TableIntent, head: Mapping[str, FileState], theirs: Concurrent) -> Rebased:
    """``w``'s deletes, removals and compactions applied to the files at the head."""
    consumed = consumed_by(theirs)
    last = theirs[-1][0] if theirs else 0
    dvs, deleted, updated = merge_deletes(w, head, consumed, last)
    removed = removed_at_head(w, head, consumed)
    sources, extra = own_compactions(w, head, consumed)
    removed |= sources
    added_dvs, cleared = initial_dvs(w, head, extra)
    return Rebased(
        removed=tuple(sorted(removed)),
        dvs=MappingProxyType({fid: FrozenBitMap(bm) for fid, bm in sorted(dvs.items())}),
        added=w.added,
        added_dvs=MappingProxyType(added_dvs),
        cleared=frozenset(cleared),
        # the record's removals: ours, plus outputs of concurrent compactions of files
        # ours replaced
        change=w.change(deleted, removed | set(w.removed), updated),
    )


def consumed_by(theirs: Concurrent) -> Consumed:
    return {fid: (u, r) for u, c in theirs for r in c.rewrites for fid, _, _ in r.sources}


def follow(
    fid: str,
    pos: AbstractBitMap,
    upd: AbstractBitMap | None,
    head: Mapping[str, FileState],
    consumed: Consumed,
) -> tuple[str, AbstractBitMap, AbstractBitMap | None]:
    """Where rows ``pos`` (of which ``upd`` updated) of file ``fid`` are at the head,
    through every compaction that rewrote them: ``("", ...)`` when a compaction kept
    none of its rows, a file not at the head when it was removed otherwise."""
    while fid not in head:
        hit = consumed.get(fid)
        if hit is None:
            break
        r = hit[1]
        pos = translate(r, fid, pos)
        if upd:
            upd = translate(r, fid, upd)
        fid = r.new_id
        if not fid:
            break
    return fid, pos, upd


def merge_deletes(
    w: TableIntent, head: Mapping[str, FileState], consumed: Consumed, last: int
) -> tuple[dict[str, BitMap], dict[str, BitMap], dict[str, BitMap]]:
    """Our deletes at the head: the new deletion vector of each file, the positions
    newly deleted in it, and which of those were updates (pre-images)."""
    dvs: dict[str, BitMap] = {}
    deleted: dict[str, BitMap] = {}
    updated: dict[str, BitMap] = {}
    for fid, pos in w.deletes.items():
        if fid in w.added:
            continue
        tgt, tpos, tupd = follow(fid, pos, w.updated.get(fid), head, consumed)
        if not tgt:
            continue
        if tgt not in head:
            raise _Stop(last, _at_head(last, f"removed data file {tgt}"))
        cur = dvs.get(tgt, head[tgt][1])
        fresh = tpos - cur
        if fresh:
            dvs[tgt] = cur | fresh
            deleted[tgt] = deleted.get(tgt, BitMap()) | fresh
            if tupd and tupd & fresh:
                updated[tgt] = updated.get(tgt, BitMap()) | (tupd & fresh)
    return dvs, deleted, updated


def removed_at_head(w: TableIntent, head: Mapping[str, FileState], consumed: Consumed) -> set[str]:
    """Head files ``w`` removes: its own removals, or the output of a concurrent
    compaction of files it all removes (an overwrite over a compaction)."""
    mine_moved = _compacted_by(w.rewrites)
    out: set[str] = set()
    for fid in w.removed:
        if fid in mine_moved:
            continue
        if fid in head:
            out.add(fid)
            continue
        hit = consumed.get(fid)
        if hit is None:
            continue  # already removed by someone else (a pure removal overlap was checked)
        u, r = hit
        if not all(s in w.removed for s, _, _ in r.sources):
            raise _Stop(
                u,
                _at_head(u, f"compacted data file {fid} together with files this overwrite keeps"),
            )
        if r.new_id in head:
            out.add(r.new_id)
    return out


def own_compactions(
    w: TableIntent, head: Mapping[str, FileState], consumed: Consumed
) -> tuple[set[str], dict[str, BitMap]]:
    """Our compactions at the head: the sources they remove, and per output the rows
    deleted in its sources since it was planned (deleted in the output too)."""
    sources: set[str] = set()
    extra: dict[str, BitMap] = {}
    for r in w.rewrites:
        acc = BitMap()
        for src, rows, raw in r.sources:
            planned = dvfmt.decode(raw)
            if src in head:
                newly = head[src][1] - planned
                sources.add(src)
            elif src in consumed:
                u = consumed[src][0]
                raise _Stop(u, _at_head(u, f"compacted data file {src} as well"))
            else:  # removed whole by an overwrite or restore: its rows are gone
                newly = BitMap(range(rows)) - planned
            if newly and r.new_id:
                acc |= translate(r, src, newly)
        if acc:
            extra[r.new_id] = acc
    return sources, extra


def initial_dvs(
    w: TableIntent, head: Mapping[str, FileState], extra: Mapping[str, BitMap]
) -> tuple[dict[str, FrozenBitMap], set[str]]:
    """The deletion vector each added file starts with, and the added files whose
    old deletion vector at the head is cleared (re-added whole by a restore)."""
    dvs: dict[str, FrozenBitMap] = {}
    cleared: set[str] = set()
    for fid in sorted(w.added):
        dv = BitMap()
        for part in (w.added_dvs.get(fid), w.deletes.get(fid), extra.get(fid)):
            if part:
                dv |= part
        if dv:
            dvs[fid] = FrozenBitMap(dv)
        elif fid in head and head[fid][1]:
            cleared.add(fid)
    return dvs, cleared


def _at_head(u: int, why: str) -> str:
    return f"version {u} {why}; re-run this transaction on the latest version"


# -- compaction positions ----------------------------------------------------------


def translate(r: Rewrite, src: str, positions: AbstractBitMap) -> BitMap:
    """Positions of source ``src`` of compaction ``r`` in its output file."""
    offset = 0
    for fid, rows, raw in r.sources:
        dv = dvfmt.decode(raw)
        if fid == src:
            return BitMap(offset + p - dv.rank(p) for p in positions if p not in dv)
        offset += rows - len(dv)
    raise KeyError(src)


def untranslate(r: Rewrite, positions: AbstractBitMap) -> dict[str, BitMap]:
    """Where positions of compaction ``r``'s output came from: ``{source: positions}``."""
    out: dict[str, BitMap] = {}
    offset = 0
    for fid, rows, raw in r.sources:
        live = BitMap(range(rows)) - dvfmt.decode(raw)
        n = len(live)
        mine = [q - offset for q in positions if offset <= q < offset + n]
        if mine:
            out[fid] = BitMap(live[i] for i in mine)
        offset += n
    return out


def _compacted(change: TableChange) -> set[str]:
    return _compacted_by(change.rewrites)


def _compacted_by(rewrites: Iterable[Rewrite]) -> set[str]:
    return {fid for r in rewrites for fid, _, _ in r.sources}


def _outputs(change: TableChange) -> set[str]:
    return {r.new_id for r in change.rewrites}
