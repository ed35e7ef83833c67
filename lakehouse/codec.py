"""Values of the lakehouse keys: one format byte, then compact JSON.

    +------+-----------------------------------------------+
    | 0x01 | {"kind": ..., fields in a fixed order, no spaces} |
    +------+-----------------------------------------------+

The format byte lets a later release change the encoding; an unknown byte or
unparsable JSON raises :class:`~lakehouse.errors.CorruptionError`. (The
kvstore already checksums every block, so torn or flipped bytes never reach
this module.) Encoding is deterministic (fields in a fixed order, properties
sorted by key), so the hash of the bytes identifies a definition:
:func:`def_id` is what version records store as ``old_id``/``new_id``. Arrow
schemas travel as base64 of their IPC encoding, which round-trips every Arrow
type, nested ones and metadata included. Decoded definitions are cached by
their bytes: they are immutable (frozen dataclasses, read-only properties).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from lakehouse.data import record
from lakehouse.errors import CorruptionError
from lakehouse.model import (
    Column,
    DataFile,
    Definition,
    Isolation,
    LakehouseDef,
    NamespaceDef,
    ObjectChange,
    TableDef,
    VersionInfo,
    ViewDef,
)

if TYPE_CHECKING:
    from lakehouse.partition import PartitionSpec

FORMAT = 1
_FORMAT_BYTE = bytes([FORMAT])


#: one encoder for every record (``json.dumps`` with separators builds one per call);
#: the bytes are exactly ``json.dumps(obj, separators=(",", ":"))``'s
_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def _dump(obj: dict[str, Any]) -> bytes:
    return _FORMAT_BYTE + _ENCODER.encode(obj).encode()


def _load(data: bytes, what: str) -> dict[str, Any]:
    if not data or data[0] != FORMAT:
        raise CorruptionError(
            f"{what}: unknown format byte {data[:1]!r} (this release reads {FORMAT})"
        )
    try:
        obj = json.loads(data[1:])
    except (ValueError, RecursionError) as exc:
        raise CorruptionError(f"{what}: bad JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise CorruptionError(f"{what}: expected a JSON object")
    return obj


def def_id(data: bytes) -> str:
    """A short content hash naming one stored definition."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


# -- definitions -------------------------------------------------------------------
def encode_lakehouse(d: LakehouseDef) -> bytes:
    return _dump(
        {
            "kind": "lakehouse",
            "id": d.id,
            "max_name_length": d.max_name_length,
            "default_isolation": d.default_isolation.value,
            "transaction_ttl": d.transaction_ttl,
            "properties": d.properties,
            "created_ms": d.created_ms,
        }
    )


def decode_lakehouse(data: bytes) -> LakehouseDef:
    o = _load(data, "lakehouse definition")
    try:
        return LakehouseDef(
            id=o["id"],
            max_name_length=int(o["max_name_length"]),
            default_isolation=Isolation(o["default_isolation"]),
            transaction_ttl=float(o["transaction_ttl"]),
            properties=dict(o["properties"]),
            created_ms=int(o["created_ms"]),
        )
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
        raise CorruptionError(f"lakehouse definition: {exc!r}") from None


def encode_def(d: Definition) -> bytes:
    if isinstance(d, NamespaceDef):
        return _dump({"kind": "namespace", "name": d.name, "properties": d.properties})
    if isinstance(d, TableDef):
        return _dump(
            {
                "kind": "table",
                "namespace": d.namespace,
                "name": d.name,
                "table_id": d.table_id,
                "columns": [[c.id, c.name, c.type, c.nullable] for c in d.columns],
                "last_column_id": d.last_column_id,
                "schema": base64.b64encode(d.schema_ipc).decode("ascii"),
                "properties": d.properties,
                "primary_key": list(d.primary_key),
                "sort_keys": list(d.sort_keys),
                "format": d.format,
                **_specs(d),
            }
        )
    if isinstance(d, ViewDef):
        return _dump(
            {
                "kind": "view",
                "namespace": d.namespace,
                "name": d.name,
                "sql": d.sql,
                "referenced": list(d.referenced),
                "properties": d.properties,
                "dialect": d.dialect,
            }
        )
    raise TypeError(f"not a definition: {type(d).__name__}")


def _specs(d: TableDef) -> dict[str, Any]:
    """A table's partition specs (absent for a table never partitioned)::

    "specs": [[spec id, [[source column id, transform, param, name, field id], ...]], ...]
    """
    if not d.partition_specs:
        return {}
    return {
        "specs": [
            [
                s.spec_id,
                [
                    [f.source_id, f.transform.name, f.transform.param, f.name, f.field_id]
                    for f in s.fields
                ],
            ]
            for s in d.partition_specs
        ],
        "spec_id": d.spec_id,
    }


def _decode_specs(raw: Any) -> tuple[PartitionSpec, ...]:
    from lakehouse.partition import PartitionField, PartitionSpec, Transform

    return tuple(
        PartitionSpec(
            int(sid),
            tuple(
                PartitionField(
                    int(src),
                    Transform(str(name), None if p is None else int(p)),
                    str(fname),
                    int(fid),
                )
                for src, name, p, fname, fid in fields
            ),
        )
        for sid, fields in raw
    )


_DEF_CACHE: dict[bytes, Definition] = {}
_DEF_CACHE_MAX = 8192


def decode_def(data: bytes) -> Definition:
    """Decode a definition (cached by its bytes: definitions are immutable)."""
    d = _DEF_CACHE.get(data)
    if d is None:
        d = _decode_def(data)
        remember_def(data, d)
    return d


def remember_def(data: bytes, d: Definition) -> None:
    """Cache ``d`` as the decoding of ``data`` (a commit primes it with what it wrote)."""
    if len(_DEF_CACHE) >= _DEF_CACHE_MAX:
        _DEF_CACHE.clear()
    _DEF_CACHE[data] = d


