"""Primary keys: the key index in the kvstore, and the uniqueness checks.

A table with a ``primary_key`` keeps, per live row, one kvstore entry::

    K/<table id>/<key column ids>/<encoded key>  ->  u32 BE row position | file id

(:func:`lakehouse.keys.key_index_prefix`). The entries are versioned like
every other key, so time travel, rollback and export see the index of their
version, and they are written by the same kvstore transaction as the rows.

**Invariant.** Every live row of a keyed table has an entry naming where it
is. Whatever adds rows writes their entries: writes (inlined or Parquet),
files Spark wrote and the driver adopts, compaction (the rows it moves),
restore, clone and ``alter_table(primary_key=...)`` (rebuilt from the rows).

**Deletes write nothing.** An entry is trusted only when its file is live and
its position not deleted at the version read (:func:`live`): a stale entry
reads as "absent", so a delete costs no index write, and a key deleted and
inserted again simply gets a new entry. Files are immutable, so a position
always holds the key its entry was written for.

**Cost per written row**: one key encoding and one entry (about 30 bytes
plus the file id) in the commit's kvstore batch; the check is one read of
the largest key indexed so far (:func:`high_key`) when the new keys sort
above it (ascending ids), else one point read per key (bloom-filtered in the
kvstore's tables), plus two reads per file the hits name.
Measured in docs/performance.md ("Keys and inlined rows").

Concurrent inserts of one key are refused by the commit's per-row check
(:mod:`lakehouse.data.rebase`): every write to a keyed table lists its keys
in ``TableWrite.inserted``, and a concurrent version that inserted one of
them makes the commit a :class:`~lakehouse.errors.RetryableConflict`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from kvstore.entries import MAX_KEY_LEN
from lakehouse import keys
from lakehouse import partition_encoding as pe
from lakehouse.data import dv as dvfmt
from lakehouse.data import rewrites
from lakehouse.data.rows import take_rows
from lakehouse.errors import DuplicateKey
from lakehouse.model import DataFile, Rewrite, TableDef

if TYPE_CHECKING:
    from lakehouse.data.buffer import TableData
    from lakehouse.data.predicate import Predicate
    from lakehouse.data.table import TableWrite

_BIAS = np.uint64(1 << 63)


# -- declaring a key ---------------------------------------------------------------------
def check_key_columns(schema: pa.Schema, pk: Sequence[str], table: str) -> None:
    """Raise ValueError unless every column of ``pk`` can be a key: integers,
    decimals, strings, binary, dates, times, timestamps, booleans. Floating-point
    values are refused (values that print alike differ, NaN is not equal to
    itself), as are nested types."""
    for name in pk:
        t = schema.field(name).type
        k = pe.kind(t)
        if k == "float":
            raise ValueError(
                f"primary key column {name!r} of {table} is {t}: floating-point values "
                "cannot be keys (use an integer, a decimal or a string)"
            )
        if k is None:
            raise ValueError(
                f"primary key column {name!r} of {table} is {t}, which cannot be a key"
            )


def prefix(d: TableDef) -> bytes:
    """The prefix of ``d``'s index entries."""
    ids = {c.name: c.id for c in d.columns}
    return keys.key_index_prefix(d.table_id, tuple(ids[n] for n in d.primary_key))


def high_key(pre: bytes) -> bytes:
    """Where the largest key ever indexed under prefix ``pre`` is kept (the prefix
    without its final ``/``, so no scan of the entries meets it). It never
    decreases (deletes leave it), so a write whose keys all sort above it needs
    no point read: ascending ids cost one read per write, not one per key."""
    return pre[:-1]


# -- encoding ----------------------------------------------------------------------------
def encode(d: TableDef, rows: pa.Table) -> list[bytes]:
    """The index key of each row: the table's prefix and the encoded key
    (order-preserving per column; several columns concatenated, each
    self-delimiting). ValueError if a key column is missing from ``rows`` or
    holds nulls."""
    pk = d.primary_key
    pre = prefix(d)
    cols = []
    for name in pk:
        if name not in rows.column_names:
            raise ValueError(f"the write has no primary key column {name!r} of {d.qualified_name}")
        col = rows.column(name)
        if col.null_count:
            raise ValueError(
                f"primary key column {name!r} of {d.qualified_name} is null in "
                f"{col.null_count} row(s) of the write; key columns may not be null"
            )
        cols.append((col, d.schema.field(name).type))
    if all(pe.kind(t) in _FIXED for _, t in cols):  # 8 bytes a column: built in numpy
        body = np.concatenate([_fixed_column(c, t) for c, t in cols], axis=1)
        return _rows_of(pre, body)
    parts = [_encode_column(c, t, len(pk) > 1) for c, t in cols]
    if len(parts) == 1:
        out = [pre + e for e in parts[0]]
    else:
        out = [pre + b"".join(x) for x in zip(*parts, strict=True)]
    _check_length(d, out)
    return out


