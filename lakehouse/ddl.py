"""Definition changes in a transaction: create, alter and drop namespaces, tables, views.

:class:`DefinitionOps` is the DDL half of :class:`lakehouse.Transaction`: it
validates each call's arguments (names, schemas, properties, key columns,
SQL text), checks what must or must not exist at the transaction's view
(its snapshot overlaid with its own changes, through :meth:`ReadOps._lookup`)
and records the new definition (or ``None`` for a drop) on the object's
buffered change, which the transaction supplies (:meth:`DefinitionOps._touch`).
Nothing here writes to the store; the commit protocol
(:mod:`lakehouse.commit`) does, from the buffer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakehouse.data import compaction, inline, keyindex
from lakehouse.data.conform import evolve
from lakehouse.defbuffer import Pending
from lakehouse.errors import AlreadyExists, NamespaceNotEmpty, NotFound, one_hierarchy
from lakehouse.model import (
    Definition,
    NamespaceDef,
    TableDef,
    ViewDef,
    assign_columns,
    check_keys,
    check_properties,
    check_schema,
    evolve_properties,
    schema_from_ipc,
    schema_to_ipc,
)
from lakehouse.partition import parse_spec
from lakehouse.reads import ReadOps

if TYPE_CHECKING:
    from lakehouse.context import Context


@one_hierarchy
class DefinitionOps(ReadOps):
    """``create_*`` / ``alter_*`` / ``drop_*`` on a transaction's buffered changes."""

    _ctx: Context

    def _touch(self, kind: str, ns: str, name: str | None) -> Pending:
        """The buffered change of one object (created on first touch)."""
        raise NotImplementedError

    def _clear_state(self, state_keys: Iterable[bytes]) -> None:
        """Delete raw table-state keys at commit (a dropped table's)."""
        raise NotImplementedError

    def _index_primary_key(self, d: TableDef) -> None:
        """Check ``d``'s rows against its (new) primary key and index them at commit."""
        raise NotImplementedError

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
    def create_namespace(
        self,
        name: str,
        properties: dict[str, str] | None = None,
        *,
        if_not_exists: bool = False,
    ) -> bool:
        """Create a namespace; True when created. With ``if_not_exists=True`` an
        existing namespace is left as it is (its properties too), nothing is
        recorded for it and False is returned (SQL's CREATE ... IF NOT EXISTS)."""
        self._check_usable()
        ns = self._ns_name(name)
        props = check_properties(properties)
        _check_flag(if_not_exists)
        if self._lookup("namespace", ns, None) is not None:
            if if_not_exists:
                return False
            raise AlreadyExists(f"namespace {ns!r} already exists")
        self._touch("namespace", ns, None).final = NamespaceDef(ns, props)
        return True

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
        if_not_exists: bool = False,
        partition_by: list[str] | None = None,
    ) -> bool:
        """Create ``"ns.table"`` with a ``pyarrow.Schema`` (column ids are assigned 1..n);
        True when created.

        ``partition_by`` lists Iceberg partition transforms (``"country"``,
        ``"day(ts)"``, ``"bucket(16, id)"``, ``"truncate(4, sku)"``): every data file
        then holds one partition. ``sort_keys``: each written file's rows are sorted
        by these columns (ascending, nulls first).

        With ``if_not_exists=True`` an existing table of that name is left as it
        is, whatever its schema, properties and keys (SQL's CREATE TABLE IF NOT
        EXISTS): nothing is recorded for it and False is returned. The arguments
        are still checked, and a view of that name still raises AlreadyExists.
        """
        self._check_usable()
        ns, t = self._qualified(name, "table name")
        schema = check_schema(schema, self._name_limit)
        props = check_properties(properties)
        _check_table_properties(props)
        pk = _check_columns(schema, check_keys(primary_key, "primary_key"), "primary_key")
        keyindex.check_key_columns(schema, pk, f"{ns}.{t}")
        sk = _check_columns(schema, check_keys(sort_keys, "sort_keys"), "sort_keys")
        if not isinstance(format, str) or not format:
            raise TypeError("format must be a non-empty str such as 'parquet'")
        _check_flag(if_not_exists)
        if if_not_exists and self._lookup("table", ns, t) is not None:
            return False
        self._check_free(ns, t)
        cols, last = assign_columns(schema)
        spec = parse_spec(partition_by, [(c.id, c.name) for c in cols], schema, 0)
        table_id = uuid.UUID(int=self._ctx.rng_bits(128), version=4).hex
        self._touch("table", ns, t).final = TableDef(
            ns,
            t,
            table_id,
            cols,
            last,
            schema_to_ipc(schema),
            props,
            pk,
            sk,
            format,
            partition_specs=() if spec.is_unpartitioned else (spec,),
        )
        return True

    def drop_table(self, name: str) -> None:
        self._check_usable()
        ns, t = self._qualified(name, "table name")
        self._require("table", ns, t)
        self._clear_state(k for k, _ in self._state_items(ns, t))
        self._touch("table", ns, t).final = None

    def alter_table(
        self,
        name: str,
        *,
        set_properties: dict[str, str] | None = None,
        remove_properties: list[str] | None = None,
        schema: Any = None,
        rename_columns: Mapping[str, str] | None = None,
        partition_by: list[str] | None = None,
        sort_keys: list[str] | None = None,
        primary_key: list[str] | None = None,
    ) -> None:
        """Change properties, the schema, the partition spec, the sort keys or the
        primary key.

        ``schema`` adds and drops columns by name and widens types (int32 ->
        int64, float -> double); ``rename_columns={"old": "new"}`` renames.
        Columns keep their ids, so existing data files are read as they are.
        ``partition_by`` starts a new partition spec for data written from now
        on (``[]``: unpartitioned); files keep the spec they were written with
        and are still pruned by it. ``sort_keys`` applies to files written from
        now on (and to compaction). ``primary_key`` (``[]``: none) is checked
        against the rows (:class:`~lakehouse.DuplicateKey` if two live rows share a
        key) and indexed in the same commit.
        """
        self._check_usable()
        ns, t = self._qualified(name, "table name")
        cur = self._require("table", ns, t)
        assert isinstance(cur, TableDef)
        props = evolve_properties(cur.properties, set_properties, remove_properties)
        _check_table_properties(props)
        cols, last, ipc = cur.columns, cur.last_column_id, cur.schema_ipc
        renames = dict(check_properties(rename_columns, "rename_columns"))
        if renames and schema is None:
            schema = pa.schema(
                [f.with_name(renames.get(f.name, f.name)) for f in cur.schema],
                metadata=cur.schema.metadata,
            )
        if schema is not None:
            schema = check_schema(schema, self._name_limit)
            has_data = bool(self._table_files(ns, t))
            cols, last = evolve(schema, cur.columns, cur.last_column_id, renames, has_data)
            ipc = schema_to_ipc(schema)
        sk = cur.sort_keys
        if sort_keys is not None:
            sk = _check_columns(
                schema_from_ipc(ipc), check_keys(sort_keys, "sort_keys"), "sort_keys"
            )
        pk = tuple(renames.get(k, k) for k in cur.primary_key)
        if primary_key is not None:
            pk = _check_columns(
                schema_from_ipc(ipc) if schema is None else schema,
                check_keys(primary_key, "primary_key"),
                "primary_key",
            )
            keyindex.check_key_columns(schema_from_ipc(ipc), pk, f"{ns}.{t}")
        specs, spec_id = cur.partition_specs, cur.spec_id
        if partition_by is not None:
            previous = specs or (cur.spec,)
            new_id = max(s.spec_id for s in previous) + 1
            spec = parse_spec(
                partition_by, [(c.id, c.name) for c in cols], schema_from_ipc(ipc), new_id, previous
            )
            same = next((s for s in previous if s.fields == spec.fields), None)
            if same is not None:  # back to a spec the table had: reuse its id
                spec_id = same.spec_id
            else:
                specs, spec_id = (*previous, spec), new_id
        if schema is not None:
            names_left = {c.name for c in cols}
            ids_left = {c.id for c in cols}
            pk_now = tuple(renames.get(k, k) for k in cur.primary_key)
            for what, ks in (("primary_key", pk_now), ("sort_keys", sk)):
                gone = [k for k in ks if k not in names_left]
                if gone:
                    raise ValueError(f"the new schema drops {what} column(s) {gone}")
            current = next((s for s in specs if s.spec_id == spec_id), None)
            gone_src = [
                f.name for f in (current.fields if current else ()) if f.source_id not in ids_left
            ]
            if gone_src:
                raise ValueError(
                    f"the new schema drops the source column of partition field(s) {gone_src}; "
                    "change partition_by first"
                )
        final = TableDef(
            ns,
            t,
            cur.table_id,
            cols,
            last,
            ipc,
            props,
            pk,
            sk,
            cur.format,
            partition_specs=specs,
            spec_id=spec_id,
        )
        if pk and (not cur.primary_key or keyindex.prefix(final) != keyindex.prefix(cur)):
            # a new key: DuplicateKey leaves the table as it was
            self._index_primary_key(final)
        self._touch("table", ns, t).final = final

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


def _check_table_properties(props: Mapping[str, str]) -> None:
    """The table properties that are checked when set (ValueError naming the property)."""
    if inline.PROPERTY in props:
        inline.check_property(props[inline.PROPERTY])
    if compaction.FLUSH_PROPERTY in props:
        compaction.check_flush_rows(props[compaction.FLUSH_PROPERTY])
    if compaction.DELETE_THRESHOLD_PROPERTY in props:
        compaction.check_delete_threshold(props[compaction.DELETE_THRESHOLD_PROPERTY])


def _check_columns(schema: Any, names: tuple[str, ...], what: str) -> tuple[str, ...]:
    cols = set(schema.names)
    for n in names:
        if n not in cols:
            raise ValueError(f"{what} column {n!r} is not in the schema")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} lists a column twice")
    return names


def _check_flag(if_not_exists: Any) -> None:
    if not isinstance(if_not_exists, bool):
        raise TypeError(f"if_not_exists must be a bool, not {type(if_not_exists).__name__}")


def _check_sql(sql: Any) -> str:
    if not isinstance(sql, str):
        raise TypeError(f"sql must be a str, not {type(sql).__name__}")
    if not sql.strip():
        raise ValueError("sql must not be empty")
    return sql
