"""Manifest entries in Avro's binary encoding, without fastavro's per-record cost.

fastavro writes a ``manifest_entry`` in ~25 µs, most of it resolving the
schema's unions (every optional field) and walking the metric maps value by
value. The entry schema is fixed but for its ``partition`` record, so this
module encodes an entry directly::

    status | snapshot_id? | sequence_number? | file_sequence_number? |
    data_file { content | file_path | file_format | partition {field?...} |
                record_count | file_size_in_bytes | 6 metric maps? |
                key_metadata? | split_offsets? | equality_ids? | sort_order_id? }

(``?``: a union with null, written as branch 0, or branch 1 then the value;
ints zig-zag varints; strings and bytes length-prefixed; a map of int keys an
array of key/value records: count, items, 0). :func:`container` wraps the
encoded entries in an object container file the way ``fastavro.writer`` does
(blocks cut once they hold :data:`SYNC_INTERVAL` bytes, deflate as
``zlib.compress(block)[2:-1]``), so the bytes are *identical* to fastavro's for
the same records (the tests compare them). A value this encoder does not know
(a partition field of a logical type given as a ``date``, ``Decimal``,
``UUID``...; a type that is not exactly int/str/bytes/...) raises
:class:`Unsupported` and the caller writes the manifest with fastavro instead.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fastavro

#: fastavro's default ``sync_interval``: a block is written once it holds this many bytes
SYNC_INTERVAL = 16_000

#: a partition field's Avro union branch name -> how its value is encoded
_FAST_BRANCHES = frozenset({"int", "long", "string", "bytes", "boolean", "float", "double"})

_ONE = [bytes([z]) for z in range(128)]
_NULL = b"\x00"
_SOME = b"\x02"  # union branch 1 (zig-zag of 1)
_FLOAT = struct.Struct("<f").pack
_DOUBLE = struct.Struct("<d").pack


class Unsupported(Exception):
    """A value the direct encoder does not handle (write the manifest with fastavro)."""


def long_bytes(n: int) -> bytes:
    """An Avro int or long: zig-zag, then a little-endian base-128 varint."""
    if type(n) is not int:  # bool, float, numpy ints: fastavro's business
        raise Unsupported(n)
    z = (n << 1) ^ (n >> 63)
    if 0 <= z < 0x80:
        return _ONE[z]
    if not 0 <= z < 1 << 64:
        raise Unsupported(n)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _text(s: Any) -> bytes:
    if type(s) is not str:
        raise Unsupported(s)
    b = s.encode()
    return long_bytes(len(b)) + b


def _blob(b: Any) -> bytes:
    if type(b) is not bytes:
        raise Unsupported(b)
    return long_bytes(len(b)) + b


def _opt_long(n: Any) -> bytes:
    return _NULL if n is None else _SOME + long_bytes(n)


def _value(branch: str, v: Any) -> bytes:
    """A partition value of union branch ``branch`` (not None)."""
    if branch in ("int", "long"):
        return long_bytes(v)
    if branch == "string":
        return _text(v)
    if branch == "bytes":
        return _blob(v)
    if branch == "boolean":
        if type(v) is not bool:
            raise Unsupported(v)
        return b"\x01" if v else b"\x00"
    if type(v) is not float:
        raise Unsupported(v)
    return _FLOAT(v) if branch == "float" else _DOUBLE(v)


#: the encodings of small ints (field ids, counts), looked up rather than computed
_SMALL = {n: long_bytes(n) for n in range(-64, 1 << 14)}


def _int_map(m: Any, out: bytearray, blob: bool) -> None:
    """An optional metric map: ``[{"key": id, "value": v}, ...]`` or None."""
    if m is None:
        out += _NULL
        return
    if type(m) is not list:
        if type(m) is tuple:  # fastavro's tagged union value ("array", items)
            m = m[1]
        if isinstance(m, Mapping):  # {id: value}, as avro.data_file takes it
            m = [{"key": k, "value": v} for k, v in m.items()]
    out += _SOME
    if m:
        small = _SMALL.get
        out += small(len(m)) or long_bytes(len(m))
        for kv in m:
            k = kv["key"]
            v = kv["value"]
            out += small(k) or long_bytes(k) if type(k) is int else long_bytes(k)
            if blob:
                if type(v) is not bytes:
                    raise Unsupported(v)
                out += small(len(v)) or long_bytes(len(v))
                out += v
            else:
                out += small(v) or long_bytes(v) if type(v) is int else long_bytes(v)
    out += _NULL


def _list(items: Any, out: bytearray) -> None:
    if items is None:
        out += _NULL
        return
    if type(items) is tuple:
        items = items[1]
    out += _SOME
    if items:
        out += long_bytes(len(items))
        for x in items:
            out += long_bytes(x)
    out += _NULL


def _head(key: tuple[Any, ...]) -> tuple[bytes, bytes]:
    """The bytes of an entry before its file path, and its file format."""
    status, sid, seq, fseq, content, fmt = key
    before = long_bytes(status) + _opt_long(sid) + _opt_long(seq) + _opt_long(fseq)
    return before + long_bytes(content), _text(fmt)


#: entry heads by (status, snapshot id, sequence numbers, content, format): one
#: snapshot's entries share a few
_HEADS: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}

_LONG_MAPS = ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts")
_BOUND_MAPS = ("lower_bounds", "upper_bounds")


def encode_entry(
    e: Mapping[str, Any], part: Sequence[tuple[str, str, str]], partition: Mapping[str, Any]
) -> bytes:
    """One ``manifest_entry`` record (``e``: an :func:`lakehouse.iceberg.avro.entry`
    dict) in Avro binary. ``part``: the partition record's fields (Iceberg name,
    Avro name, union branch); ``partition``: the values by Iceberg name.
    Unsupported when a value is not one this encoder writes exactly as fastavro."""
    df = e["data_file"]
    key = (
        e["status"],
        e.get("snapshot_id"),
        e.get("sequence_number"),
        e.get("file_sequence_number"),
        df["content"],
        df.get("file_format", "PARQUET"),
    )
    head = _HEADS.get(key)
    if head is None:
        head = _head(key)
        if len(_HEADS) > 1024:
            _HEADS.clear()
        _HEADS[key] = head
    out = bytearray(head[0])
    out += _text(df["file_path"])
    out += head[1]
    for name, _, branch in part:
        v = partition.get(name)
        if v is None:
            out += _NULL
        elif branch in _FAST_BRANCHES:
            out += _SOME
            out += _value(branch, v)
        else:
            raise Unsupported(branch)
    out += long_bytes(df["record_count"])
    out += long_bytes(df["file_size_in_bytes"])
    for k in _LONG_MAPS:
        _int_map(df.get(k), out, False)
    for k in _BOUND_MAPS:
        _int_map(df.get(k), out, True)
    km = df.get("key_metadata")
    out += _NULL if km is None else _SOME + _blob(km)
    _list(df.get("split_offsets"), out)
    _list(df.get("equality_ids"), out)
    out += _opt_long(df.get("sort_order_id"))
    return bytes(out)


_HEADERS: dict[tuple[Any, str], bytes] = {}


def _header(schema: Any, key: Any, metadata: dict[str, str], sync_marker: bytes) -> bytes:
    """The container's header as fastavro writes it (cached by ``key``, which names
    the schema, and the metadata)."""
    k = (key, repr(sorted(metadata.items())) + sync_marker.hex())
    h = _HEADERS.get(k)
    if h is None:
        buf = io.BytesIO()
        fastavro.writer(
            buf, schema, [], codec="deflate", metadata=metadata, sync_marker=sync_marker
        )
        h = buf.getvalue()
        if len(_HEADERS) > 256:
            _HEADERS.clear()
        _HEADERS[k] = h
    return h


def container(
    schema: Any,
    key: Any,
    records: Iterable[bytes],
    metadata: dict[str, str],
    sync_marker: bytes,
) -> bytes:
    """An Avro object container file (codec deflate) of already encoded records,
    byte for byte what ``fastavro.writer(..., codec="deflate")`` writes for them.
    ``schema``: the parsed schema; ``key``: a hashable name of it (its header is
    cached)."""
    out = bytearray(_header(schema, key, metadata, sync_marker))
    block = bytearray()
    count = 0

    def dump() -> None:
        data = zlib.compress(bytes(block))[2:-1]
        out.extend(long_bytes(count))
        out.extend(long_bytes(len(data)))
        out.extend(data)
        out.extend(sync_marker)

    for raw in records:
        block += raw
        count += 1
        if len(block) >= SYNC_INTERVAL:
            dump()
            block.clear()
            count = 0
    if block or count:
        dump()
    return bytes(out)
