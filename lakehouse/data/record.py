"""The data-file record and the per-version table change: one encoding each.

A data file of a table is one kvstore key (``S/<ns>00<table>00F/<file id>``,
see :mod:`lakehouse.keys`) whose value is this record::

    +------+------------------------------------------------------------------+
    | 0x01 | {"kind":"file","id":...,"path":...,"size":...,"rows":...,         |
    |      |  "cols":[[column id, name in the file], ...],                      |
    |      |  "stats":[[column id, min, max, null count], ...],                 |
    |      |  "flen":..., "fcrc":..., "crc":...}                                |
    +------+------------------------------------------------------------------+

A file written under a partitioned spec also has ``"spec"`` (the
spec id) and ``"part"`` (its partition values, one per field of the spec, as
:func:`lakehouse.partition.encode_values` stores them).

An inline data file (rows kept in the kvstore, :mod:`lakehouse.data.inline`)
has a record of its own format, the same JSON (plus ``"inline":true``) as a
head followed by the rows' bytes, whose length and CRC-32C are ``size`` and
``crc``::

    +------+--------------------+-----------------------------------+---------+
    | 0x02 | u32 BE JSON length | {"kind":"file","inline":true,...} | payload |
    +------+--------------------+-----------------------------------+---------+

``flen``/``fcrc`` are the length and CRC-32C of the file's Thrift footer,
``crc`` the CRC-32C of the whole file (integrity; absent in older records,
which decode with None and skip those checks).

Column ids, not names, tie a file to the table: a column renamed or widened
after the file was written is still found in it, and a dropped column's id is
never reused, so an old file never lends its values to a new column.

Footer statistics are JSON values, tagged where JSON has no type for them
(:mod:`lakehouse.data.stats`). A version record carries, per table it
changed, a :class:`TableChange` (:func:`encode_change`); deletion vectors
inside it are base64 of :mod:`lakehouse.data.dv` bytes.

Anything malformed decodes to :class:`~lakehouse.errors.CorruptionError` and
nothing else (the kvstore checksums its blocks, so this guards against bugs
and foreign writers, and is fuzzed in fuzz/fuzz_lakehouse_records.py).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import replace
from typing import Any

from lakehouse.data.stats import encode_stat, footer_stats, stat_scalar, user_stats
from lakehouse.errors import CorruptionError
from lakehouse.model import DataFile, DataOp, Rewrite, TableChange

FORMAT = 1
_FORMAT_BYTE = bytes([FORMAT])
#: the format byte of an inline data file's record (JSON head, then the payload)
INLINE_FORMAT = 2
_INLINE_BYTE = bytes([INLINE_FORMAT])


# -- data file records -------------------------------------------------------------
def encode_file(f: DataFile) -> bytes:
    obj = {
        "kind": "file",
        "id": f.file_id,
        "path": f.path,
        "size": f.size,
        "rows": f.record_count,
        "cols": [[cid, name] for cid, name in f.columns],
        "stats": [list(s) for s in f.raw_stats],
        **_checksums(f),
        **_partition(f),
    }
    if f.inline is None:
        return _dump(obj)
    head = json.dumps({**obj, "inline": True}, separators=(",", ":")).encode()
    return b"".join((_INLINE_BYTE, len(head).to_bytes(4, "big"), head, f.inline))


def _checksums(f: DataFile) -> dict[str, int]:
    """The integrity keys of a file record (absent in records written before them)."""
    out = {}
    if f.footer_size is not None and f.footer_crc is not None:
        out["flen"], out["fcrc"] = f.footer_size, f.footer_crc
    if f.crc is not None:
        out["crc"] = f.crc
    return out


def _partition(f: DataFile) -> dict[str, Any]:
    """The partition keys of a file record (absent for files of spec 0 unpartitioned)."""
    if not (f.spec_id or f.raw_partition):
        return {}
    return {"spec": f.spec_id, "part": list(f.raw_partition)}


_FILE_CACHE: dict[bytes, DataFile] = {}
_FILE_CACHE_MAX = 65536


#: inline records (which hold their rows) are cached apart, up to this many bytes
_INLINE_CACHE_BYTES = 64 << 20
_INLINE_CACHE: dict[bytes, DataFile] = {}
_inline_cached = [0]


def decode_file(data: bytes) -> DataFile:
    """Decode a data-file record (cached by its bytes: records never change)."""
    if data[:1] == _INLINE_BYTE:
        g = _INLINE_CACHE.get(data)
        if g is None:
            g = _decode_inline(data)
            if _inline_cached[0] + 2 * len(data) > _INLINE_CACHE_BYTES:
                _INLINE_CACHE.clear()
                _inline_cached[0] = 0
            _INLINE_CACHE[data] = g
            _inline_cached[0] += 2 * len(data)  # the key and the payload's copy
        return g
    f = _FILE_CACHE.get(data)
    if f is None:
        f = _decode_file(data)
        if len(_FILE_CACHE) >= _FILE_CACHE_MAX:
            _FILE_CACHE.clear()
        _FILE_CACHE[data] = f
    return f


def _decode_inline(data: bytes) -> DataFile:
    """An inline file's record: ``0x02 | u32 BE length | JSON | payload``."""
    n = int.from_bytes(data[1:5], "big")
    if len(data) < 5 or n > len(data) - 5:
        raise CorruptionError(f"inline data file record: head of {n} bytes in {len(data)}")
    o = _parse(data[5 : 5 + n], "inline data file record")
    if o.get("inline") is not True or "id" not in o:
        raise CorruptionError("inline data file record: not marked inline")
    return replace(_file_of(o), inline=bytes(data[5 + n :]))


def _decode_file(data: bytes) -> DataFile:
    return _file_of(_load(data, "data file record"))


