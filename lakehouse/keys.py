"""Every kvstore key the lakehouse uses, packed and parsed in this one module.

The lakehouse tree (TrinityLake's "object keys": a type prefix plus names)
and its version history are plain keys in one kvstore. A one-byte type tag
and a ``/`` start every key, so each kind of key is one contiguous range that
a prefix scan can list::

    key                                   value (see codec.py)
    ───────────────────────────────────   ─────────────────────────────────────
    H                                     head: latest version, 8-byte big-endian
    L/def                                 lakehouse definition
    L/oldest                              oldest retained version, 8-byte BE
    L/gc                                  data files queued for deletion, with times
    N/<ns>                                namespace definition
    T/<ns> 00 <table>                     table definition
    V/<ns> 00 <view>                      view definition
    S/<ns> 00 <table> 00 F/<file id>      data file record (data/record.py)
    S/<ns> 00 <table> 00 D/<file id>      its deletion vector (data/dv.py)
    S/<ns> 00 <table> 00 M                the smallest live and the largest committed
                                          plain file id (bound scans of plain ids)
    K/<table id>/<key column ids>/<key>   primary-key index: the location of the row
                                          with that key (data/keyindex.py)
    A/<app id>                            idempotent writes: latest app version
    R/<version, 20 decimal digits>        version record

Byte layout of a table key (names are UTF-8)::

    +----+----+---- ... ----+----+------- ... -------+
    | T  | /  |  namespace  | 00 |        table      |
    +----+----+---- ... ----+----+------- ... -------+

Why these choices:

* **Names never contain the separator.** Names may not contain control
  characters (model.py enforces it), so the NUL byte ``00`` cannot occur
  inside a name. Hence ``T/<ns>00`` is a prefix of exactly the tables of
  ``<ns>``: namespace ``a`` cannot capture ``ab``'s tables (``a 00`` vs
  ``a b``), and the table listing of a namespace is one range scan.
* **Order follows the names.** UTF-8 preserves code point order, and ``00``
  sorts below every byte a name can hold, so keys sort exactly like the
  tuples ``(namespace, table)`` compare in Python: listings come back sorted.
* **Versions sort numerically.** Record keys carry the version as 20
  zero-padded decimal digits (enough for any 64-bit number), so byte order
  is numeric order and ``R/`` scans walk history in order.
* **Dots are free in table names.** Qualified names are ``ns.table`` split on
  the first dot; namespaces may not contain dots, table and view names may.
  Keys never use dots, so nothing here depends on that rule.

Ordering and prefix properties are tested in tests/test_lakehouse_keys.py.
"""

from __future__ import annotations

import struct

HEAD = b"H"
LAKEHOUSE_DEF = b"L/def"
OLDEST = b"L/oldest"
PENDING_GC = b"L/gc"

NAMESPACE_PREFIX = b"N/"
TABLE_PREFIX = b"T/"
VIEW_PREFIX = b"V/"
STATE_PREFIX = b"S/"
RECORD_PREFIX = b"R/"
APP_PREFIX = b"A/"
KEY_INDEX_PREFIX = b"K/"

SEP = b"\x00"
_VERSION_DIGITS = 20
_U64 = struct.Struct(">Q")

#: object kinds and the prefix of their definition keys
KIND_PREFIX = {"namespace": NAMESPACE_PREFIX, "table": TABLE_PREFIX, "view": VIEW_PREFIX}

#: prefixes of every key that makes up a version's state (what rollback and
#: export copy); the version history and system keys are not state
STATE_PREFIXES = (NAMESPACE_PREFIX, TABLE_PREFIX, VIEW_PREFIX, STATE_PREFIX, KEY_INDEX_PREFIX)


def name_bytes(name: str) -> bytes:
    """``name`` as it goes into a key (UTF-8); ValueError if it holds a NUL."""
    b = name.encode("utf-8")
    if SEP in b:
        raise ValueError(f"name {name!r} contains a NUL character")
    return b


_utf8 = name_bytes


# -- integers ----------------------------------------------------------------
def encode_u64(n: int) -> bytes:
    return _U64.pack(n)