def _check_length(d: TableDef, encs: list[bytes], extra: int = 0) -> None:
    """ValueError naming the key when a row's key (with ``extra`` bytes of prefix)
    is longer than a kvstore key may be."""
    longest = max(encs, key=len, default=b"")
    if len(longest) + extra > MAX_KEY_LEN:
        raise ValueError(
            f"primary key ({', '.join(d.primary_key)}) of {d.qualified_name}: row "
            f"{encs.index(longest)} of the write has a key of {len(longest) + extra} bytes "
            f"encoded; keys may be at most {MAX_KEY_LEN} bytes"
        )


#: key kinds encoded as 8 big-endian bytes (the integer with its sign bit flipped)
_FIXED = ("int", "bool", "date", "time", "ts")


def _fixed_column(col: Any, t: pa.DataType) -> np.ndarray:
    """An integer-like key column as an ``n x 8`` byte matrix (order-preserving)."""
    k = pe.kind(t)
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if k == "bool":
        arr = arr.cast(pa.int8())
    elif k != "int":  # days, or units since midnight / the epoch (Arrow casts
        # date32 and time32 only to their own width)
        arr = arr.cast(pa.int32() if t.bit_width == 32 else pa.int64())
    ints = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)
    return (ints.view(np.uint64) ^ _BIAS).astype(">u8").view(np.uint8).reshape(-1, 8)


def _rows_of(head: bytes, body: np.ndarray, tail: bytes = b"") -> list[bytes]:
    """``head + row + tail`` for each row of the byte matrix ``body``."""
    n, k = body.shape
    width = len(head) + k + len(tail)
    m = np.empty((n, width), dtype=np.uint8)
    m[:, : len(head)] = np.frombuffer(head, dtype=np.uint8)
    m[:, len(head) : len(head) + k] = body
    m[:, len(head) + k :] = np.frombuffer(tail, dtype=np.uint8)
    blob = m.tobytes()
    return [blob[i : i + width] for i in range(0, n * width, width)]


def _encode_column(col: Any, t: pa.DataType, delimited: bool) -> list[bytes]:
    k = pe.kind(t)
    if k in _FIXED:
        raw = _fixed_column(col, t).tobytes()
        return [raw[i : i + 8] for i in range(0, len(raw), 8)]
    values = col.to_pylist()
    if k == "str" and not delimited:
        return [v.encode("utf-8") for v in values]
    if k == "bytes" and not delimited:
        return [bytes(v) for v in values]
    return [pe.enc(v, t).encode("ascii") for v in values]


def key_text(d: TableDef, rows: pa.Table, i: int) -> str:
    """Row ``i``'s key, as the error messages show it."""
    vals = {n: rows.column(n)[i].as_py() for n in d.primary_key}
    if len(vals) == 1:
        return f"{d.primary_key[0]}={next(iter(vals.values()))!r}"
    return "(" + ", ".join(f"{n}={v!r}" for n, v in vals.items()) + ")"


# -- reading the index as a transaction sees it -----------------------------------------------
def _entries(
    buf: TableData, d: TableDef, w: TableWrite | None, encs: list[bytes]
) -> dict[int, bytes]:
    """For each position of ``encs`` with an entry, the entry's value: this
    transaction's own entries first, then those at its begin version."""
    own = w.index if w is not None else {}
    out: dict[int, bytes] = {}
    ask: list[int] | range = range(len(encs))
    if own:
        ask = []
        for i, e in enumerate(encs):
            v = own.get(e)
            if v is not None:
                out[i] = v
            else:
                ask.append(i)
    if not ask:
        return out
    get = buf.defs.get
    high = get(high_key(prefix(d)))
    lowest = min(encs) if len(ask) == len(encs) else min(encs[i] for i in ask)
    if high is None or lowest > high:
        return out  # every key asked for sorts above all keys ever indexed (ascending ids)
    # point reads, not a range probe: a scan would make the kvstore sort its
    # memtable's newest keys (measured: 4 ms per 1,000 keys; 1,000 reads: 0.5 ms)
    for i in ask:
        v = get(encs[i])
        if v is not None:
            out[i] = v
    return out


