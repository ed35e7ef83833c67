"""A transaction's table-data buffer: the part the data operations work on.

A :class:`~lakehouse.Transaction` owns one :class:`TableData`. It holds, per
table, the :class:`~lakehouse.data.table.TableWrite` (the row changes), the
table's files at the begin version (loaded once, when a read needs them all)
and, under SERIALIZABLE, the predicates of the data reads. The operations in
:mod:`lakehouse.data.ops` and :mod:`lakehouse.data.txnfiles` are functions
over it and use only its public members; what they need of the transaction's
*definitions* (resolve a name, look up, create or alter a definition) the
transaction hands over once as :class:`Definitions`::

    Transaction ── owns ──▶ TableData ◀── ops.append / delete / update / merge / compact ...
         │                     │  writes, files, base_files, note_read, write_file, adopt
         └── Definitions ─────▶│  (the transaction's definition calls, as public fields)
                               └── freeze() ─▶ per-table TableIntents + read predicates

Files a transaction writes are *owned* by it from the moment their name is
chosen: registered as in flight with the lakehouse (so
``remove_orphan_files`` never takes them), and deleted again if the
transaction does not commit. Files it adopts (written by Spark executors)
become owned the same way. Files it re-adds (restore, clone) belong to
older versions and are never deleted by it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyroaring import BitMap

from kvstore.objstore import ObjectStore
from lakehouse import keys
from lakehouse.data import files as datafiles
from lakehouse.data import inline as inline_files
from lakehouse.data import partitioning
from lakehouse.data.conform import conform
from lakehouse.data.pages import check_pages
from lakehouse.data.predicate import Predicate, parse_where
from lakehouse.data.scan import fetch
from lakehouse.data.table import FileState, LazyFiles, TableIntent, TableWrite, load
from lakehouse.errors import CorruptionError
from lakehouse.intent import frozen_copy
from lakehouse.model import Column, DataFile, Definition, TableDef

if TYPE_CHECKING:
    from lakehouse.context import Context

log = logging.getLogger("lakehouse")

Intents = Mapping[tuple[str, str], TableIntent]
ReadPredicates = Mapping[tuple[str, str], tuple[Predicate, ...]]


@dataclass(frozen=True)
class Definitions:
    """What the data operations use of a transaction's definitions (bound calls)."""

    #: raise if the transaction is closed (or its lakehouse)
    check_usable: Callable[[], None]
    #: ``(namespace, name)`` of a qualified name argument (``what`` names it in errors)
    qualified: Callable[[Any, str], tuple[str, str]]
    #: a definition as the transaction sees it (its own changes first), or None
    lookup: Callable[[str, str, str | None], Definition | None]
    #: raise NotFound unless an object of that kind exists
    require: Callable[[str, str, str], Definition]
    #: raise AlreadyExists if a table or view has that name
    check_free: Callable[[str, str], None]
    #: set the definition of a table at commit (create, replace, restore)
    set_table: Callable[[str, str, TableDef], None]
    #: mark a table touched (the commit records it)
    touch_table: Callable[[str, str], None]
    describe_table: Callable[[str], TableDef]
    #: the table's raw state keys as the transaction sees them
    state_items: Callable[[str, str], list[tuple[bytes, bytes]]]
    #: its state keys in some key ranges at the begin version (None: read them whole)
    state_ranges: Callable[
        [str, str, Sequence[tuple[bytes, bytes | None]]], list[tuple[bytes, bytes]] | None
    ]
    #: one raw key at the begin version (the primary-key index), and the keys
    #: ``start <= key < end`` there
    get: Callable[[bytes], bytes | None]
    scan: Callable[[bytes, bytes | None], Iterator[tuple[bytes, bytes]]]