def decode_u64(b: bytes) -> int:
    if len(b) != _U64.size:
        raise ValueError(f"expected {_U64.size} bytes, got {len(b)}")
    return int(_U64.unpack(b)[0])


# -- objects ---------------------------------------------------------------------
def namespace_key(ns: str) -> bytes:
    return NAMESPACE_PREFIX + _utf8(ns)


def table_key(ns: str, table: str) -> bytes:
    return TABLE_PREFIX + _utf8(ns) + SEP + _utf8(table)


def view_key(ns: str, view: str) -> bytes:
    return VIEW_PREFIX + _utf8(ns) + SEP + _utf8(view)


def object_key(kind: str, ns: str, name: str | None = None) -> bytes:
    """The definition key of a ``namespace`` (name None), ``table`` or ``view``."""
    if kind == "namespace":
        return namespace_key(ns)
    if name is None:
        raise ValueError(f"a {kind} key needs a name")
    if kind == "table":
        return table_key(ns, name)
    if kind == "view":
        return view_key(ns, name)
    raise ValueError(f"unknown object kind {kind!r}")


def children_prefix(kind: str, ns: str) -> bytes:
    """Prefix of the ``table`` or ``view`` keys of namespace ``ns``."""
    if kind not in ("table", "view"):
        raise ValueError(f"namespaces hold tables and views, not {kind!r}")
    return KIND_PREFIX[kind] + _utf8(ns) + SEP


def parse_namespace_key(key: bytes) -> str:
    if not key.startswith(NAMESPACE_PREFIX):
        raise ValueError(f"not a namespace key: {key!r}")
    return key[len(NAMESPACE_PREFIX) :].decode("utf-8")


def parse_child_key(key: bytes) -> tuple[str, str]:
    """``(namespace, name)`` of a table or view key."""
    body = key[2:]
    if key[:2] not in (TABLE_PREFIX, VIEW_PREFIX) or body.count(SEP) != 1:
        raise ValueError(f"not a table or view key: {key!r}")
    ns, name = body.split(SEP)
    return ns.decode("utf-8"), name.decode("utf-8")


def child_name(prefix: bytes, key: bytes) -> str:
    """The plain name in ``key``, which starts with ``children_prefix(...)``."""
    return key[len(prefix) :].decode("utf-8")


# -- table state -------------------------------------------------------------------
def table_state_prefix(ns: str, table: str) -> bytes:
    """Prefix of every state key of one table (data files, deletion vectors, ...)."""
    return STATE_PREFIX + _utf8(ns) + SEP + _utf8(table) + SEP


def data_file_key(ns: str, table: str, file_id: str) -> bytes:
    """The state key listing one data file of a table."""
    return table_state_prefix(ns, table) + b"F/" + _utf8(file_id)


def dv_key(ns: str, table: str, file_id: str) -> bytes:
    """The state key holding a data file's deletion vector."""
    return table_state_prefix(ns, table) + b"D/" + _utf8(file_id)


def file_bound_key(ns: str, table: str) -> bytes:
    """The state key bounding the table's plain (unpartitioned) file ids.

    Plain file ids start with their creation time, so the files visible at an old
    version sort before those written after it, and files compaction replaced sort
    before what it wrote. This key holds the smallest live plain id and the largest
    plain id ever committed (:func:`encode_file_bounds`); a read at any version
    scans plain ids only between the bounds it sees, so time travel skips the keys
    of files written later, and a read after compaction the keys of the files it
    removed (which the kvstore keeps for older versions). The high bound never
    decreases, except when rollback copies an older state whole, bounds included.
    Partitioned ids (``p...``) are found by partition ranges instead.
    """
    return table_state_prefix(ns, table) + b"M"


def encode_file_bounds(low: str, high: str) -> bytes:
    """``low`` and ``high`` plain file ids, NUL-separated (ids never hold NUL)."""
    return _utf8(low) + SEP + _utf8(high)


def decode_file_bounds(raw: bytes) -> tuple[str, str]:
    low, sep, high = raw.partition(SEP)
    if not sep:
        raise ValueError(f"bad file-id bounds {raw!r}")
    return low.decode("utf-8"), high.decode("utf-8")