def _decode_def(data: bytes) -> Definition:
    o = _load(data, "definition")
    try:
        kind = o["kind"]
        if kind == "namespace":
            return NamespaceDef(o["name"], dict(o["properties"]))
        if kind == "table":
            return TableDef(
                namespace=o["namespace"],
                name=o["name"],
                table_id=o["table_id"],
                columns=tuple(Column(int(i), n, t, bool(nl)) for i, n, t, nl in o["columns"]),
                last_column_id=int(o["last_column_id"]),
                schema_ipc=base64.b64decode(o["schema"]),
                properties=dict(o["properties"]),
                primary_key=tuple(o["primary_key"]),
                sort_keys=tuple(o["sort_keys"]),
                format=o["format"],
                partition_specs=_decode_specs(o.get("specs", ())),
                spec_id=int(o.get("spec_id", 0)),
            )
        if kind == "view":
            return ViewDef(
                namespace=o["namespace"],
                name=o["name"],
                sql=o["sql"],
                referenced=tuple(o["referenced"]),
                properties=dict(o["properties"]),
                dialect=o["dialect"],
            )
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
        raise CorruptionError(f"definition: {exc!r}") from None
    raise CorruptionError(f"definition of unknown kind {kind!r}")


# -- table state (the data-file record has its own module) ------------------------------
def encode_data_file(f: DataFile) -> bytes:
    return record.encode_file(f)


def decode_data_file(data: bytes) -> DataFile:
    return record.decode_file(data)


def encode_app(app_version: int, version: int) -> bytes:
    return _dump({"kind": "app", "app_version": app_version, "version": version})


def decode_app(data: bytes) -> tuple[int, int]:
    o = _load(data, "idempotent-write record")
    try:
        return int(o["app_version"]), int(o["version"])
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
        raise CorruptionError(f"idempotent-write record: {exc!r}") from None


def encode_paths(paths: list[str]) -> bytes:
    return _dump({"kind": "paths", "paths": paths})


def decode_paths(data: bytes) -> list[str]:
    return list(_load(data, "path list").get("paths", []))


class QueuedFile(NamedTuple):
    """A data file in the deletion queue (``L/gc``): only expired versions
    reference it since ``since_ms``; it may be deleted once ``grace_ms`` has passed."""

    path: str
    since_ms: int
    grace_ms: int

    @property
    def due_ms(self) -> int:
        return self.since_ms + self.grace_ms


def encode_gc_queue(files: list[QueuedFile]) -> bytes:
    return _dump({"kind": "gc", "files": [list(q) for q in files]})


def decode_gc_queue(data: bytes) -> list[QueuedFile]:
    """The deletion queue; the older ``paths`` form (no times) is due at once."""
    o = _load(data, "deletion queue")
    try:
        if o.get("kind") == "paths":
            return [QueuedFile(str(p), 0, 0) for p in o["paths"]]
        return [QueuedFile(str(p), int(s), int(g)) for p, s, g in o["files"]]
    except (KeyError, ValueError, TypeError) as exc:
        raise CorruptionError(f"deletion queue: {exc!r}") from None


def gc_queue(raw: bytes | None) -> list[QueuedFile]:
    """The deletion queue stored as ``raw`` (None: no queue yet, empty)."""
    return [] if raw is None else decode_gc_queue(raw)


def enqueue_gc(
    raw: bytes | None, paths: Iterable[str], now_ms: int, grace_ms: int
) -> tuple[list[QueuedFile], list[QueuedFile]]:
    """The deletion queue stored as ``raw`` and the entries, sorted, to append for
    those of ``paths`` it does not hold yet (queued at ``now_ms`` with ``grace_ms``);
    the caller stores ``queue + new``."""
    queue = gc_queue(raw)
    known = {q.path for q in queue}
    new = [QueuedFile(p, now_ms, grace_ms) for p in sorted(set(paths) - known)]
    return queue, new


# -- version records ----------------------------------------------------------------------
def encode_record(r: VersionInfo) -> bytes:
    return _dump(
        {
            "kind": "version",
            "version": r.version,
            "parent": r.parent,
            "base_seq": r.base_seq,
            "created_ms": r.created_ms,
            "isolation": r.isolation.value,
            "txn": r.txn_id,
            "changes": [[c.kind, c.name, c.op, c.old_id, c.new_id] for c in r.changes],
            "reads": [list(x) for x in r.reads],
            "listings": [list(x) for x in r.listings],
            "rollback_of": r.rollback_of,
            "source": r.source,
            "files_added": list(r.files_added),
            "data": [record.encode_change(c) for c in r.data],
            "app": None if r.app is None else list(r.app),
        }
    )


def decode_record(data: bytes) -> VersionInfo:
    o = _load(data, "version record")
    try:
        return VersionInfo(
            version=int(o["version"]),
            created_ms=int(o["created_ms"]),
            parent=o["parent"],
            isolation=Isolation(o["isolation"]),
            txn_id=o["txn"],
            changes=tuple(ObjectChange(k, n, op, a, b) for k, n, op, a, b in o["changes"]),
            reads=tuple((k, n) for k, n in o["reads"]),
            listings=tuple((k, n) for k, n in o["listings"]),
            rollback_of=o["rollback_of"],
            base_seq=int(o["base_seq"]),
            source=o["source"],
            files_added=tuple(o["files_added"]),
            data=tuple(record.decode_change(c) for c in o.get("data", ())),
            app=None if o.get("app") is None else (str(o["app"][0]), int(o["app"][1])),
        )
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
        raise CorruptionError(f"version record: {exc!r}") from None
