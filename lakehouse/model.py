"""Definitions and records of the lakehouse: frozen dataclasses plus input checks.

* :class:`LakehouseDef`: id, name limits, default isolation, transaction TTL,
  properties (TrinityLake's lakehouse definition);
* :class:`NamespaceDef`, :class:`TableDef` (an Arrow schema with a column id
  per column, properties, primary and sort keys, file format),
  :class:`ViewDef` (SQL text, referenced objects, properties);
* :class:`ObjectChange` and :class:`VersionInfo`: what one version changed,
  read and restored;
* :class:`DataFile`: one file of table state (table data operations use it;
  export and expiration already follow it).

Names: non-empty, at most ``max_name_length`` characters (255 unless the
lakehouse says otherwise), no control characters; namespace names may not
contain dots, because ``"ns.table"`` is split on its first dot.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakehouse.arrowtypes import child_fields, map_fields

if TYPE_CHECKING:
    from lakehouse.partition import PartitionSpec

DEFAULT_MAX_NAME_LENGTH = 255
KINDS = ("namespace", "table", "view")
OPS = ("create", "alter", "drop")


class Isolation(enum.Enum):
    """Isolation level of a lakehouse :class:`~lakehouse.txn.Transaction`."""

    #: conflicts only when a concurrent version changed an object this
    #: transaction changed; write skew between objects is possible
    SNAPSHOT = "snapshot"
    #: also when a concurrent version changed an object this transaction read,
    #: or created/dropped an object in a listing it read (phantoms)
    SERIALIZABLE = "serializable"


class Properties(dict[str, str]):
    """The properties of a definition: a ``dict`` that refuses changes.

    Definitions are immutable snapshots (and shared between readers); change
    properties with ``alter_*(set_properties=..., remove_properties=...)``.
    """

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "definition properties are read-only; use alter_*(set_properties=...) "
            "or copy them with dict(...)"
        )

    __setitem__ = __delitem__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse

    def __repr__(self) -> str:
        return dict.__repr__(self)


def frozen_properties(props: Mapping[str, str]) -> Properties:
    """Properties in key order (so equal definitions encode to equal bytes)."""
    return Properties(sorted(props.items()))


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc, exactly


# ---------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------
def check_name(name: Any, what: str, limit: int, *, dots: bool = True) -> str:
    """Validate one plain name; ``what`` names it in error messages."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    if not name:
        raise ValueError(f"{what} must not be empty")
    if len(name) > limit:
        raise ValueError(f"{what} {name[:40]!r}... is {len(name)} characters; the limit is {limit}")
    bad = _CONTROL.search(name)
    if bad is not None:
        raise ValueError(f"{what} {name!r} contains the control character {bad.group()!r}")
    if not dots and "." in name:
        raise ValueError(
            f"{what} {name!r} contains a dot; namespace names may not "
            "('ns.table' is split on the first dot)"
        )
    return name


def split_qualified(name: Any, what: str, limit: int) -> tuple[str, str]:
    """``"ns.table"`` (or a ``(ns, table)`` pair) -> validated ``(ns, table)``."""
    if isinstance(name, (tuple, list)) and len(name) == 2:
        ns, rest = name
    elif isinstance(name, str):
        if "." not in name:
            raise ValueError(f"{what} {name!r} must be qualified as 'namespace.name'")
        ns, rest = name.split(".", 1)
    else:
        raise TypeError(f"{what} must be a str 'namespace.name', not {type(name).__name__}")
    return check_name(ns, "namespace name", limit, dots=False), check_name(rest, what, limit)


def check_properties(props: Any, what: str = "properties") -> dict[str, str]:
    if props is None:
        return {}
    if not isinstance(props, Mapping):
        raise TypeError(f"{what} must be a dict of str to str, not {type(props).__name__}")
    out: dict[str, str] = {}
    for k, v in props.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"{what} must map str to str; got {k!r}: {v!r}")
        if not k:
            raise ValueError(f"{what} keys must not be empty")
        out[k] = v
    return out


def check_keys(keys: Any, what: str) -> tuple[str, ...]:
    if keys is None:
        return ()
    if isinstance(keys, str) or not isinstance(keys, Iterable):
        raise TypeError(f"{what} must be a list of str")
    out = tuple(keys)
    if not all(isinstance(k, str) for k in out):
        raise TypeError(f"{what} must be a list of str")
    return out


