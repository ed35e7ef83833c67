"""Lakehouse transactions: buffered changes, a read set, reads that see both.

A transaction begins at version ``v``: it holds a kvstore snapshot of the
lakehouse as of ``v`` and writes nothing until :meth:`Transaction.commit`.
Each change is buffered per object as ``(definition at v, definition now)``;
reads consult that buffer first, so a transaction sees its own changes
(``create_table`` then ``list_tables`` shows the new table). Under
SERIALIZABLE every read is also recorded: the objects looked up (including
ones found missing) and the listings taken. At commit the buffer is frozen
once into a :class:`~lakehouse.intent.TxnIntent`; the commit protocol
(:mod:`lakehouse.commit`) turns it into ``ObjectChange`` records, checks both
sets against the versions committed since ``v`` and returns a
:class:`~lakehouse.intent.CommitOutcome` the transaction keeps::

    lh.begin()  ── reads (snapshot at v + own changes) ── writes (buffered)
        │                     │ SERIALIZABLE: read set
        └── commit() ── rebase over v+1..w ── write version w+1 ── close
                        RetryableConflict / IncompatibleConflict

A transaction has three parts:

- the definition changes (create / alter / drop of namespaces, tables and
  views; the calls are inherited from :class:`lakehouse.ddl.DefinitionOps`),
  buffered in its :class:`~lakehouse.defbuffer.DefinitionBuffer`: a
  :class:`~lakehouse.defbuffer.Pending` per object touched, raw state
  writes, and the SERIALIZABLE read set (objects looked up, listings taken);
- the row changes in its :class:`~lakehouse.data.buffer.TableData` (a
  ``TableWrite`` per table, the base files, the SERIALIZABLE read
  predicates, the files it owns). The data operations (:mod:`lakehouse.data.ops`,
  :mod:`lakehouse.data.txnfiles`) are functions over it; what they need of
  the definitions is handed to it once as
  :class:`~lakehouse.data.buffer.Definitions` (bound calls);
- this module: the snapshot, the status, freezing both buffers into the
  intent, and the outcome.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

import kvstore
from kvstore.objstore import ObjectStore
from lakehouse import keys
from lakehouse.data import compaction, keyindex, merge, ops, txnfiles
from lakehouse.data.buffer import Definitions, TableData
from lakehouse.data.conform import conform, to_table
from lakehouse.data.predicate import Predicate
from lakehouse.data.table import FileState, LazyFiles
from lakehouse.ddl import DefinitionOps
from lakehouse.defbuffer import DefinitionBuffer, Pending
from lakehouse.errors import (
    ClosedError,
    DataFileMissing,
    LakehouseError,
    RetryableConflict,
    one_hierarchy,
)
from lakehouse.intent import EMPTY, CommitOptions, CommitOutcome, TxnIntent, frozen_copy
from lakehouse.model import (
    CompactResult,
    Definition,
    Isolation,
    MergeResult,
    TableDef,
)
from lakehouse.pins import Pins, state_paths

if TYPE_CHECKING:
    from lakehouse.context import Context

log = logging.getLogger("lakehouse")

#: the options of a plain transaction (immutable, so shared)
_PLAIN = CommitOptions()


@one_hierarchy
class Transaction(DefinitionOps):
    """A lakehouse transaction; create with :meth:`Lakehouse.begin`."""

    def __init__(
        self,
        ctx: Context,
        snapshot: kvstore.Snapshot,
        version: int,
        isolation: Isolation,
        txn_id: str,
        app_id: str | None = None,
        app_version: int = 0,
        *,
        pins: Pins | None = None,
        commit: Callable[[TxnIntent, CommitOptions], CommitOutcome],
    ) -> None:
        self._ctx = ctx
        #: runs the commit protocol (the lakehouse's, which translates fencing)
        self._run_commit = commit
        self._snap = snapshot
        self._name_limit = ctx.name_limit
        #: the version this transaction began at
        self.version = version
        #: the oldest version whose data it uses: its base, or older after a
        #: restore_table / clone_table from an older version (commit checks it)
        self.oldest_version_read = version
        self.isolation = isolation
        self.id = txn_id
        self._serializable = isolation is Isolation.SERIALIZABLE
        #: the objects touched, raw state writes, the read set (see lakehouse.defbuffer)
        self._defs = DefinitionBuffer(
            snapshot.get, snapshot.scan_prefix, serializable=self._serializable
        )
        self._status = "open"
        self._started = ctx.monotonic()
        self._lock = threading.Lock()
        #: how the commit protocol runs this transaction (rollback and export set it)
        self.commit_options = _PLAIN
        #: the row changes, per table (see lakehouse.data.buffer); made on first use
        self._table_data: TableData | None = None
        #: idempotent writes (see Lakehouse.begin)
        self.app_id = app_id
        self.app_version = app_version
        #: what the commit did (None before commit)
        self._outcome: CommitOutcome | None = None
        if pins is not None:  # expiry keeps its base's files (see lakehouse.pins)
            self._pins = pins
            pins.add(self)

    @property
    def _tables(self) -> TableData:
        """The row changes, per table (see lakehouse.data.buffer)."""
        if self._table_data is None:
            self._table_data = TableData(
                self._ctx,
                Definitions(
                    check_usable=self._check_usable,
                    qualified=self._qualified,
                    lookup=self._lookup,
                    require=self._require,
                    check_free=self._check_free,
                    set_table=self._set_table,
                    touch_table=self._touch_table,
                    describe_table=self.describe_table,
                    state_items=self._state_items,
                    state_ranges=self._state_ranges,
                    get=self._snap.get,
                    scan=self._snap.scan,
                ),
                serializable=self._serializable,
            )
        return self._table_data

    # -- state ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The lakehouse this transaction belongs to."""
        return self._ctx.layout.label

    @property
    def status(self) -> str:
        """``"open"``, ``"committed"`` or ``"rolled back"`` (also after a conflict)."""
        return self._status

    def _check_usable(self) -> None:
        if self._status != "open":
            raise ClosedError(f"the transaction is {self._status}; begin a new one")
        self._ctx.check_open()

    def pinned_paths(self) -> set[str] | None:
        """The base version's data files, which expiry keeps while this is open
        (see lakehouse.pins); None once it committed or rolled back."""
        return None if self._status != "open" else state_paths(self._snap)

    def _missing(self, exc: DataFileMissing) -> LakehouseError:
        oldest = self._ctx.oldest()
        if self.oldest_version_read < oldest:  # its base, or a version it restored from
            return RetryableConflict(
                f"version {self.oldest_version_read}, whose data this transaction uses "
                f"(base version {self.version}), has expired (the oldest retained version "
                f"is {oldest}); re-run it",
                version=oldest,
            )
        return exc

    # -- read primitives: the snapshot at v, overlaid with own changes -------------------
    def _fetch(self, key: bytes) -> bytes | None:
        return self._snap.get(key)

    def _scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self._snap.scan_prefix(prefix)

    def _lookup(self, kind: str, ns: str, name: str | None) -> Definition | None:
        return self._defs.lookup(kind, ns, name)

    def _names(self, kind: str, ns: str | None) -> list[str]:
        return self._defs.names(kind, ns, super()._names(kind, ns))

    def _state_items(self, ns: str, table: str) -> list[tuple[bytes, bytes]]:
        return self._defs.state_items(ns, table)

    def _state_ranges(
        self, ns: str, table: str, ranges: Sequence[tuple[bytes, bytes | None]]
    ) -> list[tuple[bytes, bytes]] | None:
        """The table's state keys in ``ranges`` at the begin version; None when this
        transaction changes the table's raw state (read it whole then)."""
        if self._defs.has_state_writes(ns, table):
            return None
        out: list[tuple[bytes, bytes]] = []
        for start, end in ranges:
            out.extend(self._snap.scan(start, end))
        return out

    # -- buffering ------------------------------------------------------------------------
    def _touch(self, kind: str, ns: str, name: str | None) -> Pending:
        return self._defs.touch(kind, ns, name)

    def _clear_state(self, state_keys: Iterable[bytes]) -> None:
        self._defs.clear_state(state_keys)

    def apply_state(
        self,
        target: Mapping[bytes, bytes],
        *,
        current: Mapping[bytes, bytes] | None = None,
    ) -> int:
        """Buffer the raw changes that turn lakehouse state ``current`` (every
        definition and table-state key, as :attr:`keys.STATE_PREFIXES` scans give
        it; default: this transaction's state at its begin version) into
        ``target``; returns how many keys differ. Rollback and export build their
        versions with it; the definitions it writes are recorded as create /
        alter / drop like any other."""
        self._check_usable()
        if current is None:
            current = {k: v for p in keys.STATE_PREFIXES for k, v in self._scan(p)}
        return self._defs.apply_state(current, target)

    @property
    def _rollback_of(self) -> int | None:
        return self.commit_options.rollback_of

    # -- table data: the plumbing lakehouse.data.ops uses -------------------------------------
    def _data_store(self) -> ObjectStore:
        return self._ctx.data

    def _data_url(self) -> str | None:
        return self._ctx.layout.data_url

    def _touch_table(self, ns: str, t: str) -> None:
        self._touch("table", ns, t)

    def _set_table(self, ns: str, t: str, d: TableDef) -> None:
        self._touch("table", ns, t).final = d

    def _table_files(self, ns: str, t: str) -> list[FileState]:
        return self._tables.files(ns, t)

    def _plan_files(self, d: TableDef, pred: Predicate | None) -> list[FileState]:
        return self._tables.files_for(d, pred)

    def _note_data_read(self, d: TableDef, pred: Predicate | None) -> None:
        self._tables.note_read(d, pred)

    def _index_primary_key(self, d: TableDef) -> None:
        with self._tables.atomic():
            keyindex.rebuild(self._tables, d, self._tables.write(d.namespace, d.name))

    # -- table data: public operations (see lakehouse.data.ops) ---------------------------------
    def append(self, table: str, data: Any, *, on: Sequence[str] | None = None) -> int:
        """Add rows (a pyarrow Table/RecordBatch/RecordBatchReader or pandas DataFrame).

        ``on``: the rows are a merge's inserts by these key columns (as ``add_files``'s
        ``on``): a concurrent commit inserting one of their keys conflicts."""
        with self._tables.atomic():
            return ops.append(self._tables, table, data, on)

    def overwrite(self, table: str, data: Any, *, where: Any = None) -> int:
        """Replace all rows, or only those matching ``where`` (new rows must match it)."""
        with self._tables.atomic():
            return ops.overwrite(self._tables, table, data, where)

    def replace_partitions(self, table: str, data: Any) -> int:
        """Replace every row of each partition ``data`` has rows in; other partitions
        are untouched (Spark's dynamic partition overwrite). On an unpartitioned
        table it is :meth:`overwrite`. Returns the rows written."""
        with self._tables.atomic():
            return ops.replace_partitions(self._tables, table, data)

    def delete(self, table: str, where: Any) -> int:
        """Delete the rows matching ``where`` (deletion vectors; no file is rewritten)."""
        with self._tables.atomic():
            return ops.delete(self._tables, table, where)

    def update(self, table: str, where: Any, values: Mapping[str, Any]) -> int:
        """Set ``values`` ({column: SQL expression or literal}) on the rows matching ``where``."""
        with self._tables.atomic():
            return ops.update(self._tables, table, where, values)

    def replace_rows(self, table: str, positions: Any, rows: Any, *, op: str = "update") -> int:
        """Replace rows by position: ``rows[i]`` (anything ``append`` takes, matched
        to the table's schema) is the new version of the live row at
        ``positions[i]``, an Arrow table of ``path`` (a data file, as
        ``list_data_files`` names it) and ``position`` (int64). The old rows are
        deleted as updated and the new ones written (inlined when small) as their
        new versions: the change feed reports update pre- and post-images; primary
        keys are checked after the old rows are gone. ``op``: ``"update"`` or
        ``"merge"`` (the conflict rules of that operation). ValueError, nothing
        changed, for an unknown path, a position past its file's rows, already
        deleted or given twice, or a length mismatch. Returns the rows written."""
        with self._tables.atomic():
            return ops.replace_rows(self._tables, table, positions, rows, op)

    def merge(
        self,
        table: str,
        data: Any,
        on: Sequence[str] | str | None = None,
        *,
        when_matched: str = "update",
        when_not_matched: str = "insert",
    ) -> MergeResult:
        """Upsert ``data`` by the key columns ``on`` (default: the table's primary key,
        whose index then finds the matched rows without reading the table)."""
        with self._tables.atomic():
            return merge.merge(self._tables, table, data, on, when_matched, when_not_matched)

    def compact(
        self,
        table: str,
        *,
        target_file_bytes: int | None = None,
        progress: Callable[[int, int], None] | None = None,
        where: Any = None,
        partition: Mapping[str, Any] | None = None,
        min_files: int | None = None,
    ) -> CompactResult:
        """Rewrite small files and files with deleted rows into fewer files, per
        partition; with sort keys, cluster each partition's rows across its files
        (see docs/lakehouse.md, "Compaction and clustering").

        ``target_file_bytes``: default the table property
        ``compaction.target-file-bytes``, else 64 MiB. ``where`` (naming only
        partition columns) or ``partition`` (a ``DataFile.partition`` dict) limits it
        to those partitions. ``min_files=N``: incremental, as automatic compaction
        runs it (only small files are merged, N or more of one size tier at a time,
        and files whose deleted fraction reaches the table property
        ``compaction.delete-threshold`` are rewritten; ranges may still overlap).
        Inlined rows (inline files) are always moved into Parquet files, a lone
        inline file too; with ``min_files`` only once the scope holds
        ``inline.flush_rows`` live inlined rows or ``min_files`` inline files
        (docs/lakehouse.md, "Flushing inlined rows"). ``progress(done, total)`` is
        called as the files being rewritten are read (bytes read so far, bytes of
        those files in all)."""
        with self._tables.atomic():
            return compaction.compact(
                self._tables, table, target_file_bytes, progress, where, partition, min_files
            )

    def add_files(
        self,
        table: str,
        paths: Sequence[str],
        *,
        on: Sequence[str] | None = None,
        updates: bool = False,
        partitions: Sequence[tuple[Any, ...]] | None = None,
        replace_partitions: bool = False,
    ) -> int:
        """Register Parquet files already written under the data directory (Spark).

        ``updates=True``: the files hold new versions of rows this transaction
        deleted with ``delete_rows(..., updated=True)`` (the change feed reports
        them as update post-images). For partitioned tables (used by
        :mod:`lakehouse.spark`): ``partitions``, one tuple of current-spec values per
        file, when the writer knows them (else each file's rows are read to find
        its partition, which must be one); ``replace_partitions=True``: the files
        replace every row of the partitions they hold, as :meth:`replace_partitions`."""
        if isinstance(paths, str) or not hasattr(paths, "__iter__"):
            raise TypeError(f"paths must be a list of str, not {type(paths).__name__}")
        with self._tables.atomic():
            return ops.add_files(
                self._tables,
                table,
                list(paths),
                on,
                bool(updates),
                None if partitions is None else [tuple(p) for p in partitions],
                bool(replace_partitions),
            )

    def lookup_keys(self, table: str, keys: Any) -> pa.Table:
        """Where the live rows with these primary keys are, as this transaction sees
        the table: ``keys`` holds the key columns (a pyarrow Table or anything
        ``append`` takes); returns the keys found, each with ``path`` (the data
        file, as ``list_data_files`` names it; ``delete_rows`` takes it) and
        ``position``. Found through the key index, reading no data file."""
        with self._tables.atomic():
            d = self._tables.table(table)
            if not d.primary_key:
                raise ValueError(f"{d.qualified_name} has no primary key to look up")
            schema = pa.schema([d.schema.field(n) for n in d.primary_key])
            rows = conform(to_table(keys, "the keys"), schema, "the keys")
            self._tables.note_read(d, merge.key_predicate(rows, list(d.primary_key)))
            return keyindex.lookup(self._tables, d, rows)

    def delete_rows(
        self,
        table: str,
        positions: Mapping[str, Iterable[int]],
        *,
        op: str = "delete",
        updated: bool = False,
    ) -> int:
        """Mark row positions deleted, keyed by data file path (as ``list_data_files``).

        Each file's positions are a pyroaring ``BitMap``, a numpy integer array, an
        ``array.array`` or pyarrow array of integers (all taken whole, no Python step
        per position) or any iterable of ints (``dv.from_positions``).
        ``op`` names the operation the deletion belongs to for the conflict rules
        (``"update"`` when new versions of the rows are added with ``add_files``:
        then an overlap with a concurrent delete is a conflict, not a union).
        ``updated=True``: the rows are replaced by new versions (``add_files(...,
        updates=True)``), which the change feed reports as update pre-images."""
        with self._tables.atomic():
            return ops.delete_rows(self._tables, table, positions, op, bool(updated))

    def remove_files(self, table: str, paths: Iterable[str]) -> int:
        """Drop whole data files from the table."""
        if isinstance(paths, str) or not hasattr(paths, "__iter__"):
            raise TypeError(f"paths must be a list of str, not {type(paths).__name__}")
        with self._tables.atomic():
            return ops.remove_files(self._tables, table, paths)

    def data_dir(self, table: str) -> str:
        """The directory (relative to the data directory) of ``table``'s new files."""
        return self._tables.table(table).table_id

    def new_data_path(self, table: str) -> str:
        """A fresh, never-repeating relative path for one new data file of ``table``."""
        return self._ctx.new_file_name(self._tables.table(table).table_id)[1]

    def restore_table(self, table: str, version: int) -> None:
        """Make ``table`` (schema, properties, rows) what it was at ``version``."""
        txnfiles.restore_table(self._tables, table, version)
        self.oldest_version_read = min(self.oldest_version_read, version)

    def clone_table(self, source: str, target: str, *, version: int | None = None) -> None:
        """Create ``target`` sharing ``source``'s data files (no copy)."""
        txnfiles.clone_table(self._tables, source, target, version)
        if version is not None:
            self.oldest_version_read = min(self.oldest_version_read, version)

    # -- outcome -----------------------------------------------------------------------------
    def _freeze(self) -> TxnIntent:
        """The buffer as the immutable value the commit protocol works from."""
        # the tables the SERIALIZABLE data reads looked at, as seen now (first: a
        # lookup of a table not touched records a read, which is there already)
        read_tables: dict[tuple[str, str], TableDef] = {}
        data = self._table_data
        if data is None:  # no row touched (definitions only): nothing to freeze
            table_writes, data_reads, loaded = EMPTY, EMPTY, {}
        else:
            table_writes, data_reads = data.freeze()
            loaded = dict(data.loaded)
        for ns, t in data_reads:
            d = self._lookup("table", ns, t)
            if isinstance(d, TableDef):
                read_tables[(ns, t)] = d
        defs = self._defs.freeze()  # after the lookups above: they are reads too
        snap_get = self._snap.get

        def base_files(ns: str, t: str) -> Mapping[str, FileState]:
            """A table's files at the begin version: loaded already if a read needed
            them all, else looked up one by one."""
            files = loaded.get((ns, t))
            return files if files is not None else LazyFiles(snap_get, ns, t)

        return TxnIntent(
            version=self.version,
            isolation=self.isolation,
            txn_id=self.id,
            started=self._started,
            oldest_version_read=self.oldest_version_read,
            app=None if self.app_id is None else (self.app_id, self.app_version),
            touched=defs.touched,
            state_writes=defs.state_writes,
            state_tables=defs.state_tables,
            reads=defs.reads,
            listings=defs.listings,
            table_writes=table_writes,
            data_reads=data_reads,
            read_tables=frozen_copy(read_tables),
            base_files=base_files,
        )

    @property
    def skipped(self) -> bool:
        """True when the commit found app_version already recorded and wrote nothing."""
        return self._outcome is not None and self._outcome.skipped

    @property
    def attempts(self) -> int:
        """Commit attempts made (1 when the first attempt won; 0 before commit or
        when read-only)."""
        return 0 if self._outcome is None else self._outcome.attempts

    @property
    def rebased_over(self) -> list[int]:
        """Versions committed by others that this transaction was rebased over."""
        return [] if self._outcome is None else list(self._outcome.rebased_over)

    @property
    def committed_version(self) -> int | None:
        """The version the commit created (None before commit / when nothing was written)."""
        return None if self._outcome is None else self._outcome.committed_version

    def commit(self) -> int:
        """Commit; returns the version created (the begin version when nothing changed).

        Raises :class:`RetryableConflict` or :class:`IncompatibleConflict`; the
        transaction is closed either way and nothing of it is visible after a
        conflict.
        """
        self._check_usable()
        with self._lock:
            outcome = "rolled back"
            try:
                done = self._outcome = self._run_commit(self._freeze(), self.commit_options)
                if done.error is not None:
                    raise done.error
                outcome = "committed"
                if done.skipped and self._table_data is not None:
                    self._table_data.discard_owned()
                return done.version
            finally:
                self._status = outcome
                self._snap.close()
                if self._table_data is None:
                    pass
                elif outcome != "committed":
                    self._table_data.discard_owned()
                else:
                    self._table_data.release_owned()
                    self._table_data.discard_superseded()

    def rollback(self) -> None:
        """Discard the buffered changes (and the data files written for them). Idempotent."""
        if self._status == "open":
            self._status = "rolled back"
            self._snap.close()
            if self._table_data is not None:
                self._table_data.discard_owned()

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._status != "open":
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()

    def __repr__(self) -> str:
        return (
            f"<lakehouse.Transaction {self.isolation.name} at version {self.version}, "
            f"{self._status}, {len(self._defs)} objects touched>"
        )