class TableData:
    """The row changes of one transaction, per table (see the module docstring)."""

    def __init__(self, ctx: Context, defs: Definitions, *, serializable: bool) -> None:
        #: the open lakehouse's parts (data store, in-flight files, file names, views)
        self.ctx = ctx
        self.defs = defs
        self._serializable = serializable
        self._writes: dict[tuple[str, str], TableWrite] = {}
        self._base: dict[tuple[str, str], dict[str, FileState]] = {}
        #: files of some partitions only, by (namespace, table, key ranges)
        self._partial: dict[tuple[str, str, tuple[Any, ...]], dict[str, FileState]] = {}
        self._reads: dict[tuple[str, str], list[Predicate]] = {}
        #: single files of the begin version looked up by id (the key index's hits)
        self._lazy: dict[tuple[str, str], LazyFiles] = {}

    # -- tables -----------------------------------------------------------------------
    def table(self, name: str) -> TableDef:
        """The table a data operation on ``name`` works on (open, existing)."""
        self.defs.check_usable()
        ns, t = self.defs.qualified(name, "table name")
        d = self.defs.require("table", ns, t)
        assert isinstance(d, TableDef)
        return d

    def write(self, ns: str, t: str) -> TableWrite:
        """The table's buffered write (created, and the table touched, on first use)."""
        w = self._writes.get((ns, t))
        if w is None:
            w = self._writes[(ns, t)] = TableWrite(ns, t)
            self.defs.touch_table(ns, t)
        return w

    @property
    def writes(self) -> Mapping[tuple[str, str], TableWrite]:
        return MappingProxyType(self._writes)

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """One operation: if it raises, the buffer is as it was before it (files it
        wrote already are deleted when the transaction ends), so a failed
        operation changes nothing the transaction sees or commits."""
        saved = {k: w.copy() for k, w in self._writes.items()}
        reads = {k: list(v) for k, v in self._reads.items()}
        try:
            yield
        except BaseException:
            for k, w in self._writes.items():
                old = saved.get(k)
                kept = set(old.owned) if old is not None else set()
                orphans = [p for p in w.owned if p not in kept]
                if old is None:
                    if not orphans:
                        continue
                    old = TableWrite(w.ns, w.name)
                    old.owned, old.superseded = orphans, list(orphans)
                else:
                    old.owned += orphans
                    old.superseded += orphans
                saved[k] = old
            self._writes.clear()
            self._writes.update(saved)
            self._reads.clear()
            self._reads.update(reads)
            raise

    def base_files(self, ns: str, t: str) -> dict[str, FileState]:
        """The table's files at the begin version, by file id (loaded once)."""
        cached = self._base.get((ns, t))
        if cached is None:
            prefix = keys.table_state_prefix(ns, t)
            cached = self._base[(ns, t)] = load(self.defs.state_items(ns, t), prefix)
        return cached

    @property
    def loaded(self) -> Mapping[tuple[str, str], dict[str, FileState]]:
        """The tables whose base files are loaded already."""
        return MappingProxyType(self._base)

    def files(self, ns: str, t: str) -> list[FileState]:
        """The table's files as this transaction sees them, in file-id order."""
        w = self._writes.get((ns, t))
        base = self.base_files(ns, t)
        if w is None:
            return [base[k] for k in sorted(base)]
        return w.overlay(base)

    def files_for(self, d: TableDef, pred: Predicate | None) -> list[FileState]:
        """The table's files an operation restricted by ``pred`` may touch, pruned by
        partition: when ``pred`` restricts partition columns and the table is not
        loaded whole yet, only the key ranges of the matching partitions are read
        (cached per range set), so planning costs what those partitions' files cost."""
        ns, t = d.namespace, d.name
        ranges = None
        if pred is not None and (ns, t) not in self._base:
            ranges = partitioning.key_ranges(d, pred)
        if ranges is not None:
            key = (ns, t, tuple(ranges))
            base = self._partial.get(key)
            if base is None:
                items = self.defs.state_ranges(ns, t, ranges + partitioning.dv_ranges(ranges, d))
                if items is not None:
                    base = self._partial[key] = load(items, keys.table_state_prefix(ns, t))
            if base is not None:
                w = self._writes.get((ns, t))
                files = [base[k] for k in sorted(base)] if w is None else w.overlay(base)
                return partitioning.prune(d, files, pred)
        return partitioning.prune(d, self.files(ns, t), pred)

    def file_state(self, d: TableDef, fid: str) -> FileState | None:
        """File ``fid`` of ``d`` and its deleted positions as this transaction sees
        it (None: not a live file), without listing the table."""
        ns, t = d.namespace, d.name
        w = self._writes.get((ns, t))
        if w is not None:
            if fid in w.removed:
                return None
            if fid in w.added:
                dv = w.added_dvs.get(fid, BitMap()) | w.deletes.get(fid, BitMap())
                return w.added[fid], dv
        base = self._base.get((ns, t))
        if base is not None:
            fs = base.get(fid)
        else:
            lazy = self._lazy.get((ns, t))
            if lazy is None:
                lazy = self._lazy[(ns, t)] = LazyFiles(self.defs.get, ns, t)
            fs = lazy.get(fid)
        if fs is None:
            return None
        extra = w.deletes.get(fid) if w is not None else None
        return (fs[0], fs[1] | extra) if extra else fs

    # -- reads ----------------------------------------------------------------------------
    def note_read(self, d: TableDef, pred: Predicate | None) -> None:
        """Record a data read (SERIALIZABLE: the commit checks it)."""
        if self._serializable:
            if pred is None:
                pred = parse_where("TRUE", d.schema)
            self._reads.setdefault((d.namespace, d.name), []).append(pred)

    @property
    def reads(self) -> Mapping[tuple[str, str], list[Predicate]]:
        return MappingProxyType(self._reads)

    # -- files (owned from the moment their name is chosen) ----------------------------
    def write_file(
        self,
        d: TableDef,
        rows: Any,
        w: TableWrite,
        partition: tuple[Any, ...] = (),
        row_group_rows: int | None = None,
        *,
        inline: bool = False,
    ) -> DataFile:
        """Write ``rows`` as a new Parquet file of table ``d`` (durable before this
        returns); ``partition``: the values of the current spec all rows have;
        ``row_group_rows``: rows per row group (default: Arrow's). ``inline``: an
        inline file instead (:mod:`lakehouse.data.inline`), its rows in its record:
        nothing is written to storage, so nothing is owned."""
        if inline:
            payload = inline_files.encode(rows)
            file_id, _ = self.ctx.new_file_name(d.table_id)
            path = inline_files.path_of(d.table_id, file_id)
            f = inline_files.describe(path, payload, rows, d.columns)
            f = partitioning.name_file(d, f, partition)
            w.add(f, owned=False)
            return f
        data, footer = datafiles.encode_parquet(rows, row_group_rows)
        _, path = self.ctx.new_file_name(d.table_id)
        f = datafiles.describe_footer(path, len(data), footer, rows.schema, d.columns, data)
        f = partitioning.name_file(d, f, partition)
        w.owned.append(path)  # before the write: a failed put may still leave bytes
        self.ctx.inflight.add(path)
        store = self.ctx.data
        getattr(store, "put_new", store.put_if_absent)(path, data)  # durable before the commit
        w.add(f, owned=False)
        return f

    def adopt(
        self,
        d: TableDef,
        path: str,
        w: TableWrite,
        key_cols: Sequence[Column] = (),
        partition: tuple[Any, ...] | None = None,
    ) -> tuple[DataFile, pa.Table | None]:
        """Register a Parquet file someone else wrote under the data directory; with
        ``key_cols``, also return its rows' values of those columns (merge keys).
        ``partition``: the current spec's values of every row, when the writer knows
        them (Spark computed them per row); None: read from the file's rows."""
        if not isinstance(path, str) or path.startswith("/") or "://" in path:
            raise ValueError(f"data file paths are relative to the data directory, not {path!r}")
        data = fetch(self.ctx.data, path)
        pf = datafiles.open_parquet(data, path)  # the footer, parsed once
        conform(pf.schema_arrow.empty_table(), d.schema, f"data file {path}")
        check_pages(data, pf.metadata, path)  # damaged since its write: not recorded as sound
        try:  # the checksums of the bytes in hand (one read of the file, on this process)
            f = datafiles.describe_footer(
                path, len(data), pf.metadata, pf.schema_arrow, d.columns, data
            )
        except ValueError as exc:
            raise CorruptionError(f"data file {path} cannot be adopted: {exc}") from None
        if partition is None:
            partition = self._partition_of(d, data, f, path)
        f = partitioning.name_file(d, f, partition)
        values = None
        if key_cols:
            schema = pa.schema([d.schema.field(c.name) for c in key_cols])
            values = datafiles.read_file(data, f, key_cols, schema, None)
        w.add(f, owned=True)
        self.ctx.inflight.add(path)
        return f, values

    @staticmethod
    def _partition_of(d: TableDef, data: bytes, f: DataFile, path: str) -> tuple[Any, ...]:
        """The partition of the current spec every row of an adopted file is in."""
        spec = d.spec
        if spec.is_unpartitioned:
            return ()
        cols = [c for c in d.columns if c.id in {pf.source_id for pf in spec.fields}]
        schema = pa.schema([d.schema.field(c.name) for c in cols])
        rows = datafiles.read_file(data, f, cols, schema, None)
        try:
            return partitioning.values_of(d, rows)
        except ValueError as exc:
            raise ValueError(f"data file {path}: {exc}") from None

    def release_owned(self) -> None:
        """The commit is decided: our files are no longer in flight."""
        for w in self._writes.values():
            self.ctx.inflight.difference_update(w.owned)

    def discard_owned(self) -> None:
        """Not committed: delete the files this transaction wrote."""
        self.release_owned()
        for w in self._writes.values():
            _delete_all(self.ctx.data, w.owned, "written by an aborted transaction")

    def discard_superseded(self) -> None:
        """Committed: delete the files it wrote and then dropped itself (no version
        references them)."""
        for w in self._writes.values():
            _delete_all(self.ctx.data, w.superseded, "written and dropped by the same transaction")

    # -- commit ---------------------------------------------------------------------------
    def freeze(self) -> tuple[Intents, ReadPredicates]:
        """The per-table intents and read predicates, immutable."""
        return (
            frozen_copy({k: w.freeze() for k, w in self._writes.items()}),
            frozen_copy({k: tuple(v) for k, v in self._reads.items()}),
        )


def _delete_all(store: ObjectStore, paths: list[str], what: str) -> None:
    """Delete ``paths`` (best effort: what fails is left for remove_orphan_files)."""
    for path in paths:
        try:
            store.delete(path)
        except OSError as exc:
            log.warning("could not delete %s (%s): %s", path, what, exc)
    paths.clear()