def evolve_properties(
    props: Mapping[str, str], set_properties: Any, remove_properties: Any
) -> dict[str, str]:
    out = dict(props)
    out.update(check_properties(set_properties, "set_properties"))
    for k in check_keys(remove_properties, "remove_properties"):
        out.pop(k, None)
    return out


# ---------------------------------------------------------------------------
# definitions
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LakehouseDef:
    id: str
    max_name_length: int = DEFAULT_MAX_NAME_LENGTH
    default_isolation: Isolation = Isolation.SNAPSHOT
    #: seconds a transaction may stay open before its commit fails
    transaction_ttl: float = 3600.0
    properties: dict[str, str] = field(default_factory=dict)
    created_ms: int = 0

    def __post_init__(self) -> None:
        if type(self.properties) is not Properties:
            object.__setattr__(self, "properties", frozen_properties(self.properties))

    @property
    def name(self) -> str:
        return self.id


@dataclass(frozen=True)
class NamespaceDef:
    name: str
    properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.properties) is not Properties:
            object.__setattr__(self, "properties", frozen_properties(self.properties))


@dataclass(frozen=True)
class Column:
    """One top-level column: a stable id (never reused in the table), name and type."""

    id: int
    name: str
    type: str
    nullable: bool = True


def schema_to_ipc(schema: pa.Schema) -> bytes:
    return bytes(schema.serialize().to_pybytes())


def schema_from_ipc(data: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))


def check_schema(schema: Any, limit: int) -> pa.Schema:
    if not isinstance(schema, pa.Schema):
        raise TypeError(f"schema must be a pyarrow.Schema, not {type(schema).__name__}")
    seen: set[str] = set()
    for f in schema:
        check_name(f.name, "column name", limit)
        if f.name in seen:
            raise ValueError(f"duplicate column name {f.name!r} in the schema")
        seen.add(f.name)
    _check_parquet_types(schema)
    return without_field_ids(schema)


#: the Arrow field metadata key pyarrow writes as a Parquet field id
FIELD_ID_KEY = b"PARQUET:field_id"


def without_field_ids(schema: pa.Schema) -> pa.Schema:
    """``schema`` without ``PARQUET:field_id`` on any field, nested fields too
    (other metadata stays; ``schema`` itself when no field has one).

    A schema taken from an Iceberg table or file (pyiceberg's ``as_arrow()``,
    ``pq.read_schema``) carries that table's field ids; written into our data
    files they would override the name mapping Iceberg readers are given, and
    columns would come back swapped or null. Table schemas and every Parquet
    file the lakehouse writes go through here."""
    if not any(_has_field_id(f) for f in schema):
        return schema
    return pa.schema([_field_without_id(f) for f in schema], schema.metadata)


def rows_without_field_ids(rows: pa.Table) -> pa.Table:
    """``rows`` with :func:`without_field_ids` of its schema (``rows`` itself when
    no field has an id)."""
    schema = rows.schema
    clean = without_field_ids(schema)
    return rows if clean is schema else rows.cast(clean)


def _has_field_id(f: pa.Field) -> bool:
    if f.metadata and FIELD_ID_KEY in f.metadata:
        return True
    return any(_has_field_id(c) for c in child_fields(f.type))


def _field_without_id(f: pa.Field) -> pa.Field:
    meta = f.metadata
    if meta and FIELD_ID_KEY in meta:
        rest = {k: v for k, v in meta.items() if k != FIELD_ID_KEY}
        f = f.with_metadata(rest) if rest else f.remove_metadata()
    t = f.type
    bare = map_fields(t, _field_without_id)
    return f if bare is t else f.with_type(bare)


def _check_parquet_types(schema: pa.Schema) -> None:
    """Refuse a column type Parquet cannot store (an interval, ...) now, not at the
    first write, with a ValueError naming the column."""
    import pyarrow.parquet as pq

    try:
        pq.write_table(schema.empty_table(), pa.BufferOutputStream())
        return
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        pass  # find the column
    for f in schema:
        try:
            pq.write_table(pa.schema([f]).empty_table(), pa.BufferOutputStream())
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueError(
                f"column {f.name!r} has type {f.type}, which Parquet data files cannot"
                f" store: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc}"
            ) from None


