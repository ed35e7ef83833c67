"""The read calls shared by transactions and read-only views.

A subclass supplies two primitives over one consistent kvstore view,
``_fetch(key)`` and ``_scan(prefix)``; everything else (listings, describe
calls, name checks, decoding) lives here once. A transaction overrides
:meth:`ReadOps._lookup` and :meth:`ReadOps._names` to merge its own buffered
changes and to record what it read (SERIALIZABLE).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from kvstore.objstore import ObjectStore
from lakehouse import codec, keys
from lakehouse.data import partitioning, record, scan
from lakehouse.data.predicate import Predicate
from lakehouse.data.scan import ScanFile
from lakehouse.data.table import FileState, load
from lakehouse.errors import DataFileMissing, LakehouseError, NotFound, StorageError
from lakehouse.model import (
    DataFile,
    Definition,
    NamespaceDef,
    TableDef,
    TableStats,
    ViewDef,
    check_name,
    split_qualified,
)
from lakehouse.pins import Pins, StreamPin


class ReadOps:
    """``list_*`` / ``describe_*`` over one lakehouse version."""

    _name_limit: int
    #: the version read (a view's version, a transaction's base)
    version: int
    #: the lakehouse's registry of readers whose data files expiry must keep
    _pins: Pins | None = None

    # -- primitives (subclasses) ---------------------------------------------------
    def _fetch(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def _scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        raise NotImplementedError

    def _scan_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Keys ``start <= key < end`` (None: to the end of the keyspace)."""
        raise NotImplementedError

    def _check_usable(self) -> None:
        """Raise if the view or transaction is closed."""

    # -- hooks (a transaction overlays its own changes) --------------------------------
    def _lookup(self, kind: str, ns: str, name: str | None) -> Definition | None:
        data = self._fetch(keys.object_key(kind, ns, name))
        return None if data is None else codec.decode_def(data)

    def _names(self, kind: str, ns: str | None) -> list[str]:
        """Sorted plain names: namespaces (ns None), or the tables/views of ``ns``."""
        if ns is None:
            return [keys.parse_namespace_key(k) for k, _ in self._scan(keys.NAMESPACE_PREFIX)]
        prefix = keys.children_prefix(kind, ns)
        return [keys.child_name(prefix, k) for k, _ in self._scan(prefix)]

    def _state_items(self, ns: str, table: str) -> list[tuple[bytes, bytes]]:
        return list(self._scan(keys.table_state_prefix(ns, table)))

    # -- helpers -------------------------------------------------------------------------
    def _ns_name(self, name: Any) -> str:
        return check_name(name, "namespace name", self._name_limit, dots=False)

    def _qualified(self, name: Any, what: str) -> tuple[str, str]:
        return split_qualified(name, what, self._name_limit)

    def _require_namespace(self, ns: str) -> NamespaceDef:
        d = self._lookup("namespace", ns, None)
        if d is None:
            raise NotFound(f"namespace {ns!r} does not exist")
        assert isinstance(d, NamespaceDef)
        return d

    # -- public read calls -----------------------------------------------------------------
    def list_namespaces(self) -> list[str]:
        """Every namespace name, sorted."""
        self._check_usable()
        return self._names("namespace", None)

    def list_tables(self, namespace: str) -> list[str]:
        """Plain names of the tables in ``namespace``, sorted (NotFound if it is missing)."""
        self._check_usable()
        ns = self._ns_name(namespace)
        self._require_namespace(ns)
        return self._names("table", ns)

    def list_views(self, namespace: str) -> list[str]:
        """Plain names of the views in ``namespace``, sorted (NotFound if it is missing)."""
        self._check_usable()
        ns = self._ns_name(namespace)
        self._require_namespace(ns)
        return self._names("view", ns)

    def describe_namespace(self, name: str) -> NamespaceDef:
        self._check_usable()
        return self._require_namespace(self._ns_name(name))

    def describe_table(self, name: str) -> TableDef:
        """The table ``"ns.table"``: ``.name``, ``.schema`` (pyarrow), ``.properties``, ..."""
        self._check_usable()
        ns, t = self._qualified(name, "table name")
        d = self._lookup("table", ns, t)
        if d is None:
            self._require_namespace(ns)
            raise NotFound(f"table {ns}.{t} does not exist")
        assert isinstance(d, TableDef)
        return d

    def describe_view(self, name: str) -> ViewDef:
        """The view ``"ns.view"``: ``.name``, ``.sql``, ``.properties``, ``.referenced``."""
        self._check_usable()
        ns, v = self._qualified(name, "view name")
        d = self._lookup("view", ns, v)
        if d is None:
            self._require_namespace(ns)
            raise NotFound(f"view {ns}.{v} does not exist")
        assert isinstance(d, ViewDef)
        return d

    def namespace_exists(self, name: str) -> bool:
        self._check_usable()
        return self._lookup("namespace", self._ns_name(name), None) is not None

    def table_exists(self, name: str) -> bool:
        self._check_usable()
        ns, t = self._qualified(name, "table name")
        return self._lookup("table", ns, t) is not None

    def view_exists(self, name: str) -> bool:
        self._check_usable()
        ns, v = self._qualified(name, "view name")
        return self._lookup("view", ns, v) is not None

    # -- table data ---------------------------------------------------------------------
    def _data_store(self) -> ObjectStore:
        raise NotImplementedError

    def _data_url(self) -> str | None:
        return None

    @property
    def data_url(self) -> str | None:
        """The URL of the data directory (None when opened on a store instance)."""
        return self._data_url()

    def _table_files(self, ns: str, t: str) -> list[FileState]:
        return self._files_within(ns, t, self._file_bounds(ns, t))

    def _file_bounds(self, ns: str, t: str) -> tuple[str, str] | None:
        """The table's plain-file-id bounds at this version (see keys.file_bound_key)."""
        raw = self._fetch(keys.file_bound_key(ns, t))
        return None if raw is None else keys.decode_file_bounds(raw)

    def _files_within(self, ns: str, t: str, bounds: tuple[str, str] | None) -> list[FileState]:
        """Every file of the table: plain ids between ``bounds``, partitioned ids whole."""
        prefix = keys.table_state_prefix(ns, t)
        if bounds is None:
            items: list[tuple[bytes, bytes]] = self._state_items(ns, t)
        else:
            items = []
            for kind in (b"D/", b"F/"):
                ranges = keys.plain_file_ranges(ns, t, kind, bounds)
                ranges.append((prefix + kind + b"p", prefix + kind + b"q"))
                for start, end in ranges:
                    items.extend(self._scan_range(start, end))
        files = load(items, prefix)
        return [files[k] for k in sorted(files)]

    def _plan_files(self, d: TableDef, pred: Predicate | None) -> list[FileState]:
        """The files a read of ``d`` restricted by ``pred`` may need: found by partition
        first (a few key ranges of table state, see lakehouse.data.partitioning), so
        planning costs what the matching partitions' files cost."""
        bounds = self._file_bounds(d.namespace, d.name)
        ranges = partitioning.key_ranges(d, pred, bounds)
        if ranges is None:
            files = self._files_within(d.namespace, d.name, bounds)
        else:
            items: list[tuple[bytes, bytes]] = []
            for start, end in ranges + partitioning.dv_ranges(ranges, d):
                items.extend(self._scan_range(start, end))
            loaded = load(items, keys.table_state_prefix(d.namespace, d.name))
            files = [loaded[k] for k in sorted(loaded)]
        return partitioning.prune(d, files, pred)

    def _note_data_read(self, d: TableDef, pred: Predicate | None) -> None:
        """Record a data read (a SERIALIZABLE transaction checks it at commit)."""

    def read(
        self, table: str, *, columns: Sequence[str] | None = None, where: Any = None
    ) -> pa.Table:
        """The table's rows (deleted ones excluded) as a ``pyarrow.Table``.

        ``columns`` projects; ``where`` (SQL text or a ``pyarrow.compute.Expression``)
        filters, after files are pruned by their column bounds.
        """
        d = self.describe_table(table)
        pred = scan.predicate(d, where)
        self._note_data_read(d, pred)
        files = self._plan_files(d, pred)
        try:
            return scan.read(self._data_store(), d, files, columns, pred)
        except DataFileMissing as exc:
            err = self._missing(exc)
            if err is exc:
                raise
            raise err from exc

    def scan_batches(
        self, table: str, *, columns: Sequence[str] | None = None, where: Any = None
    ) -> pa.RecordBatchReader:
        """The same rows as :meth:`read`, streamed one data file at a time."""
        d = self.describe_table(table)
        pred = scan.predicate(d, where)
        self._note_data_read(d, pred)
        files = self._plan_files(d, pred)
        reader = scan.scan_batches(self._data_store(), d, files, columns, pred)
        # the stream outlives this call (and the head view of lh.scan_batches):
        # its files stay pinned against expiry until it ends or is dropped
        pin = StreamPin(self.version, (f.path for f, _ in files if f.is_stored))
        if self._pins is not None:
            self._pins.add(pin)
        return pa.RecordBatchReader.from_batches(reader.schema, self._stream(reader, pin))

    def _stream(self, reader: pa.RecordBatchReader, pin: StreamPin) -> Iterator[pa.RecordBatch]:
        try:
            yield from reader
        except DataFileMissing as exc:
            err = self._missing(exc)
            if err is exc:
                raise
            raise err from exc
        except OSError as exc:  # the storage failed mid-stream, after the call returned
            where = self._data_url() or "the lakehouse's data"
            raise StorageError(f"{where}: {type(exc).__name__}: {exc}") from exc
        finally:
            pin.release()

    def _missing(self, exc: DataFileMissing) -> LakehouseError:
        """What a read that found one of its data files gone raises: here the
        :class:`DataFileMissing` itself (damage); a view whose version has expired
        meanwhile raises VersionExpired instead, a transaction whose base version
        has expired RetryableConflict."""
        return exc

    def table_stats(self, table: str) -> TableStats:
        """Rows a read returns, files, rows marked deleted in them, bytes."""
        d = self.describe_table(table)
        self._note_data_read(d, None)  # a count reveals every row
        return scan.stats(self._table_files(d.namespace, d.name))

    def file_states(self, table: str) -> list[FileState]:
        """The table's live data files, each with its deleted positions (a pyroaring
        ``BitMap``), in file-id order: what a read of ``table`` reads."""
        d = self.describe_table(table)
        self._note_data_read(d, None)
        return self._table_files(d.namespace, d.name)

    def list_data_files(self, table: str) -> list[DataFile]:
        """The table's data files with rows, bytes, deleted rows and column bounds."""
        d = self.describe_table(table)
        self._note_data_read(d, None)  # counts and bounds reveal the rows
        names = {c.id: (c.name, d.schema.field(c.name).type) for c in d.columns}
        return [
            replace(
                f,
                deleted_rows=len(dv),
                stats=record.user_stats(f, names),
                partition=partitioning.partition_dict(d, f),
            )
            for f, dv in self._table_files(d.namespace, d.name)
        ]

    def scan_plan(self, table: str, *, where: Any = None) -> list[ScanFile]:
        """Files and deletion vectors to read ``table`` with another engine (Spark).

        ``where`` (as :meth:`read`): only the files that may hold a matching row,
        pruned by partition (a few key ranges) and column bounds; the engine still
        applies the condition to their rows."""
        d = self.describe_table(table)
        pred = scan.predicate(d, where)
        self._note_data_read(d, pred)
        if pred is None:
            states = self._table_files(d.namespace, d.name)
        else:
            states = scan.pruned(d, self._plan_files(d, pred), pred)
        base = self._data_url()
        out = []
        for f, dv in states:
            if len(dv) >= f.record_count:
                continue
            in_file = dict(f.columns)
            cols = {c.name: in_file[c.id] for c in d.columns if c.id in in_file}
            if not f.columns:
                cols = {c.name: c.name for c in d.columns}
            url = f.path if f.is_external or base is None else f"{base}/{f.path}"
            out.append(
                ScanFile(
                    f.path,
                    url,
                    f.record_count,
                    dv,
                    cols,
                    d.schema,
                    f.size,
                    f.footer_size,
                    f.footer_crc,
                    f.crc,
                    f.inline,
                )
            )
        return out
