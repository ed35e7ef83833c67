"""Committing table data over concurrent versions: plan, read what the plan needs, write.

The commit protocol (:mod:`lakehouse.commit`, through
:func:`lakehouse.data.commit.rebase_all`) calls :func:`rebase` inside its
kvstore transaction, at head ``w``, with the records of the versions
``v+1..w`` committed since this transaction began at ``v``. For each table
the transaction changed it:

1. **plans** (:func:`lakehouse.data.rebase_plan.plan`, pure): the matrix,
   the rows both changed, the deletion vectors and removals at the head and
   the version record's entry, or the conflict;
2. **checks the rows the plan names** (:func:`check_rows`, the only step
   that reads data files): rows a concurrent version inserted (pruned by
   their bounds first) conflict if they match an ``overwrite`` predicate of
   ours (the overwrite would not have replaced them), carry a key we
   inserted by ``merge`` (no duplicate keys), or, under SERIALIZABLE, match
   any predicate we read; rows a concurrent version *deleted* conflict under
   SERIALIZABLE when they match a predicate we read. Checks run version by
   version, before the plan's own conflict is raised, so the first conflict
   reported is the one of the earliest step;
3. **writes** the plan as kvstore keys (:func:`kv_writes`): removed files'
   record and deletion-vector keys deleted, deletion vectors written, added
   files' records and initial deletion vectors put.

:func:`check_reads` does step 2 alone for a table the transaction only read
under SERIALIZABLE.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyroaring import BitMap

import kvstore
from lakehouse import keys
from lakehouse.data import dv as dvfmt
from lakehouse.data import keyindex, record, scan
from lakehouse.data.predicate import Predicate, matches
from lakehouse.data.rebase_plan import (
    Conflict,
    Rebased,
    RowChecks,
    VersionRows,
    changes_to,
    plan,
    plan_reads,
)
from lakehouse.data.rows import join
from lakehouse.data.table import FileState, LazyFiles, TableIntent
from lakehouse.errors import RetryableConflict
from lakehouse.model import DataFile, TableChange, TableDef, VersionInfo

if TYPE_CHECKING:
    from kvstore.objstore import ObjectStore

KvWrites = list[tuple[bytes, bytes | None]]
_RecordOf = Callable[[str], DataFile | None]


def rebase(
    ktx: kvstore.Transaction,
    store: ObjectStore,
    d: TableDef,
    w: TableIntent,
    base: Mapping[str, FileState],
    reads: Sequence[Predicate],
    records: Sequence[VersionInfo],
) -> tuple[KvWrites, TableChange]:
    """Check ``w`` against ``records`` and return its kvstore writes and record."""
    theirs = changes_to(w.qualified, records)
    head = LazyFiles(ktx.get, w.ns, w.name) if theirs else base
    p = plan(w, head, theirs, reads)
    check_rows(ktx, store, d, base, p.checks)
    if isinstance(p.result, Conflict):
        raise _error(p.result, w.qualified)
    if w.rebuilt and theirs:  # the rebuilt index would miss the rows they changed
        raise _error(
            Conflict(
                theirs[0][0],
                f"{w.qualified} changed concurrently while this transaction indexed its "
                "primary key; re-run it on the latest version",
            ),
            w.qualified,
        )
    writes = kv_writes(w.ns, w.name, p.result)
    writes += bound_writes(ktx, w.ns, w.name, p.result.added, p.result.removed)
    writes += keyindex.commit_writes(ktx.get, w.index, w.index_high, w.index_moves, bool(theirs))
    return writes, p.result.change


def bound_writes(
    ktx: kvstore.Transaction,
    ns: str,
    name: str,
    added: Mapping[str, DataFile],
    removed: Sequence[str] = (),
) -> KvWrites:
    """The table's plain-file-id bounds (:func:`lakehouse.keys.file_bound_key`) moved
    to cover the plain files this commit adds and to skip those it removes."""
    plain = [fid for fid in added if not fid.startswith("p")]
    gone = {fid for fid in removed if not fid.startswith("p")}
    if not (plain or gone):
        return []
    key = keys.file_bound_key(ns, name)
    raw = ktx.get(key)
    if raw is None:
        if not plain:
            return []  # a table without bounds yet stays unbounded until it adds a file
        low, high = _first_live(ktx, ns, name, "", gone), _last_plain(ktx, ns, name)
    else:
        low, high = keys.decode_file_bounds(raw)
        if low in gone:  # the smallest live file goes: find the next one
            low = _first_live(ktx, ns, name, low, gone)
    if plain:
        high = max(high, *plain)
        low = min(plain) if low is None else min(low, *plain)
    new = keys.encode_file_bounds(high if low is None else low, high)
    return [] if new == raw else [(key, new)]


def _first_live(
    ktx: kvstore.Transaction, ns: str, name: str, start: str, gone: set[str]
) -> str | None:
    """The smallest plain file id at or after ``start`` at the head, other than
    those this commit removes (None: no plain file is left)."""
    fprefix = keys.table_state_prefix(ns, name) + b"F/"
    for lo, hi in keys.plain_file_ranges(ns, name, b"F/", None):
        for k, _ in ktx.scan(max(lo, fprefix + start.encode("utf-8")), hi):
            fid = k[len(fprefix) :].decode("utf-8")
            if fid not in gone:
                return fid
    return None


def _last_plain(ktx: kvstore.Transaction, ns: str, name: str) -> str:
    """The largest plain file id at the head ("" when there is none)."""
    fprefix = keys.table_state_prefix(ns, name) + b"F/"
    last = ""
    for lo, hi in keys.plain_file_ranges(ns, name, b"F/", None):
        for k, _ in ktx.scan(lo, hi, reverse=True):  # the last key only
            last = max(last, k[len(fprefix) :].decode("utf-8"))
            break
    return last


def check_reads(
    ktx: kvstore.Transaction,
    store: ObjectStore,
    d: TableDef,
    base: Mapping[str, FileState],
    reads: Sequence[Predicate],
    records: Sequence[VersionInfo],
) -> None:
    """SERIALIZABLE reads of a table this transaction does not write: step 2 only."""
    theirs = changes_to(d.qualified_name, records)
    check_rows(ktx, store, d, base, plan_reads(d.namespace, d.name, theirs, reads))


def kv_writes(ns: str, name: str, r: Rebased) -> KvWrites:
    """The kvstore keys that put the rebased write ``r`` at the head of table ``ns.name``."""
    out: KvWrites = []
    for fid in r.removed:
        out.append((keys.data_file_key(ns, name, fid), None))
        out.append((keys.dv_key(ns, name, fid), None))
    for fid, bm in r.dvs.items():
        out.append((keys.dv_key(ns, name, fid), dvfmt.encode(bm)))
    for fid, f in sorted(r.added.items()):
        out.append((keys.data_file_key(ns, name, fid), record.encode_file(f)))
        dv = r.added_dvs.get(fid)
        if dv:
            out.append((keys.dv_key(ns, name, fid), dvfmt.encode(dv)))
        elif fid in r.cleared:
            out.append((keys.dv_key(ns, name, fid), None))
    return out


def check_rows(
    ktx: kvstore.Transaction,
    store: ObjectStore,
    d: TableDef,
    base: Mapping[str, FileState],
    checks: RowChecks,
) -> None:
    """Read the rows ``checks`` names and raise the first conflict they show."""

    def record_of(fid: str) -> DataFile | None:
        if fid in base:
            return base[fid][0]
        raw = ktx.get(keys.data_file_key(checks.ns, checks.name, fid))
        return None if raw is None else record.decode_file(raw)

    for v in checks.versions:
        inserted = _inserted_files(checks, v, record_of)
        _check_predicates(store, d, checks, v, inserted)
        _check_keys(store, d, checks, v, inserted)
        if checks.reads:
            _check_deleted(store, d, checks, v, _deleted_rows(v, base, record_of))


def _inserted_files(checks: RowChecks, v: VersionRows, record_of: _RecordOf) -> list[FileState]:
    out: list[FileState] = []
    moved: dict[str, list[tuple[str, BitMap]]] = {}
    for fid, tgt, pos in v.moved:  # rewritten by a later compaction: read where they are
        moved.setdefault(fid, []).append((tgt, BitMap(pos)))
    for fid in v.inserted:
        f = record_of(fid)
        if f is not None:
            out.append((f, BitMap()))
            continue
        if fid not in moved:
            raise _conflict(checks, v, f"added data file {fid}, since removed,")
        for tgt, kept in moved[fid]:
            g = record_of(tgt)
            if g is None:
                raise _conflict(checks, v, f"added data file {fid}, since removed,")
            out.append((g, BitMap(range(g.record_count)) - kept))
    return out


def _check_predicates(
    store: ObjectStore, d: TableDef, checks: RowChecks, v: VersionRows, files: list[FileState]
) -> None:
    """Inserted rows matching an overwrite predicate or a SERIALIZABLE read."""
    labelled = [(p, "an overwrite") for p in checks.guards]
    labelled += [(p, "a SERIALIZABLE read") for p in checks.reads]
    for p, what in labelled:
        for _, hit in scan.matching_positions(store, d, files, p, columns=[]):
            if hit.num_rows:
                raise _conflict(checks, v, f"inserted rows matching {what} ({p.text!r})")


def _check_keys(
    store: ObjectStore, d: TableDef, checks: RowChecks, v: VersionRows, files: list[FileState]
) -> None:
    """Inserted rows with a key this transaction inserts (a merge, or any write to a
    table with a primary key)."""
    if not (checks.key_rows and files):
        return
    mine = pa.concat_tables(checks.key_rows)
    on = list(checks.keys)
    cols = [col for col in d.columns if col.name in on]
    for fs in files:
        t = scan.read_one(store, d, fs, cols, None, cols)
        if t.num_rows and join(t, mine, on, "inner").num_rows:
            raise _conflict(
                checks, v, f"inserted rows with a key this transaction inserts (on {on})"
            )


def _deleted_rows(
    v: VersionRows, base: Mapping[str, FileState], record_of: _RecordOf
) -> list[FileState]:
    """The rows version ``v`` deleted, as files whose 'deletion vector' keeps only them."""
    gone: list[FileState] = []
    for fid, pos in v.deleted:
        f = record_of(fid)
        if f is not None:
            gone.append((f, BitMap(range(f.record_count)) - pos))
    for fid in v.removed:
        f = record_of(fid)
        if f is not None:
            gone.append((f, base[fid][1] if fid in base else BitMap()))
    return gone


def _check_deleted(
    store: ObjectStore, d: TableDef, checks: RowChecks, v: VersionRows, gone: list[FileState]
) -> None:
    """Deleted rows matching a SERIALIZABLE read."""
    cols = list(d.columns)
    for p in checks.reads:
        for fs in gone:
            t = scan.read_one(store, d, fs, cols, None, cols)
            if t.num_rows and scan.count_true(matches(t, p)):
                raise _conflict(
                    checks, v, f"deleted rows matching a SERIALIZABLE read ({p.text!r})"
                )


def _conflict(checks: RowChecks, v: VersionRows, why: str) -> RetryableConflict:
    return _error(
        Conflict(
            v.version,
            f"version {v.version} {why} of {checks.qualified}; re-run this transaction on "
            "the latest version",
        ),
        checks.qualified,
    )


def _error(c: Conflict, table: str) -> RetryableConflict:
    return RetryableConflict(c.message, version=c.version, objects=(("table", table),))