def _file_of(o: dict[str, Any]) -> DataFile:
    try:
        if o.get("kind") != "file":
            raise ValueError(f"kind {o.get('kind')!r}")
        if "id" not in o:  # written before table data: path, size and rows only
            return DataFile(_str(o["path"]), _nat(o["size"]), _nat(o["records"]))
        cols = tuple((_nat(cid), _str(name)) for cid, name in o["cols"])
        stats = tuple(
            (_nat(cid), _json_value(lo), _json_value(hi), None if n is None else _nat(n))
            for cid, lo, hi, n in o["stats"]
        )
        return DataFile(
            _str(o["path"]),
            _nat(o["size"]),
            _nat(o["rows"]),
            file_id=_str(o["id"]),
            columns=cols,
            raw_stats=stats,
            footer_size=_opt_nat(o.get("flen")),
            footer_crc=_opt_nat(o.get("fcrc")),
            crc=_opt_nat(o.get("crc")),
            spec_id=_nat(o.get("spec", 0)),
            raw_partition=tuple(_part_value(v) for v in o.get("part", ())),
        )
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
        raise CorruptionError(f"data file record: {exc!r}") from None


# -- table changes inside version records ---------------------------------------------
def encode_change(c: TableChange) -> dict[str, Any]:
    return {
        "table": c.table,
        "ops": list(c.ops),
        "added": list(c.added),
        "removed": list(c.removed),
        "deleted": {fid: _b64(dv) for fid, dv in sorted(c.deleted.items())},
        "rewrites": [_encode_rewrite(r) for r in c.rewrites],
        "keys": list(c.keys),
        **({"tid": c.table_id} if c.table_id else {}),
        **({"upd": {f: _b64(dv) for f, dv in sorted(c.updated.items())}} if c.updated else {}),
        **({"post": list(c.post)} if c.post else {}),
    }


def decode_change(o: Any) -> TableChange:
    """One entry of a version record's ``data`` list (CorruptionError if malformed)."""
    try:
        if not isinstance(o, dict):
            raise TypeError("not an object")
        return TableChange(
            table=_str(o["table"]),
            ops=tuple(_op(_str(x)) for x in o["ops"]),
            added=tuple(_str(x) for x in o["added"]),
            removed=tuple(_str(x) for x in o["removed"]),
            deleted={_str(k): _unb64(v) for k, v in dict(o["deleted"]).items()},
            rewrites=tuple(_decode_rewrite(x) for x in o["rewrites"]),
            keys=tuple(_str(x) for x in o["keys"]),
            table_id=_str(o.get("tid", "")),
            updated={_str(k): _unb64(v) for k, v in dict(o.get("upd", {})).items()},
            post=tuple(_str(x) for x in o.get("post", ())),
        )
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, binascii.Error) as exc:
        raise CorruptionError(f"table change in a version record: {exc!r}") from None


def _encode_rewrite(r: Rewrite) -> list[Any]:
    """``[new_id, sources]``, plus ``outputs`` and the encoded order when the rewrite
    wrote several files or sorted the rows (a clustering compaction)."""
    out: list[Any] = [r.new_id, [[fid, rows, _b64(dv)] for fid, rows, dv in r.sources]]
    if r.outputs or r.order:
        out += [[[fid, n] for fid, n in r.outputs], _b64(r.order)]
    return out


def _decode_rewrite(x: Any) -> Rewrite:
    new, srcs, *rest = x
    sources = tuple((_str(f), _nat(n), _unb64(dv)) for f, n, dv in srcs)
    if not rest:  # one output, rows in order (every record before clustering)
        return Rewrite(_str(new), sources)
    outs, order = rest
    return Rewrite(_str(new), sources, tuple((_str(f), _nat(n)) for f, n in outs), _unb64(order))


# -- helpers ---------------------------------------------------------------------------
def _dump(obj: dict[str, Any]) -> bytes:
    return _FORMAT_BYTE + json.dumps(obj, separators=(",", ":")).encode()


def _load(data: bytes, what: str) -> dict[str, Any]:
    if not data or data[0] != FORMAT:
        raise CorruptionError(f"{what}: unknown format byte {bytes(data[:1])!r}")
    return _parse(data[1:], what)


def _parse(text: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(bytes(text))
    except (ValueError, RecursionError) as exc:
        raise CorruptionError(f"{what}: bad JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise CorruptionError(f"{what}: expected a JSON object")
    return obj


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


def _op(v: str) -> DataOp:
    try:
        return DataOp(v)
    except ValueError:
        raise ValueError(f"unknown data operation {v!r}") from None


def _nat(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"expected a natural number, got {v!r}")
    return v


def _opt_nat(v: Any) -> int | None:
    return None if v is None else _nat(v)


def _json_value(v: Any) -> Any:
    if isinstance(v, list):
        if len(v) != 2 or v[0] not in ("i", "n", "d", "b"):
            raise ValueError(f"bad tagged statistic {v!r}")
    elif not (v is None or isinstance(v, (int, float, str, bool))):
        raise ValueError(f"bad statistic {v!r}")
    return v


def _part_value(v: Any) -> Any:
    """A stored partition value (JSON scalars, or a tagged pair; see lakehouse.partition)."""
    if isinstance(v, list):
        if len(v) != 2 or not isinstance(v[0], str):
            raise ValueError(f"bad tagged partition value {v!r}")
    elif not (v is None or isinstance(v, (int, float, str, bool))):
        raise ValueError(f"bad partition value {v!r}")
    return v


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(v: Any) -> bytes:
    return base64.b64decode(_str(v), validate=True)


__all__ = [
    "decode_change",
    "decode_file",
    "encode_change",
    "encode_file",
    "encode_stat",
    "footer_stats",
    "stat_scalar",
    "user_stats",
]