def live(
    buf: TableData, d: TableDef, w: TableWrite | None, encs: list[bytes]
) -> dict[int, tuple[str, int]]:
    """The keys of ``encs`` that a live row has (as this transaction sees the table),
    by position in ``encs``: that row's ``(file id, position)``."""
    found = _entries(buf, d, w, encs)
    if not found:
        return {}
    locs = {i: keys.decode_key_location(v) for i, v in found.items()}
    states: dict[str, tuple[DataFile, BitMap] | None] = {}
    out: dict[int, tuple[str, int]] = {}
    for i, (fid, pos) in locs.items():
        if fid not in states:
            states[fid] = buf.file_state(d, fid)
        fs = states[fid]
        if fs is not None and pos < fs[0].record_count and pos not in fs[1]:
            out[i] = (fid, pos)
    return out


#: a ``where`` fixing more key combinations than this is planned by file bounds
MAX_KEY_LOOKUPS = 100_000


def files_for_keys(
    buf: TableData, d: TableDef, pred: Predicate | None
) -> list[tuple[DataFile, BitMap]] | None:
    """The files holding the rows a ``where`` can match when it fixes every key
    column (``id = 5``, ``id IN (...)``, ANDed with anything): found through the
    index, without listing the table. None when it does not fix the key."""
    if not d.primary_key or pred is None:
        return None
    values: list[tuple[Any, ...]] = []
    for name in d.primary_key:
        fixed = [t for t in pred.terms if t.column == name and t.op in ("=", "in")]
        if not fixed:
            return None
        values.append(min((t.values for t in fixed), key=len))
    combos: list[tuple[Any, ...]] = [()]
    for vals in values:
        if len(combos) * len(vals) > MAX_KEY_LOOKUPS:
            return None
        combos = [(*c, v) for c in combos for v in vals]
    try:
        rows = pa.table(
            {
                n: pa.array([c[i] for c in combos], d.schema.field(n).type)
                for i, n in enumerate(d.primary_key)
            }
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None  # a value the column cannot hold: plan by bounds
    hits = live(buf, d, buf.writes.get((d.namespace, d.name)), encode(d, rows))
    out = []
    for fid in sorted({fid for fid, _ in hits.values()}):
        fs = buf.file_state(d, fid)
        if fs is not None:
            out.append(fs)
    return out


def lookup(buf: TableData, d: TableDef, rows: pa.Table) -> pa.Table:
    """The rows of ``rows`` (key columns of ``d``) whose key a live row has, with
    that row's ``path`` and ``position`` (see ``Transaction.lookup_keys``)."""
    if not d.primary_key:
        raise ValueError(f"{d.qualified_name} has no primary key to look up")
    hits = live(buf, d, buf.writes.get((d.namespace, d.name)), encode(d, rows))
    idx = sorted(hits)
    paths: dict[str, str] = {}
    for i in idx:
        fid = hits[i][0]
        if fid not in paths:
            fs = buf.file_state(d, fid)
            assert fs is not None  # live: checked
            paths[fid] = fs[0].path
    out = take_rows(rows.select(list(d.primary_key)), pa.array(idx, pa.int64()))
    out = out.append_column("path", pa.array([paths[hits[i][0]] for i in idx], pa.string()))
    return out.append_column("position", pa.array([hits[i][1] for i in idx], pa.int64()))


# -- checks and entries ------------------------------------------------------------------------
def check_new(buf: TableData, d: TableDef, w: TableWrite, rows: pa.Table) -> list[bytes]:
    """Raise :class:`DuplicateKey` if ``rows`` (about to be added to ``d``) repeat a
    key among themselves or share one with a live row; ValueError for null or
    missing key columns. Reads only: the caller writes nothing on error. Returns
    the rows' encoded keys."""
    encs = encode(d, rows)
    if len(set(encs)) != len(encs):
        seen: dict[bytes, int] = {}
        for i, e in enumerate(encs):
            if e in seen:
                raise DuplicateKey(
                    f"duplicate key {key_text(d, rows, i)} in {d.qualified_name}: the "
                    "write holds it twice"
                )
            seen[e] = i
    hits = live(buf, d, w, encs)
    if hits:
        i = min(hits)
        raise DuplicateKey(
            f"duplicate key {key_text(d, rows, i)} in {d.qualified_name}: a live row already has it"
        )
    return encs


def note_rows(
    w: TableWrite, d: TableDef, file_id: str, rows: pa.Table, encs: list[bytes] | None = None
) -> None:
    """Index entries for ``rows``, the rows of new file ``file_id`` in file order
    (``encs``: their encoded keys, when the caller has them)."""
    if encs is None:
        encs = encode(d, rows)
    _put(w, d, encs, _locations(file_id, len(encs)))


def _put(w: TableWrite, d: TableDef, encs: list[bytes], locations: list[bytes]) -> None:
    """Entries ``encs`` -> ``locations`` into the write, and its largest key under
    ``d``'s prefix (see :func:`high_key`)."""
    if not encs:
        return
    w.index.update(zip(encs, locations, strict=True))
    pre, top = prefix(d), max(encs)
    if top > w.index_high.get(pre, b""):
        w.index_high[pre] = top


def _locations(file_id: str, n: int, positions: np.ndarray | None = None) -> list[bytes]:
    """Entry values for rows ``positions`` (default ``0..n-1``) of file ``file_id``."""
    pos = np.arange(n, dtype=">u4") if positions is None else positions.astype(">u4")
    return _rows_of(b"", pos.view(np.uint8).reshape(-1, 4), file_id.encode("utf-8"))


def note_rewrite(w: TableWrite, d: TableDef, rows: pa.Table, r: Rewrite) -> None:
    """Index moves for the rows compaction ``r`` rewrote; ``rows`` is its input (the
    sources' live rows, source after source, in position order). At commit an
    entry moves only if it still names the old place (a concurrent update may
    have deleted the row and indexed its new version elsewhere)."""
    if not rows.num_rows:
        return
    encs = encode(d, rows)
    old: list[bytes] = []
    for fid, count, dv in r.sources:
        keep = np.ones(count, dtype=bool)
        keep[np.frombuffer(dvfmt.decode(dv).to_array(), dtype=np.uint32)] = False
        old += _locations(fid, int(keep.sum()), np.flatnonzero(keep))
    order = rewrites.decode_order(r.order) if r.order else None
    new: list[bytes] = []
    for out_id, count in rewrites.outputs(r):
        new += _locations(out_id, count)
    if order is not None:  # output row j holds input row order[j]: put the inputs in output order
        take = order.tolist()
        encs = [encs[i] for i in take]
        old = [old[i] for i in take]
    w.index_moves.update(zip(encs, zip(old, new, strict=True), strict=True))


def rebuild(buf: TableData, d: TableDef, w: TableWrite) -> None:
    """Index every live row of ``d`` as this transaction sees it (a primary key
    set on a table with rows, a restored or cloned table); DuplicateKey if two
    live rows share a key."""
    from lakehouse.data import scan
    from lakehouse.data.table import file_key_id

    cols = [c for c in d.columns if c.name in d.primary_key]
    seen: dict[bytes, None] = {}
    for f, dv in buf.files(d.namespace, d.name):
        t = scan.read_one(buf.ctx.data, d, (f, dv), cols, None, cols, with_positions=True)
        encs = encode(d, t)
        n_before = len(seen)
        seen.update(dict.fromkeys(encs))
        if len(seen) != n_before + len(encs):
            i = _first_repeat(encs, seen, n_before)
            raise DuplicateKey(
                f"duplicate key {key_text(d, t, i)} in {d.qualified_name}: two live rows "
                "have it, so it cannot be the primary key"
            )
        _put(w, d, encs, _locations(file_key_id(f), len(encs), t.column("_pos").to_numpy()))
    w.rebuilt = True


def _first_repeat(encs: list[bytes], seen: dict[bytes, None], n_before: int) -> int:
    """The first of ``encs`` that repeats an earlier one or one of the keys ``seen``
    held before them (its first ``n_before`` keys)."""
    earlier = set(list(seen)[:n_before])
    for i, e in enumerate(encs):
        if e in earlier:
            return i
        earlier.add(e)
    return 0


def commit_writes(
    get: Any,
    index: Mapping[bytes, bytes],
    highs: Mapping[bytes, bytes],
    moves: Mapping[bytes, tuple[bytes, bytes]],
    rebased: bool,
) -> list[tuple[bytes, bytes]]:
    """The kvstore puts of a commit's index entries at the head: new entries as
    they are, the largest key per prefix (``highs``) where it grows; moved ones
    (compaction) only where the head still names the old place when other
    versions committed meanwhile (``rebased``)."""
    out = list(index.items())
    for pre, enc in highs.items():
        cur = get(high_key(pre))
        if cur is None or enc > cur:
            out.append((high_key(pre), enc))
    if not rebased:
        out += [(k, new) for k, (_, new) in moves.items() if k not in index]
    else:
        out += [(k, new) for k, (old, new) in moves.items() if k not in index and get(k) == old]
    return out