def assign_columns(
    schema: pa.Schema, previous: tuple[Column, ...] = (), last_id: int = 0
) -> tuple[tuple[Column, ...], int]:
    """Column ids for ``schema``: kept by name from ``previous``, new ones counted on.

    A column that keeps its name must keep its type (type changes come with
    the table data operations); ids of dropped columns are never reused.
    """
    by_name = {c.name: c for c in previous}
    cols: list[Column] = []
    for f in schema:
        typ = str(f.type)
        old = by_name.get(f.name)
        if old is not None:
            if old.type != typ:
                raise ValueError(
                    f"column {f.name!r} cannot change type from {old.type} to {typ}; "
                    "drop it and add a new column instead"
                )
            cols.append(Column(old.id, f.name, typ, f.nullable))
        else:
            last_id += 1
            cols.append(Column(last_id, f.name, typ, f.nullable))
    return tuple(cols), last_id


@dataclass(frozen=True)
class TableDef:
    namespace: str
    name: str
    table_id: str
    columns: tuple[Column, ...]
    last_column_id: int
    schema_ipc: bytes = field(repr=False)
    properties: dict[str, str] = field(default_factory=dict)
    primary_key: tuple[str, ...] = ()
    sort_keys: tuple[str, ...] = ()
    format: str = "parquet"
    #: every partition spec the table has had (files keep the spec they were
    #: written with); empty: never partitioned (spec 0, unpartitioned)
    partition_specs: tuple[PartitionSpec, ...] = ()
    #: the spec new data is written with
    spec_id: int = 0

    def __post_init__(self) -> None:
        if type(self.properties) is not Properties:
            object.__setattr__(self, "properties", frozen_properties(self.properties))

    @cached_property
    def schema(self) -> pa.Schema:
        """The table's schema as a ``pyarrow.Schema``."""
        return schema_from_ipc(self.schema_ipc)

    @property
    def spec(self) -> PartitionSpec:
        """The partition spec new data is written with."""
        return self.spec_by_id(self.spec_id)

    def spec_by_id(self, spec_id: int) -> PartitionSpec:
        from lakehouse.partition import PartitionSpec

        for s in self.partition_specs:
            if s.spec_id == spec_id:
                return s
        if spec_id == 0:
            return PartitionSpec(0)
        raise KeyError(f"table {self.qualified_name} has no partition spec {spec_id}")

    @property
    def partition_by(self) -> tuple[str, ...]:
        """The current partition spec, spelled as ``create_table`` takes it
        (``("day(ts)", "bucket(16, customer_id)")``; empty: unpartitioned)."""
        return self.spec.spelling({c.id: c.name for c in self.columns})

    @property
    def names_by_id(self) -> dict[int, str]:
        return {c.id: c.name for c in self.columns}

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.name}"

    def column_ids(self) -> dict[str, int]:
        return {c.name: c.id for c in self.columns}


@dataclass(frozen=True)
class ViewDef:
    namespace: str
    name: str
    sql: str
    #: qualified names of the objects the SQL reads
    referenced: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    dialect: str = "spark"

    def __post_init__(self) -> None:
        if type(self.properties) is not Properties:
            object.__setattr__(self, "properties", frozen_properties(self.properties))

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.name}"


Definition = NamespaceDef | TableDef | ViewDef


@dataclass(frozen=True)
class ColumnStats:
    """Bounds of one column in one data file, from its Parquet footer (None: unknown)."""

    min: Any = None
    max: Any = None
    null_count: int | None = None


