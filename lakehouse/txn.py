"""Lakehouse transactions: buffered changes, a read set, reads that see both.

A transaction begins at version ``v``: it holds a kvstore snapshot of the
lakehouse as of ``v`` and writes nothing until :meth:`Transaction.commit`.
Each change is buffered per object as ``(definition at v, definition now)``;
reads consult that buffer first, so a transaction sees its own changes
(``create_table`` then ``list_tables`` shows the new table). Under
SERIALIZABLE every read is also recorded: the objects looked up (including
ones found missing) and the listings taken. The commit protocol
(:mod:`lakehouse.commit`) turns the buffer into ``ObjectChange`` records and
checks both sets against the versions committed since ``v``::

    lh.begin()  ── reads (snapshot at v + own changes) ── writes (buffered)
        │                     │ SERIALIZABLE: read set
        └── commit() ── rebase over v+1..w ── write version w+1 ── close
                        RetryableConflict / IncompatibleConflict
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import kvstore
from lakehouse import codec, keys
from lakehouse.errors import AlreadyExists, ClosedError, NamespaceNotEmpty, NotFound
from lakehouse.model import (
    DataFile,
    Definition,
    Isolation,
    NamespaceDef,
    TableDef,
    ViewDef,
    assign_columns,
    check_keys,
    check_name,
    check_properties,
    check_schema,
    evolve_properties,
    schema_to_ipc,
)
from lakehouse.reads import ReadOps

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse


@dataclass
class Pending:
    """One object this transaction touched: its definition at ``v`` and now."""

    kind: str
    ns: str
    name: str | None
    base: Definition | None
    base_bytes: bytes | None
    final: Definition | None

    @property
    def key(self) -> bytes:
        return keys.object_key(self.kind, self.ns, self.name)

    @property
    def qualified(self) -> str:
        return self.ns if self.name is None else f"{self.ns}.{self.name}"


class Transaction(ReadOps):
    """A lakehouse transaction; create with :meth:`Lakehouse.begin`."""

    def __init__(
        self,
        lh: Lakehouse,
        snapshot: kvstore.Snapshot,
        version: int,
        isolation: Isolation,
        txn_id: str,
    ) -> None:
        self._lh = lh
        self._snap = snapshot
        self._name_limit = lh.definition.max_name_length
        #: the version this transaction began at
        self.version = version
        self.isolation = isolation
        self.id = txn_id
        self._serializable = isolation is Isolation.SERIALIZABLE
        self._pending: dict[tuple[str, str], Pending] = {}
        self._state_writes: dict[bytes, bytes | None] = {}
        self._state_tables: set[tuple[str, str]] = set()
        self._files_added: list[str] = []
        self._reads: set[tuple[str, str]] = set()
        self._base_bytes: dict[tuple[str, str], bytes | None] = {}
        self._listings: set[tuple[str, str]] = set()
        self._status = "open"
        self._started = lh._monotonic()
        self._lock = threading.Lock()
        # filled by the commit protocol
        self._rollback_of: int | None = None
        self._source: dict[str, Any] | None = None
        self._exclusive = False
        self._force = False
        #: commit attempts made (1 when the first attempt won)
        self.attempts = 0
        #: versions committed by others that this transaction was rebased over
        self.rebased_over: list[int] = []
        #: the version the commit created (None before commit / when read-only)
        self.committed_version: int | None = None

    # -- state ------------------------------------------------------------------------
    @property
    def status(self) -> str:
        """``"open"``, ``"committed"`` or ``"rolled back"`` (also after a conflict)."""
        return self._status

    def _check_usable(self) -> None:
        if self._status != "open":
            raise ClosedError(f"the transaction is {self._status}; begin a new one")
        self._lh._check_open()

    # -- read primitives: the snapshot at v, overlaid with own changes -------------------
    def _fetch(self, key: bytes) -> bytes | None:
        return self._snap.get(key)

    def _scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self._snap.scan_prefix(prefix)

    def _lookup(self, kind: str, ns: str, name: str | None) -> Definition | None:
        ref = (kind, ns if name is None else f"{ns}.{name}")
        p = self._pending.get(ref)
        if p is not None:
            return p.final
        if self._serializable:
            self._reads.add(ref)
        data = self._base(ref, kind, ns, name)
        return None if data is None else codec.decode_def(data)

    def _base(self, ref: tuple[str, str], kind: str, ns: str, name: str | None) -> bytes | None:
        """The stored definition at v (cached: the snapshot does not change)."""
        try:
            return self._base_bytes[ref]
        except KeyError:
            data = self._base_bytes[ref] = self._fetch(keys.object_key(kind, ns, name))
            return data

    def _names(self, kind: str, ns: str | None) -> list[str]:
        if self._serializable:
            self._listings.add(("namespaces", "") if ns is None else (kind + "s", ns))
        names = set(super()._names(kind, ns))
        for p in self._pending.values():
            if p.kind != kind or (ns is not None and p.ns != ns):
                continue
            plain = p.ns if ns is None else p.name
            assert plain is not None
            if p.final is None:
                names.discard(plain)
            else:
                names.add(plain)
        return sorted(names)

    def _state_items(self, ns: str, table: str) -> list[tuple[bytes, bytes]]:
        prefix = keys.table_state_prefix(ns, table)
        items = dict(self._scan(prefix))
        for k, v in self._state_writes.items():
            if k.startswith(prefix):
                if v is None:
                    items.pop(k, None)
                else:
                    items[k] = v
        return sorted(items.items())

    # -- buffering ------------------------------------------------------------------------
    def _touch(self, kind: str, ns: str, name: str | None) -> Pending:
        ref = (kind, ns if name is None else f"{ns}.{name}")
        p = self._pending.get(ref)
        if p is None:
            data = self._base(ref, kind, ns, name)
            base = None if data is None else codec.decode_def(data)
            p = self._pending[ref] = Pending(kind, ns, name, base, data, base)
        return p

    def _require(self, kind: str, ns: str, name: str) -> Definition:
        d = self._lookup(kind, ns, name)
        if d is None:
            self._require_namespace(ns)
            raise NotFound(f"{kind} {ns}.{name} does not exist")
        return d

    def _check_free(self, ns: str, name: str) -> None:
        """Tables and views share one name space within a namespace."""
        self._require_namespace(ns)
        for kind in ("table", "view"):
            if self._lookup(kind, ns, name) is not None:
                raise AlreadyExists(f"a {kind} named {ns}.{name} already exists")

    # -- namespaces -----------------------------------------------------------------------
    def create_namespace(self, name: str, properties: dict[str, str] | None = None) -> None:
        self._check_usable()
        ns = self._ns_name(name)
        props = check_properties(properties)
        if self._lookup("namespace", ns, None) is not None:
            raise AlreadyExists(f"namespace {ns!r} already exists")
        self._touch("namespace", ns, None).final = NamespaceDef(ns, props)

    def drop_namespace(self, name: str) -> None:
        """Drop an empty namespace (NamespaceNotEmpty while it holds tables or views)."""
        self._check_usable()
        ns = self._ns_name(name)
        self._require_namespace(ns)
        left = [f"table {t}" for t in self._names("table", ns)]
        left += [f"view {v}" for v in self._names("view", ns)]
        if left:
            raise NamespaceNotEmpty(
                f"namespace {ns!r} still holds {', '.join(left[:5])}"
                f"{' ...' if len(left) > 5 else ''}; drop them first"
            )
        self._touch("namespace", ns, None).final = None

    def alter_namespace(
        self,
        name: str,
        *,
        set_properties: dict[str, str] | None = None,
        remove_properties: list[str] | None = None,
    ) -> None:
        self._check_usable()
        ns = self._ns_name(name)
        cur = self._require_namespace(ns)
        props = evolve_properties(cur.properties, set_properties, remove_properties)
        self._touch("namespace", ns, None).final = NamespaceDef(ns, props)

    # -- tables ---------------------------------------------------------------------------
    def create_table(
        self,
        name: str,
        schema: Any,
        properties: dict[str, str] | None = None,
        *,
        primary_key: list[str] | None = None,
        sort_keys: list[str] | None = None,
        format: str = "parquet",
    ) -> None:
        """Create ``"ns.table"`` with a ``pyarrow.Schema`` (column ids are assigned 1..n)."""
        self._check_usable()
        ns, t = self._qualified(name, "table name")
        schema = check_schema(schema, self._name_limit)
        props = check_properties(properties)
        pk = _check_columns(schema, check_keys(primary_key, "primary_key"), "primary_key")
        sk = _check_columns(schema, check_keys(sort_keys, "sort_keys"), "sort_keys")
        if not isinstance(format, str) or not format:
            raise TypeError("format must be a non-empty str such as 'parquet'")
        self._check_free(ns, t)
        cols, last = assign_columns(schema)
        table_id = uuid.UUID(int=self._lh._rng_bits(128), version=4).hex
        self._touch("table", ns, t).final = TableDef(
            ns, t, table_id, cols, last, schema_to_ipc(schema), props, pk, sk, format
        )

    def drop_table(self, name: str) -> None:
        self._check_usable()
        ns, t = self._qualified(name, "table name")
        self._require("table", ns, t)
        for k, _ in self._state_items(ns, t):
            self._state_writes[k] = None
        self._touch("table", ns, t).final = None

    def alter_table(
        self,
        name: str,
        *,
        set_properties: dict[str, str] | None = None,
        remove_properties: list[str] | None = None,
        schema: Any = None,
    ) -> None:
        """Change properties and/or the schema (columns matched by name keep their ids)."""
        self._check_usable()
        ns, t = self._qualified(name, "table name")
        cur = self._require("table", ns, t)
        assert isinstance(cur, TableDef)
        props = evolve_properties(cur.properties, set_properties, remove_properties)
        cols, last, ipc = cur.columns, cur.last_column_id, cur.schema_ipc
        if schema is not None:
            schema = check_schema(schema, self._name_limit)
            cols, last = assign_columns(schema, cur.columns, cur.last_column_id)
            ipc = schema_to_ipc(schema)
            names = {c.name for c in cols}
            for what, ks in (("primary_key", cur.primary_key), ("sort_keys", cur.sort_keys)):
                gone = [k for k in ks if k not in names]
                if gone:
                    raise ValueError(f"the new schema drops {what} column(s) {gone}")
        self._touch("table", ns, t).final = TableDef(
            ns,
            t,
            cur.table_id,
            cols,
            last,
            ipc,
            props,
            cur.primary_key,
            cur.sort_keys,
            cur.format,
        )

    # -- views ------------------------------------------------------------------------------
    def create_view(
        self,
        name: str,
        sql: str,
        properties: dict[str, str] | None = None,
        *,
        referenced: list[str] | None = None,
        dialect: str = "spark",
    ) -> None:
        """Create ``"ns.view"`` from SQL text; ``referenced`` names the objects it reads."""
        self._check_usable()
        ns, v = self._qualified(name, "view name")
        sql = _check_sql(sql)
        props = check_properties(properties)
        refs = tuple(
            ".".join(self._qualified(r, "referenced name"))
            for r in check_keys(referenced, "referenced")
        )
        if not isinstance(dialect, str) or not dialect:
            raise TypeError("dialect must be a non-empty str")
        self._check_free(ns, v)
        self._touch("view", ns, v).final = ViewDef(ns, v, sql, refs, props, dialect)

    def drop_view(self, name: str) -> None:
        self._check_usable()
        ns, v = self._qualified(name, "view name")
        self._require("view", ns, v)
        self._touch("view", ns, v).final = None

    def alter_view(
        self,
        name: str,
        *,
        sql: str | None = None,
        set_properties: dict[str, str] | None = None,
        remove_properties: list[str] | None = None,
    ) -> None:
        self._check_usable()
        ns, v = self._qualified(name, "view name")
        cur = self._require("view", ns, v)
        assert isinstance(cur, ViewDef)
        props = evolve_properties(cur.properties, set_properties, remove_properties)
        new_sql = cur.sql if sql is None else _check_sql(sql)
        self._touch("view", ns, v).final = ViewDef(
            ns, v, new_sql, cur.referenced, props, cur.dialect
        )

    # -- table state (used by table data operations) --------------------------------------------
    def _add_data_file(self, table: str, file_id: str, f: DataFile) -> None:
        """Record a data file in the table's state (the data-operation issue builds on this)."""
        self._check_usable()
        ns, t = self._qualified(table, "table name")
        self._require("table", ns, t)
        check_name(file_id, "file id", self._name_limit)
        self._state_writes[keys.data_file_key(ns, t, file_id)] = codec.encode_data_file(f)
        self._state_tables.add((ns, t))
        if not f.is_external:
            self._files_added.append(f.path)
        self._touch("table", ns, t)

    # -- outcome -----------------------------------------------------------------------------
    def commit(self) -> int:
        """Commit; returns the version created (the begin version when nothing changed).

        Raises :class:`RetryableConflict` or :class:`IncompatibleConflict`; the
        transaction is closed either way and nothing of it is visible after a
        conflict.
        """
        self._check_usable()
        from lakehouse.commit import commit

        with self._lock:
            outcome = "rolled back"
            try:
                version = commit(self._lh, self)
                outcome = "committed"
                return version
            finally:
                self._status = outcome
                self._snap.close()

    def rollback(self) -> None:
        """Discard the buffered changes. Idempotent."""
        if self._status == "open":
            self._status = "rolled back"
            self._snap.close()

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
            f"{self._status}, {len(self._pending)} objects touched>"
        )


def _check_columns(schema: Any, names: tuple[str, ...], what: str) -> tuple[str, ...]:
    cols = set(schema.names)
    for n in names:
        if n not in cols:
            raise ValueError(f"{what} column {n!r} is not in the schema")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} lists a column twice")
    return names


def _check_sql(sql: Any) -> str:
    if not isinstance(sql, str):
        raise TypeError(f"sql must be a str, not {type(sql).__name__}")
    if not sql.strip():
        raise ValueError("sql must not be empty")
    return sql
