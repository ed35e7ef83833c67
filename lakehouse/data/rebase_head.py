"""Step 3 of a rebase (see :mod:`lakehouse.data.rebase_plan`): the write at the head.

Pure, like the rest of the planner: over a table write (``TableIntent``), the
table's files at the head (a ``Mapping[str, FileState]``) and the concurrent
versions' changes. Our deletes are followed to the files that hold their
rows at the head (through each compaction's map of where it put every row,
:mod:`lakehouse.data.rewrites`; a clustering compaction may spread one
file's rows over several outputs) and unioned with the head's deletion vectors; an
overwrite that removed every source of a concurrent compaction removes its
output; our own compaction deletes in its output the rows deleted in its
sources since it was planned, so it never resurrects a row in either commit
order (Lance #6653, delta-rs #3337). A conflict is raised as
:class:`Unrebasable`, carrying a :class:`Conflict`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from pyroaring import AbstractBitMap, BitMap, FrozenBitMap

from lakehouse.data import dv as dvfmt
from lakehouse.data.rewrites import compacted_by, outputs, place, translate, untranslate
from lakehouse.data.table import FileState, TableIntent
from lakehouse.model import DataFile, Rewrite, TableChange

__all__ = [
    "Concurrent",
    "Conflict",
    "Rebased",
    "Unrebasable",
    "compacted_by",
    "follow",
    "rebase_at_head",
    "translate",
    "untranslate",
]

#: concurrent changes to one table: (version, what it did to the table's rows)
Concurrent = Sequence[tuple[int, TableChange]]


@dataclass(frozen=True)
class Conflict:
    """The write cannot be rebased over ``version``; ``message`` says why."""

    version: int
    message: str


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


class Unrebasable(Exception):
    """A planning step found a conflict (:func:`lakehouse.data.rebase_plan.plan` returns it)."""

    def __init__(self, version: int, message: str) -> None:
        super().__init__(message)
        self.conflict = Conflict(version, message)


#: a file a concurrent compaction consumed -> (its version, the rewrite)
Consumed = dict[str, tuple[int, Rewrite]]


def rebase_at_head(w: TableIntent, head: Mapping[str, FileState], theirs: Concurrent) -> Rebased:
    """``w``'s deletes, removals and compactions applied to the files at the head."""
    consumed = consumed_by(theirs)
    last = theirs[-1][0] if theirs else 0
    dvs, deleted, updated = merge_deletes(w, head, consumed, last)
    removed = removed_at_head(w, head, consumed, theirs)
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
) -> list[tuple[str, AbstractBitMap, AbstractBitMap | None]]:
    """Where rows ``pos`` (of which ``upd`` updated) of file ``fid`` are at the head,
    through every compaction that rewrote them, by file: ``("", ...)`` when a
    compaction kept none of its rows, a file not at the head when it was removed
    otherwise. Rows deleted before a compaction moved them are dropped."""
    out: list[tuple[str, AbstractBitMap, AbstractBitMap | None]] = []
    todo: list[tuple[str, AbstractBitMap, AbstractBitMap | None]] = [(fid, pos, upd)]
    while todo:
        fid, pos, upd = todo.pop()
        hit = None if fid in head else consumed.get(fid)
        if hit is None:
            out.append((fid, pos, upd))
            continue
        r = hit[1]
        moved = translate(r, fid, pos)
        moved_upd = translate(r, fid, upd) if upd else None
        if not outputs(r):
            out.append(("", moved, moved_upd))
            continue
        upd_at = place(r, moved_upd) if moved_upd else {}
        for new, p in place(r, moved).items():
            todo.append((new, p, upd_at.get(new)))
    return out


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
        for tgt, tpos, tupd in follow(fid, pos, w.updated.get(fid), head, consumed):
            if not tgt:
                continue
            if tgt not in head:
                raise Unrebasable(last, _at_head(last, f"removed data file {tgt}"))
            cur = dvs.get(tgt, head[tgt][1])
            fresh = tpos - cur
            if fresh:
                dvs[tgt] = cur | fresh
                deleted[tgt] = deleted.get(tgt, BitMap()) | fresh
                if tupd and tupd & fresh:
                    updated[tgt] = updated.get(tgt, BitMap()) | (tupd & fresh)
    return dvs, deleted, updated


def removed_at_head(
    w: TableIntent, head: Mapping[str, FileState], consumed: Consumed, theirs: Concurrent
) -> set[str]:
    """Head files ``w`` removes: its own removals, or the outputs of concurrent
    compactions of files it all removes (an overwrite over a compaction; through
    chains of them: a compaction of another one's output and of files ``w``
    removes)."""
    mine_moved = compacted_by(w.rewrites)
    gone = set(w.removed) - mine_moved
    for _, c in theirs:  # in version order: an output of removed files is removed too
        for r in c.rewrites:
            if all(s in gone for s, _, _ in r.sources):
                gone.update(new for new, _ in outputs(r))
    out: set[str] = set()
    todo = [fid for fid in w.removed if fid not in mine_moved]
    while todo:
        fid = todo.pop()
        if fid in head:
            out.add(fid)
            continue
        hit = consumed.get(fid)
        if hit is None:
            continue  # already removed by someone else (a pure removal overlap was checked)
        u, r = hit
        if not all(s in gone for s, _, _ in r.sources):
            raise Unrebasable(
                u,
                _at_head(u, f"compacted data file {fid} together with files this overwrite keeps"),
            )
        todo.extend(new for new, _ in outputs(r) if new not in out)
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
                raise Unrebasable(u, _at_head(u, f"compacted data file {src} as well"))
            else:  # removed whole by an overwrite or restore: its rows are gone
                newly = BitMap(range(rows)) - planned
            if newly and r.new_id:
                acc |= translate(r, src, newly)
        for new, p in place(r, acc).items():
            extra[new] = extra.get(new, BitMap()) | p
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