@dataclass(frozen=True)
class DataFile:
    """One data file of a table.

    ``path`` is relative to the lakehouse's data directory, or an absolute
    URL (after a minimal export). ``rows`` counts every row in the file,
    ``deleted_rows`` those its deletion vector marks deleted at the version
    read; ``stats`` maps the table's current column names to
    :class:`ColumnStats`. ``columns`` pairs each column id the file holds
    with the name it has *in the file* (names can change later; ids do not),
    and ``raw_stats`` keeps the footer bounds by column id, encoded as stored.
    ``footer_size`` and ``footer_crc`` (the length and CRC-32C of the file's
    Thrift footer) and ``crc`` (CRC-32C of the whole file) are what the commit
    recorded, checked by every read and by ``lakehouse verify``; None in
    records written before they existed (those checks are then skipped).
    """

    path: str
    size: int = 0
    record_count: int = 0
    file_id: str = ""
    columns: tuple[tuple[int, str], ...] = ()
    raw_stats: tuple[tuple[int, Any, Any, int | None], ...] = field(default=(), repr=False)
    deleted_rows: int = 0
    stats: Mapping[str, ColumnStats] = field(default_factory=dict, compare=False)
    footer_size: int | None = field(default=None, repr=False)
    footer_crc: int | None = field(default=None, repr=False)
    crc: int | None = field(default=None, repr=False)
    #: the partition spec the file was written with, and its partition values as
    #: stored (one per field of that spec; see lakehouse.partition)
    spec_id: int = 0
    raw_partition: tuple[Any, ...] = field(default=(), repr=False)
    #: the partition values by Iceberg field name, as Python values (filled by
    #: ``list_data_files``, like ``stats``)
    partition: Mapping[str, Any] = field(default_factory=dict, compare=False)
    #: an inlined batch's bytes (Arrow IPC, see lakehouse.data.inline), kept in the
    #: file's own kvstore record instead of storage; None for a file in storage
    inline: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def is_external(self) -> bool:
        return "://" in self.path or self.path.startswith("/")

    @property
    def is_stored(self) -> bool:
        """An object of its own under the lakehouse's data directory (neither
        external after a minimal export nor inline in its record): what expiry,
        orphan removal, pins and a full export deal with."""
        return not (self.is_external or self.is_inline)

    @property
    def is_inline(self) -> bool:
        """Whether the rows live in the file's record (no bytes in storage)."""
        return self.inline is not None

    @property
    def rows(self) -> int:
        """Rows in the file, deleted ones included."""
        return self.record_count

    @property
    def bytes(self) -> int:
        """Size of the file in bytes."""
        return self.size

    @property
    def live_rows(self) -> int:
        """Rows a read returns from this file."""
        return self.record_count - self.deleted_rows


@dataclass(frozen=True)
class TableStats:
    """What :meth:`read` would return, in numbers (``table_stats``)."""

    rows: int
    files: int
    deleted_rows: int
    bytes: int
    #: of ``rows``, those in inlined batches (kept in the kvstore until compaction)
    inlined_rows: int = 0


