"""Which Iceberg objects under ``<url>/iceberg/`` are garbage (expiry, orphans).

Every object the metadata writer keeps (:mod:`lakehouse.iceberg.paths`) is
immutable and named by the snapshot (version) it belongs to and, for what
depends on it, by its chain ``b`` (the first snapshot of the run that computed
it). The metadata JSON ``<v>-<o'>`` lists the snapshots of chain
``max(o', the table's creation)`` only, and a chain's objects name only
objects of the same chain, delete files of its snapshots (``>= b``) and
materialised copies of files its snapshots have. So what a retained version's
metadata can reach follows from the names alone. With ``o`` the oldest retained
version, an object of a table is **kept** when:

* its table (the top folder, a table id) is one a retained version has (the
  table at ``o``, or created, renamed, restored or rolled back to later);
  everything of any other table (a dropped one) is garbage;
* a metadata JSON ``<v>-<o'>``: ``o' >= o``. One written for an older oldest
  lists expired snapshots; the writer writes ``<v>-<o>`` afresh when asked;
* a sidecar, manifest list or manifest of chain ``b`` (its remapped ``-g``
  variants included): ``b >= o``, reached or not (a writer may be writing that
  chain now; what a crash left of it is written again with the same bytes).
  A chain ``b < o`` is no retained metadata's: every writer that reads the
  oldest as ``o`` starts a chain at ``o`` or later. This is also what makes a
  crash leftover of an old chain (objects of a snapshot without its sidecar)
  and a stale writer (one that read the oldest before the expiry and writes a
  change-only sidecar of its old chain after the objects it reads are gone)
  harmless: nobody reads an old chain again, and its objects go like any;
* a positional delete file ``deletes/<u>-...`` (``-m`` and ``-g`` variants
  included): ``u >= o`` (a snapshot of a retained chain writes them at its own
  version, and reuses only those of its chain);
* a materialised data file ``data/<file id>.parquet``: while a retained version
  has that file in the table (a snapshot of a retained chain names only copies
  of files it has; a new chain finds and reuses them);
* anything whose name none of these patterns matches: left alone.

Everything else of a table (objects of chains older than ``o``, delete files of
snapshots older than ``o``, metadata JSONs of an older oldest) is garbage.
Positional delete files and materialised files that manifests of a retained
snapshot name only in ``DELETED`` entries go too: readers never open those files
(the lakehouse's own data files of such entries go with expiry just the same).

Garbage is not deleted at once: :mod:`lakehouse.maintenance` queues it
(:func:`queue_unreachable`: ``L/gc``, tagged ``iceberg:``) with the grace of
``expire_versions`` or the ``older_than`` of ``remove_orphan_files``, and its
deletion pass hands the due entries to :func:`delete_queued`, so a reader holding
a metadata JSON of an older oldest, or a writer in another process that read the
oldest before the expiry, keeps going for that long. Object names carry versions, not times, and the
object stores expose no modification time, so an orphan's age is the time since
a pass first found it unreachable. The deletion pass deletes only queued objects
that are still garbage (as the same pass's :func:`queue_unreachable` computed it
under the maintenance lock, or computed afresh when that pass queued nothing): an
object that a retained version's metadata can reach is never deleted, whatever
the clock.

The store listing comes before the lakehouse is read, so an object a writer
wrote for a table or file created after the listing's moment is never taken for
a dropped table's. A lakehouse whose ``iceberg/`` folder does not exist pays one
check; one opened on a store instance has no Iceberg objects. This module reads
only names (no sidecar, no fastavro, no pyarrow writer).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvstore.objstore import ObjectStore
from lakehouse import codec, keys
from lakehouse.data.table import file_key_id
from lakehouse.errors import NotFound, VersionExpired
from lakehouse.iceberg import paths
from lakehouse.model import DataOp, TableDef

if TYPE_CHECKING:
    from lakehouse.context import Context
    from lakehouse.view import LakehouseView

log = logging.getLogger("lakehouse.iceberg")

_TABLE_ID = re.compile(r"[0-9a-f]{32}$")
_V = r"(\d{20})"
_CHAIN = r"-b(\d{20})"
_GEN = r"(?:-g[0-9a-f]{8})?"
_STATE = re.compile(rf"metadata/{_V}{_CHAIN}\.state\.json$")
_LIST = re.compile(rf"metadata/snap-{_V}{_CHAIN}{_GEN}\.avro$")
_MANIFEST = re.compile(rf"metadata/{_V}{_CHAIN}{_GEN}-m\d+\.avro$")
_DELETES = re.compile(rf"deletes/{_V}-.+\.parquet$")
_DATA = re.compile(r"data/(.+)\.parquet$")


def store(ctx: Context) -> ObjectStore | None:
    """The lakehouse's iceberg store, or None when it can hold nothing: opened on a
    store instance, or a local lakehouse whose ``iceberg/`` folder does not exist."""
    root = ctx.layout.iceberg_url
    if root is None:
        return None
    if "://" not in root and not os.path.isdir(root):
        return None
    return paths.store(root, dict(ctx.options.storage_options))


def garbage(ctx: Context, s: ObjectStore) -> set[str]:
    """Names (under the iceberg root) of the objects no retained version can reach
    (see the module docstring)."""
    listed = s.list("")
    if not listed:
        return set()
    by_table: dict[str, list[str]] = {}
    for name in listed:
        top, sep, rest = name.partition("/")
        if sep and _TABLE_ID.match(top):
            by_table.setdefault(top, []).append(rest)
    if not by_table:
        return set()
    oldest, live = retained_files(ctx)  # read after the listing (see the docstring)
    out: set[str] = set()
    for tid, names in sorted(by_table.items()):
        if tid not in live:
            out.update(f"{tid}/{n}" for n in names)
            continue
        dead = {n for n in names if not _kept(n, oldest, live[tid])}
        out.update(f"{tid}/{n}" for n in dead)
    return out


def delete(s: ObjectStore, names: Iterable[str], still: set[str]) -> tuple[set[str], set[str]]:
    """Delete those of ``names`` that are in ``still`` (the garbage as computed now);
    returns (deleted, no longer garbage or gone). A failed delete is in neither."""
    gone: set[str] = set()
    dropped: set[str] = set()
    for name in names:
        if name not in still:
            dropped.add(name)
            continue
        try:
            s.delete(name)
            gone.add(name)
        except OSError as exc:  # stays queued for the next pass
            log.warning("could not delete Iceberg object %s: %s", name, exc)
    return gone, dropped


# -- the deletion queue (``L/gc`` of lakehouse.maintenance) ------------------------------
#: queue entries naming an Iceberg object (a name under ``<url>/iceberg/``) rather
#: than a data file
TAG = "iceberg:"


@dataclass(frozen=True)
class Found:
    """The garbage a pass computed: the iceberg store (None: it holds nothing) and the
    names of its unreachable objects."""

    store: ObjectStore | None
    names: set[str]


def find(ctx: Context) -> Found:
    """The iceberg store and its garbage now (raises OSError when the store fails)."""
    s = store(ctx)
    return Found(s, set() if s is None else garbage(ctx, s))


def queue_unreachable(ctx: Context, grace_ms: int) -> Found | None:
    """Queue the Iceberg objects no retained version can reach (a lakehouse that never
    wrote Iceberg metadata pays one check); returns what it found (None when the
    store failed) for :func:`delete_queued` of the same pass. The caller holds the
    maintenance lock."""
    try:
        found = find(ctx)
    except OSError as exc:  # the next expiry or orphan removal looks again
        log.warning("could not look for unreachable Iceberg objects: %s", exc)
        return None
    tagged = (TAG + n for n in found.names)
    queue, new = codec.enqueue_gc(ctx.db.get(keys.PENDING_GC), tagged, ctx.now_ms(), grace_ms)
    if new:
        ctx.db.put(keys.PENDING_GC, codec.encode_gc_queue(queue + new))
        log.info("%d unreachable Iceberg objects queued for deletion", len(new))
    return found


def delete_queued(
    ctx: Context, due: list[codec.QueuedFile], found: Found | None = None
) -> tuple[set[str], set[str], list[codec.QueuedFile]]:
    """Delete the Iceberg objects among the due queue entries ``due`` that are still
    garbage (``found``: the garbage this pass's :func:`queue_unreachable` computed;
    None: compute it now); returns (deleted, off the queue without deleting:
    reachable again, or gone) as queue paths, and the entries of ``due`` that are no
    Iceberg objects."""
    rest = [q for q in due if not q.path.startswith(TAG)]
    tagged = [q.path for q in due if q.path.startswith(TAG)]
    if not tagged:
        return set(), set(), rest
    if not found:
        try:
            found = find(ctx)
        except OSError as exc:  # left queued for the next pass
            log.warning("could not check queued Iceberg objects: %s", exc)
            return set(), set(), rest
    s = found.store
    if s is None:
        return set(), set(tagged), rest
    names = [p[len(TAG) :] for p in tagged]
    gone, dropped = delete(s, names, found.names)
    log.info(
        "deleted %d unreachable Iceberg objects (%d reachable again or gone)",
        len(gone),
        len(dropped),
    )
    return {TAG + n for n in gone}, {TAG + n for n in dropped}, rest


# -- what a retained version has ----------------------------------------------------------
#: attempts of retained_files when versions expire while it reads them
RETRIES = 20


def retained_files(ctx: Context) -> tuple[int, dict[str, set[str]]]:
    """The oldest retained version and, per table id any retained version has, the
    ids of every data file a retained version has in it."""
    for attempt in range(1, RETRIES + 1):
        try:
            return _retained_files(ctx)
        except VersionExpired:  # an expiry moved the oldest after it was read: again
            if attempt == RETRIES:
                raise
    raise AssertionError("unreachable")


def _retained_files(ctx: Context) -> tuple[int, dict[str, set[str]]]:
    out: dict[str, set[str]] = {}
    with ctx.db.snapshot() as snap:
        head = ctx.u64(snap, keys.HEAD)
        oldest = ctx.u64(snap, keys.OLDEST, 0)
        with ctx.at_version(oldest) as view:
            _files(view, out, None)
        for u in range(oldest + 1, head + 1):
            rec = ctx.record(u, snap.get)
            whole = rec.restores_state
            named = {
                c.name
                for c in rec.changes
                if c.kind == "table" and c.op != "drop" and c.changes_definition
            }
            for tc in rec.data:
                if tc.table_id and DataOp.RESTORE not in tc.ops:
                    out.setdefault(tc.table_id, set()).update(tc.added)
                else:  # an old record (matched by name), or a restore: read the table
                    named.add(tc.table)
            if whole or named:
                with ctx.at_version(u) as view:
                    _files(view, out, None if whole else named)
    return oldest, out


def _files(view: LakehouseView, out: dict[str, set[str]], names: set[str] | None) -> None:
    """Add the tables ``names`` (None: every table) of ``view`` and their files."""
    defs: list[TableDef] = []
    if names is None:
        for _, raw in view.raw_items(keys.TABLE_PREFIX):
            d = codec.decode_def(raw)
            if isinstance(d, TableDef):
                defs.append(d)
    else:
        for q in sorted(names):
            try:
                defs.append(view.describe_table(q))
            except NotFound:
                continue
    for d in defs:
        fids = out.setdefault(d.table_id, set())
        for k, raw in view.raw_items(keys.table_state_prefix(d.namespace, d.name)):
            if keys.is_data_file_key(k):
                fids.add(file_key_id(codec.decode_data_file(raw)))


# -- one table's objects -------------------------------------------------------------------
def _kept(n: str, oldest: int, fids: set[str]) -> bool:
    """Whether object ``n`` (relative to its table's folder) is kept (see the module
    docstring); ``fids``: the table's files in retained versions."""
    meta = paths.parse_metadata_json(n)
    if meta is not None and n.startswith("metadata/"):
        return meta[1] >= oldest
    for pattern in (_STATE, _LIST, _MANIFEST):
        if m := pattern.match(n):
            return int(m.group(2)) >= oldest
    if m := _DELETES.match(n):
        return int(m.group(1)) >= oldest
    if m := _DATA.match(n):
        return m.group(1) in fids
    return True  # not ours to judge