def plain_file_ranges(
    ns: str, table: str, kind: bytes, bounds: tuple[str, str] | None
) -> list[tuple[bytes, bytes | None]]:
    """Key ranges ``[start, end)`` of the ``kind`` (``b"F/"`` or ``b"D/"``) keys of a
    table's plain file ids, between ``bounds`` (low and high, both included; None:
    unbounded)."""
    base = table_state_prefix(ns, table) + kind
    ranges: list[tuple[bytes, bytes | None]] = [
        (base, base + b"p"),
        (base + b"q", prefix_end(base)),
    ]
    if bounds is None:
        return ranges
    start, stop = base + _utf8(bounds[0]), base + _utf8(bounds[1]) + SEP
    out: list[tuple[bytes, bytes | None]] = []
    for lo, hi in ranges:
        lo2 = max(lo, start)
        hi2 = stop if hi is None else min(hi, stop)
        if lo2 < hi2:
            out.append((lo2, hi2))
    return out


def state_file_id(prefix: bytes, key: bytes) -> tuple[str, str] | None:
    """``("F" | "D", file id)`` of a data-file or deletion-vector key under ``prefix``."""
    rest = key[len(prefix) :]
    if rest[:2] in (b"F/", b"D/"):
        return rest[:1].decode(), rest[2:].decode("utf-8")
    return None


def key_index_prefix(table_id: str, column_ids: tuple[int, ...]) -> bytes:
    """Prefix of a table's primary-key index entries (:mod:`lakehouse.data.keyindex`).

    Keyed by the table id, which renames keep, and by the ids of the key
    columns, so the entries of an earlier primary key can never be mistaken
    for those of the current one. Not under ``S/``: listing a table's files
    never reads its index.
    """
    cols = ",".join(str(c) for c in column_ids)
    return KEY_INDEX_PREFIX + _utf8(table_id) + b"/" + cols.encode("ascii") + b"/"


_LOCATION = struct.Struct(">I")


def encode_key_location(file_id: str, position: int) -> bytes:
    """An index entry's value: the row's position (4 bytes, big-endian), then its
    file id."""
    return _LOCATION.pack(position) + _utf8(file_id)


def decode_key_location(raw: bytes) -> tuple[str, int]:
    if len(raw) < _LOCATION.size:
        raise ValueError(f"bad key location {raw!r}")
    return raw[_LOCATION.size :].decode("utf-8"), int(_LOCATION.unpack_from(raw)[0])


def app_key(app_id: str) -> bytes:
    """Where the latest ``app_version`` of an idempotent writer is recorded."""
    return APP_PREFIX + _utf8(app_id)


def is_data_file_key(key: bytes) -> bool:
    if not key.startswith(STATE_PREFIX):
        return False
    parts = key.split(SEP, 2)
    return len(parts) == 3 and parts[2].startswith(b"F/")


def parse_state_key(key: bytes) -> tuple[str, str, bytes]:
    """``(namespace, table, suffix)`` of a table state key."""
    parts = key[len(STATE_PREFIX) :].split(SEP, 2)
    if not key.startswith(STATE_PREFIX) or len(parts) != 3:
        raise ValueError(f"not a table state key: {key!r}")
    return parts[0].decode("utf-8"), parts[1].decode("utf-8"), parts[2]


# -- versions ----------------------------------------------------------------------
def record_key(version: int) -> bytes:
    if version < 0 or version >= 10**_VERSION_DIGITS:
        raise ValueError(f"version {version} out of range")
    return RECORD_PREFIX + b"%020d" % version


def parse_record_key(key: bytes) -> int:
    digits = key[len(RECORD_PREFIX) :]
    if not key.startswith(RECORD_PREFIX) or len(digits) != _VERSION_DIGITS:
        raise ValueError(f"not a version record key: {key!r}")
    return int(digits)


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix``."""
    b = bytearray(prefix)
    while b and b[-1] == 0xFF:
        b.pop()
    if not b:
        return None
    b[-1] += 1
    return bytes(b)