@dataclass(frozen=True)
class MergeResult:
    """Rows a ``merge`` inserted, updated and deleted."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0


@dataclass(frozen=True)
class CompactResult:
    """What a ``compact`` rewrote."""

    files_removed: int = 0
    files_added: int = 0
    rows: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


# ---------------------------------------------------------------------------
# versions
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Rewrite:
    """Where a compaction put the rows it moved. Its *input* is the rows of
    ``sources`` that were live when it was planned, source by source, in
    position order; each source is ``(file id, rows in it, its deletion vector
    at planning, encoded)``. Its *output* is ``new_id`` alone (``outputs``
    empty; ``""``: no row was live) or the files of ``outputs`` (``(file id,
    rows)``, ``new_id`` the first), their rows counted one file after the
    other. ``order`` is empty when output row ``j`` is input row ``j``; a
    clustering compaction sorted the rows, and ``order`` is that permutation,
    encoded (output row ``j`` is input row ``order[j]``; see
    :mod:`lakehouse.data.rewrites`)."""

    new_id: str
    sources: tuple[tuple[str, int, bytes], ...]
    outputs: tuple[tuple[str, int], ...] = ()
    order: bytes = b""


@dataclass(frozen=True)
class TableChange:
    """What one version did to the rows of one table (kept in its record).

    ``deleted`` maps a file id to the positions this version newly deleted in
    it (an encoded deletion vector); ``removed`` lists files dropped whole;
    ``rewrites`` says where a compaction put the rows it moved; ``keys`` names
    the merge key columns when the version inserted rows by key; ``updated``
    and ``post`` tell the change feed which deletions and added files were an
    update's (or a merge update's) pre- and post-images.
    """

    table: str
    ops: tuple[DataOp, ...]
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    deleted: Mapping[str, bytes] = field(default_factory=dict)
    rewrites: tuple[Rewrite, ...] = ()
    keys: tuple[str, ...] = ()
    #: the table's id (records written before it: "", matched by name)
    table_id: str = ""
    #: of ``deleted``, the positions an update or merge replaced (their pre-images)
    updated: Mapping[str, bytes] = field(default_factory=dict)
    #: of ``added``, the files holding those rows' new versions (post-images)
    post: tuple[str, ...] = ()


@dataclass(frozen=True)
class ObjectChange:
    """One object a version created, altered or dropped (TrinityLake's "object
    change definition"). ``old_id``/``new_id`` identify definitions by a hash
    of their stored bytes (None for a missing side)."""

    kind: str
    name: str
    op: str
    old_id: str | None = None
    new_id: str | None = None

    def __str__(self) -> str:
        return f"{self.op} {self.kind} {self.name}"

    @property
    def changes_definition(self) -> bool:
        """Whether the change is more than a data change (stored as an alter that
        keeps the definition)."""
        return self.op != "alter" or self.old_id != self.new_id


@dataclass(frozen=True)
class VersionInfo:
    """One lakehouse version, as :meth:`Lakehouse.history` reports it."""

    version: int
    #: creation time, epoch milliseconds (``created_at`` is the datetime)
    created_ms: int
    parent: int | None
    isolation: Isolation
    txn_id: str
    changes: tuple[ObjectChange, ...]
    #: SERIALIZABLE: objects read, as (kind, qualified name)
    reads: tuple[tuple[str, str], ...] = ()
    #: SERIALIZABLE: listings read, as ("namespaces", "") / ("tables", ns) / ("views", ns)
    listings: tuple[tuple[str, str], ...] = ()
    rollback_of: int | None = None
    #: the kvstore seq at which the committing transaction read the parent version
    base_seq: int = 0
    #: where an export came from: {"lakehouse": id, "version": v}
    source: dict[str, Any] | None = None
    #: data files this version added (table data operations)
    files_added: tuple[str, ...] = ()
    #: per table, what the version did to its rows
    data: tuple[TableChange, ...] = ()
    #: idempotent writes: (app_id, app_version) this version recorded
    app: tuple[str, int] | None = None

    @property
    def created_at(self) -> datetime:
        """Creation time, timezone-aware UTC."""
        return ms_to_datetime(self.created_ms)

    @property
    def restores_state(self) -> bool:
        """Whether the version set the whole state at once (a rollback or an export)."""
        return self.rollback_of is not None or self.source is not None

    def summary(self) -> str:
        if self.rollback_of is not None:
            head = f"rollback to version {self.rollback_of}"
        elif self.source is not None:
            head = f"export of version {self.source.get('version')}"
        else:
            head = ""
        body = ", ".join(str(c) for c in self.changes) or "no changes"
        return f"{head}: {body}" if head else body


class DataOp(enum.StrEnum):
    """A data operation on a table's rows, as version records store it (the values
    are the stored names; a ``DataOp`` equals its name as a ``str``)."""

    APPEND = "append"
    DELETE = "delete"
    UPDATE = "update"
    MERGE = "merge"
    OVERWRITE = "overwrite"
    COMPACT = "compact"
    RESTORE = "restore"


#: what ``VersionInfo.changes`` items name a table's data change by
DATA_OPS: tuple[DataOp, ...] = tuple(DataOp)


def named_ops(v: VersionInfo) -> VersionInfo:
    """``v`` with each table's data change named by what it did.

    A version record stores a data change as an ``alter`` of the table whose
    definition stayed the same (the conflict rules read it so), with the
    operations in its :class:`TableChange`. :meth:`Lakehouse.history` and
    ``version_info`` show one item per operation instead (``append``,
    ``delete``, ``update``, ``merge``, ``compact``, ``restore``, ...), after
    the table's definition change if it had one (``create table`` then
    ``append``), in the order applied.
    """
    ops = {c.table: c.ops for c in v.data}
    if not ops:
        return v
    out: list[ObjectChange] = []
    for c in v.changes:
        mine = ops.get(c.name) if c.kind == "table" else None
        if not mine:
            out.append(c)
            continue
        if not (c.op == "alter" and c.old_id == c.new_id):
            out.append(c)  # its definition changed too: that comes first
        out.extend(ObjectChange(c.kind, c.name, op, c.old_id, c.new_id) for op in mine)
    return replace(v, changes=tuple(out))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def ms_to_datetime(ms: int) -> datetime:
    return _EPOCH + ms * _MS


def to_epoch_ms(ts: Any, what: str = "ts") -> int:
    """A timezone-aware ``datetime`` or epoch milliseconds -> epoch milliseconds.

    Naive datetimes are rejected (ValueError): a lakehouse's versions are in
    UTC and guessing the caller's zone silently picks the wrong version.
    """
    if isinstance(ts, datetime):
        if ts.tzinfo is None or ts.tzinfo.utcoffset(ts) is None:
            raise ValueError(
                f"{what} is a naive datetime; pass a timezone-aware one "
                "(e.g. datetime.now(timezone.utc)) or epoch milliseconds"
            )
        return (ts - _EPOCH) // _MS
    if isinstance(ts, bool) or not isinstance(ts, int):
        raise TypeError(
            f"{what} must be a timezone-aware datetime or epoch milliseconds (int), "
            f"not {type(ts).__name__}"
        )
    return ts
