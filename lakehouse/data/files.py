"""Parquet data files: naming, writing, reading through column ids, pruning.

**Names never repeat.** A data file of table ``t`` lives at::

    <table id>/<13-digit epoch ms>-<16 hex random>.parquet

under the lakehouse's data directory, and is created with ``put_if_absent``
(temp file, fsync, link, directory fsync on local disk; ``If-None-Match`` on
S3), so it is whole and durable before the commit that references it is
even attempted, and a second writer can never replace it. The time in the
name lets ``remove_orphan_files(older_than=...)`` judge a file's age on any
store without a modification-time call, and keeps a running transaction's
fresh files out of its reach.

**Reading through ids.** A file's record pairs each column id it holds with
the column's name in the file. A read asks for the table's *current*
columns: each is looked up by id (renames are free), cast to the current
type (widening: int32 -> int64, float32 -> float64), and filled with nulls
when the file predates the column. Deleted positions are dropped before any
filter, so row positions always mean positions in the file.

**Integrity** (see docs/lakehouse.md, "Integrity: what is checked where").
Every page carries a CRC-32 (``write_page_checksum``) that every read
verifies; the commit records the footer's length and CRC-32C and the whole
file's CRC-32C (:func:`checksums`), and a read checks the footer against
them before parsing it (:func:`check_tail`), so a damaged footer, statistic
or offset cannot drop or invent rows. Every failure to read a data file is
a :class:`~lakehouse.errors.CorruptionError` naming its path.

**Pruning.** Each file's footer bounds become an Arrow *guarantee*
(``min <= c <= max``, ``c is not null`` when it has no nulls); Arrow's own
expression simplification (``Dataset.get_fragments(filter=...)``) then says
which files a predicate can match at all. Only those are opened.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from crc32c import crc32c
from pyroaring import BitMap

from lakehouse.data import inline
from lakehouse.data.rows import filter_rows
from lakehouse.data.stats import footer_stats, stat_scalar
from lakehouse.errors import CorruptionError
from lakehouse.model import Column, DataFile, rows_without_field_ids
from lakehouse.terms import Term

log = logging.getLogger("lakehouse")

SUFFIX = ".parquet"
MAGIC = b"PAR1"

#: reads verify page checksums and recorded footer/file checksums; only the read
#: benchmark turns this off, to measure what the checks cost
VERIFY = True


def file_path(table_id: str, now_ms: int, rand64: int) -> tuple[str, str]:
    """``(file id, relative path)`` of a new data file."""
    file_id = f"{now_ms:013d}-{rand64:016x}"
    return file_id, f"{table_id}/{file_id}{SUFFIX}"


def created_ms(path: str) -> int | None:
    """The creation time a data file's path encodes (None if not ours): its name's
    ``<13-digit epoch ms>-`` prefix, or that of a directory it sits in (the
    staging directories of Spark jobs, whose files Spark names ``part-...``)."""
    if not path.endswith(SUFFIX):
        return None
    parts = path.split("/")
    parts[-1] = parts[-1][: -len(SUFFIX)]
    for part in reversed(parts):
        head = part.split("-", 1)[0]
        if head.isdigit() and len(head) == 13:
            return int(head)
    return None


def file_id_of(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    for suffix in (SUFFIX, inline.SUFFIX):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


# -- writing ---------------------------------------------------------------------------
def encode_parquet(table: pa.Table, row_group_rows: int | None = None) -> tuple[bytes, Any]:
    """Parquet bytes of ``table`` and their footer (no need to parse it back);
    ``row_group_rows``: rows per row group (sorted files: small groups let a read
    with a ``where`` skip most of them by their statistics). Field ids in the
    schema are not written (:func:`~lakehouse.model.without_field_ids`)."""
    table = rows_without_field_ids(table)
    buf = io.BytesIO()
    footer: list[Any] = []
    write_parquet(
        table,
        buf,
        metadata_collector=footer,
        **({} if row_group_rows is None else {"row_group_size": row_group_rows}),
    )
    return buf.getvalue(), footer[0]


def write_parquet(table: pa.Table, sink: Any, **options: Any) -> None:
    """Writes ``table`` to ``sink`` with the settings of every Parquet file the
    lakehouse writes: snappy, no dictionaries, statistics, page checksums
    (``options``: further :func:`pyarrow.parquet.write_table` arguments)."""
    # snappy without dictionaries: small files decode in about half the CPU of
    # zstd with dictionaries (measured: 300 files of 1,000 rows, 75 vs 142 ms)
    pq.write_table(
        table,
        sink,
        compression="snappy",
        use_dictionary=False,
        write_statistics=True,
        write_page_checksum=True,
        **options,
    )


def checksums(data: bytes | memoryview, path: str) -> dict[str, int]:
    """``footer_size``, ``footer_crc`` and ``crc`` of the Parquet bytes ``data``
    (the :class:`DataFile` fields a commit records; ValueError if ``data`` has
    no Parquet tail)."""
    view = memoryview(data)
    n = len(view)
    if n < 12 or bytes(view[-4:]) != MAGIC:
        raise ValueError(f"{path} is not a Parquet file (no PAR1 at its end)")
    flen = int.from_bytes(view[-8:-4], "little")
    if flen > n - 12:
        raise ValueError(f"{path} is not a Parquet file (footer length {flen} of {n} bytes)")
    return {
        "footer_size": flen,
        "footer_crc": crc32c(view[n - 8 - flen : n - 8]),
        "crc": crc32c(view),
    }


class Recorded(Protocol):
    """What :func:`check_tail` needs of a file's record (a DataFile, a ScanFile)."""

    @property
    def path(self) -> str: ...
    @property
    def footer_size(self) -> int | None: ...
    @property
    def footer_crc(self) -> int | None: ...


def tail_length(f: Recorded) -> int | None:
    """Bytes at the end of ``f`` that :func:`check_tail` needs (None: nothing recorded)."""
    return None if f.footer_size is None else f.footer_size + 8


def check_tail(tail: bytes | memoryview, f: Recorded) -> None:
    """Check the last bytes of ``f`` (at least :func:`tail_length`) against its
    record: the footer's length and CRC-32C. CorruptionError naming the path."""
    if f.footer_size is None or f.footer_crc is None or not VERIFY:
        return
    view = memoryview(tail)
    n = len(view)
    if n < f.footer_size + 8 or bytes(view[-4:]) != MAGIC:
        raise CorruptionError(f"data file {f.path} is damaged: its Parquet tail is not intact")
    flen = int.from_bytes(view[-8:-4], "little")
    if flen != f.footer_size:
        raise CorruptionError(
            f"data file {f.path} is damaged: footer length {flen}, recorded {f.footer_size}"
        )
    if crc32c(view[n - 8 - flen : n - 8]) != f.footer_crc:
        raise CorruptionError(f"data file {f.path} is damaged: its footer checksum differs")


class RecordedFile(Recorded, Protocol):
    """What :func:`check_bytes` needs of a file's record (a DataFile, a Spark task's)."""

    @property
    def size(self) -> int: ...
    @property
    def crc(self) -> int | None: ...


def check_bytes(data: bytes | memoryview, f: RecordedFile) -> None:
    """Check the whole bytes of ``f`` against its record: size, footer, CRC-32C."""
    if not VERIFY:
        return
    if f.size and len(data) != f.size:
        raise CorruptionError(
            f"data file {f.path} is damaged: it holds {len(data)} bytes, recorded {f.size}"
        )
    check_tail(data, f)
    if f.crc is not None and crc32c(data) != f.crc:
        raise CorruptionError(f"data file {f.path} is damaged: its checksum differs")


def describe(path: str, data: bytes, columns: Sequence[Column]) -> DataFile:
    """The record of a Parquet file ``data`` about to live at ``path``."""
    try:
        meta = pq.ParquetFile(pa.BufferReader(data)).metadata
        schema = meta.schema.to_arrow_schema()
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{path} is not a readable Parquet file: {exc}") from None
    return describe_footer(path, len(data), meta, schema, columns, data)


def describe_footer(
    path: str,
    size: int,
    meta: Any,
    schema: pa.Schema,
    columns: Sequence[Column],
    data: bytes | memoryview | None = None,
) -> DataFile:
    """A record from a footer; the file's columns are matched to ``columns`` by name.
    With the file's bytes ``data``, it records their checksums."""
    by_name = {c.name: c for c in columns}
    ids: dict[str, int] = {}
    types: dict[str, pa.DataType] = {}
    for f in schema:
        c = by_name.get(f.name)
        if c is not None:
            ids[f.name] = c.id
            types[f.name] = f.type
    sums = checksums(data, path) if data is not None else {}
    return DataFile(
        path,
        size,
        meta.num_rows,
        file_id=file_id_of(path),
        columns=tuple((cid, name) for name, cid in ids.items()),
        raw_stats=footer_stats(meta, ids, types),
        footer_size=sums.get("footer_size"),
        footer_crc=sums.get("footer_crc"),
        crc=sums.get("crc"),
    )


# -- reading ------------------------------------------------------------------------------
#: what reading damaged Parquet bytes can raise inside pyarrow (besides its own errors)
READ_ERRORS = (pa.ArrowException, OSError, ValueError, IndexError, UnicodeDecodeError)


def open_parquet(data: bytes, path: str, f: DataFile | None = None) -> pq.ParquetFile:
    """``data`` as a ParquetFile that verifies page checksums; with ``f``, the bytes
    are first checked against its record (:func:`check_bytes`)."""
    if f is not None:
        check_bytes(data, f)
    try:
        return pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=VERIFY)
    except READ_ERRORS as exc:
        raise CorruptionError(f"data file {path} is not readable Parquet: {exc}") from None


def keep_mask(rows: int, deleted: BitMap | None) -> pa.Array | None:
    """Boolean mask of the rows a deletion vector keeps (None: keep all)."""
    if not deleted:
        return None
    mask = np.ones(rows, dtype=bool)
    idx = np.frombuffer(deleted.to_array(), dtype=np.uint32)
    mask[idx[idx < rows]] = False
    return pa.array(mask)


def read_file(
    data: bytes,
    f: DataFile,
    columns: Sequence[Column],
    schema: pa.Schema,
    deleted: BitMap | None,
    *,
    with_positions: bool = False,
) -> pa.Table:
    """The live rows of one file as the table's ``columns`` (in that order).

    ``schema`` holds the current fields of ``columns``. With
    ``with_positions`` a ``_pos`` column (uint32 row position in the file) is
    appended. For an inline file, ``data`` is its payload (``f.inline``).
    """
    if f.is_inline:
        check_bytes(data, f)
        rows = inline.decode(data, f.path)
        wanted, names = _in_file(rows.schema, f, columns)
        if rows.num_rows != f.record_count:
            raise CorruptionError(
                f"inline data file {f.path} holds {rows.num_rows} rows; its record says "
                f"{f.record_count}"
            )
        raw = rows.select(names)
        return _shaped(raw, wanted, names, columns, schema, deleted, with_positions, None, f)
    pf = open_parquet(data, f.path, f)
    try:
        wanted, names = _in_file(pf.schema_arrow, f, columns)
        raw = pf.read(columns=names, use_threads=False)
    except READ_ERRORS as exc:
        raise CorruptionError(f"data file {f.path} could not be read: {exc}") from None
    if raw.num_rows != f.record_count:
        raise CorruptionError(
            f"data file {f.path} holds {raw.num_rows} rows; its record says {f.record_count}"
        )
    return _shaped(raw, wanted, names, columns, schema, deleted, with_positions, None, f)


#: rows decoded at a time when a file is streamed (:func:`iter_file`): 64Ki rows of
#: eight 8-byte columns are 4 MiB, whatever the file's size
STREAM_BATCH_ROWS = 64 * 1024


def iter_file(
    data: bytes,
    f: DataFile,
    columns: Sequence[Column],
    schema: pa.Schema,
    deleted: BitMap | None,
    batch_rows: int | None = None,
) -> Iterator[pa.Table]:
    """The rows :func:`read_file` returns, in order, decoded ``batch_rows`` rows at
    a time (default :data:`STREAM_BATCH_ROWS`; Parquet pages are decoded as the
    batches are taken), so at most one batch of the file is decoded at once.

    The same checks as :func:`read_file`, at the same moments: the bytes against
    the record and the row count before any row is decoded, page checksums as
    each page is. An inline file, and a read of no column the file holds, come
    as one part (read_file's)."""
    pf = open_parquet(data, f.path, f) if not f.is_inline else None
    wanted, names = _in_file(pf.schema_arrow, f, columns) if pf is not None else ([], [])
    if pf is None or not names:
        yield read_file(data, f, columns, schema, deleted)
        return
    if pf.metadata.num_rows != f.record_count:
        raise CorruptionError(
            f"data file {f.path} holds {pf.metadata.num_rows} rows; its record says "
            f"{f.record_count}"
        )
    gone = np.frombuffer(deleted.to_array(), dtype=np.uint32) if deleted else None
    size = STREAM_BATCH_ROWS if batch_rows is None else batch_rows
    batches = pf.iter_batches(batch_size=size, columns=names, use_threads=False)
    start = 0
    while True:
        try:
            batch = next(batches, None)
        except READ_ERRORS as exc:
            raise CorruptionError(f"data file {f.path} could not be read: {exc}") from None
        if batch is None:
            break
        n = batch.num_rows
        part = _shaped(
            pa.Table.from_batches([batch]), wanted, names, columns, schema, None, False, None, f
        )
        del batch
        if gone is not None:
            part = drop_positions(part, gone, start)
        start += n
        yield part
        del part
    if start != f.record_count:
        raise CorruptionError(
            f"data file {f.path} holds {start} rows; its record says {f.record_count}"
        )


def drop_positions(t: pa.Table, gone: np.ndarray[Any, Any], start: int) -> pa.Table:
    """Rows ``start .. start + len(t)`` of a file (``t``) without the deleted
    positions ``gone`` (sorted) that fall among them."""
    n = t.num_rows
    lo, hi = np.searchsorted(gone, [start, start + n])
    if hi <= lo:
        return t
    keep = np.ones(n, dtype=bool)
    keep[gone[lo:hi] - start] = False
    return filter_rows(t, pa.array(keep))


def _in_file(
    file_schema: pa.Schema, f: DataFile, columns: Sequence[Column]
) -> tuple[list[tuple[Column, str | None]], list[str]]:
    """Each of ``columns`` with its name in the file (None: absent), and the names to read."""
    in_file = dict(f.columns) if f.columns else None
    file_names = set(file_schema.names)
    wanted: list[tuple[Column, str | None]] = []
    for c in columns:
        name = in_file.get(c.id) if in_file is not None else c.name
        wanted.append((c, name if name in file_names else None))
    return wanted, [n for _, n in wanted if n is not None]


def _shaped(
    raw: pa.Table,
    wanted: list[tuple[Column, str | None]],
    names: list[str],
    columns: Sequence[Column],
    schema: pa.Schema,
    deleted: BitMap | None,
    with_positions: bool,
    positions: np.ndarray | None,
    f: DataFile,
) -> pa.Table:
    """Rows ``raw`` read from ``f`` as the table's ``columns``, deleted rows dropped.
    ``positions``: each row's position in the file (None: all rows, in order)."""
    if positions is None:
        mask = keep_mask(raw.num_rows, deleted)
    elif deleted:
        mask = pa.array(~np.isin(positions, np.frombuffer(deleted.to_array(), dtype=np.uint32)))
    else:
        mask = None
    if not with_positions and names == [c.name for c in columns]:  # no renames, none missing
        direct = raw.cast(schema) if raw.schema != schema else raw
        return direct if mask is None else filter_rows(direct, mask)
    arrays = []
    fields = []
    for c, name in wanted:
        field = schema.field(c.name)
        if name is None:
            arr: Any = pa.nulls(raw.num_rows, field.type)
        else:
            arr = raw.column(name)
            if arr.type != field.type:
                arr = arr.cast(field.type)
        arrays.append(arr)
        fields.append(field.with_nullable(True))
    if with_positions:
        pos = np.arange(raw.num_rows, dtype=np.uint32) if positions is None else positions
        arrays.append(pa.array(pos.astype(np.uint32, copy=False)))
        fields.append(pa.field("_pos", pa.uint32()))
    out = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    return out if mask is None else filter_rows(out, mask)


# -- reading by byte ranges ---------------------------------------------------------------
#: files larger than this are read by byte ranges when a read's terms can skip row
#: groups (:func:`read_ranges`); smaller ones are fetched whole. Measured on
#: clustered files (16Ki-row groups, local disk, `id = x`, median of 20): 20 MB
#: whole ~8 ms, by ranges ~2.5 ms; 3.8 MiB 2.5 vs 1.9 ms. Below this the gain is
#: under a millisecond, and on an object store the ranged path's extra request
#: (tail, then row groups) costs more than fetching the small file whole.
RANGED_READ_BYTES = 4 << 20

#: column chunks at most this far apart are fetched by one range
COALESCE_GAP = 64 << 10

#: reads ``length`` bytes of a file at ``start``
GetRange = Callable[[int, int], bytes]


class _RowGroupView:
    """One row group of a footer, shaped as a footer (what footer_stats reads)."""

    def __init__(self, meta: Any, r: int) -> None:
        self.schema = meta.schema
        self.num_columns = meta.num_columns
        self.num_row_groups = 1
        self._rg = meta.row_group(r)

    def row_group(self, r: int) -> Any:
        return self._rg


def read_ranges(
    get: GetRange,
    f: DataFile,
    columns: Sequence[Column],
    schema: pa.Schema,
    deleted: BitMap | None,
    terms: Sequence[Term],
    table_columns: Sequence[Column],
    table_schema: pa.Schema,
    *,
    with_positions: bool = False,
) -> pa.Table | None:
    """The live rows of ``f`` (as :func:`read_file`) in the row groups whose footer
    statistics allow every one of ``terms``, reading only the bytes they use.

    The tail is fetched and checked against the record (:func:`check_tail`),
    then only the chosen row groups' column chunks (adjacent ones coalesced)
    are fetched and decoded with page checksums verified. Rows of the other
    row groups may be left out: no row of theirs can match the terms.
    ``table_columns`` and ``table_schema``: the table's current columns the
    terms name. None when ranges would read (nearly) the whole file or the
    decoding failed: the caller reads the file whole, whose checks then name
    the damage.
    """
    n = tail_length(f)
    if n is None or f.size <= n:
        return None
    tail = get(f.size - n, n)
    if len(tail) != n:
        raise CorruptionError(
            f"data file {f.path} is damaged: it holds fewer bytes than recorded ({f.size})"
        )
    check_tail(tail, f)
    footer = _footer(tail, f)
    meta, file_schema, counts = footer.meta, footer.schema, footer.counts
    if sum(counts) != f.record_count:
        raise CorruptionError(
            f"data file {f.path} holds {sum(counts)} rows; its record says {f.record_count}"
        )
    keep = _row_groups(footer, f, terms, table_columns, table_schema)
    if len(keep) > len(counts) // 2:
        return None  # most of the file: read it whole
    wanted, names = _in_file(file_schema, f, columns)
    paths = [meta.schema.column(j).path for j in range(meta.num_columns)]
    leaves = [j for j, p in enumerate(paths) if any(p == m or p.startswith(m + ".") for m in names)]
    chunks = []
    for r in keep:
        rg = meta.row_group(r)
        for j in leaves:
            col = rg.column(j)
            start = col.data_page_offset
            if col.has_dictionary_page and col.dictionary_page_offset is not None:
                start = min(start, col.dictionary_page_offset)
            chunks.append((start, start + col.total_compressed_size))
    # a buffer of the file's size holding the bytes fetched (the rest is never read:
    # not zeroed, as its pages are then only mapped where written)
    whole = pa.allocate_buffer(f.size)
    buf = np.frombuffer(whole, dtype=np.uint8)
    buf[f.size - n :] = np.frombuffer(tail, dtype=np.uint8)
    for start, end in _coalesced(chunks):
        if start < 0 or end > f.size - n:
            raise CorruptionError(f"data file {f.path} is damaged: a column chunk lies outside it")
        got = get(start, end - start)
        if len(got) != end - start:
            raise CorruptionError(
                f"data file {f.path} is damaged: it holds fewer bytes than recorded ({f.size})"
            )
        buf[start:end] = np.frombuffer(got, dtype=np.uint8)
    try:
        pf = pq.ParquetFile(whole, metadata=meta, page_checksum_verification=VERIFY)
        raw = pf.read_row_groups(keep, columns=names, use_threads=False)
    except READ_ERRORS as exc:  # damage in the bytes read (or bytes we did not fetch)
        log.debug("data file %s: ranged read failed, reading it whole: %s", f.path, exc)
        return None
    starts = np.concatenate([[0], np.cumsum(counts)])
    if raw.num_rows != sum(counts[r] for r in keep):
        return None
    positions = (
        np.concatenate([np.arange(starts[r], starts[r + 1], dtype=np.int64) for r in keep])
        if keep
        else np.zeros(0, dtype=np.int64)
    )
    return _shaped(raw, wanted, names, columns, schema, deleted, with_positions, positions, f)


@dataclasses.dataclass
class _Footer:
    """A parsed footer, kept by the record's footer checksum (a tail that passed
    :func:`check_tail` holds exactly these bytes)."""

    meta: Any
    schema: pa.Schema
    counts: list[int]
    #: per set of (name in the file, column id): one record per row group, its bounds
    groups: dict[tuple[tuple[str, int], ...], list[DataFile]] = dataclasses.field(
        default_factory=dict
    )


#: parsed footers of recently range-read files, by (path, footer length, footer CRC)
_FOOTERS: OrderedDict[tuple[str, int | None, int | None], _Footer] = OrderedDict()
_FOOTERS_KEPT = 64
_FOOTERS_LOCK = threading.Lock()


def _footer(tail: bytes, f: DataFile) -> _Footer:
    key = (f.path, f.footer_size, f.footer_crc)
    with _FOOTERS_LOCK:
        found = _FOOTERS.get(key)
        if found is not None:
            _FOOTERS.move_to_end(key)
            return found
    try:
        meta = pq.read_metadata(pa.BufferReader(tail))
        schema = meta.schema.to_arrow_schema()
    except READ_ERRORS as exc:
        raise CorruptionError(f"data file {f.path} is not readable Parquet: {exc}") from None
    counts = [meta.row_group(r).num_rows for r in range(meta.num_row_groups)]
    footer = _Footer(meta, schema, counts)
    with _FOOTERS_LOCK:
        _FOOTERS[key] = footer
        while len(_FOOTERS) > _FOOTERS_KEPT:
            _FOOTERS.popitem(last=False)
    return footer


def _row_groups(
    footer: _Footer,
    f: DataFile,
    terms: Sequence[Term],
    table_columns: Sequence[Column],
    table_schema: pa.Schema,
) -> list[int]:
    """Row groups whose statistics allow every term (as files are pruned by their
    records' bounds: :func:`lakehouse.data.bounds.prune`, on one record per row
    group, kept with the footer so their decoded bounds are too)."""
    from lakehouse.data import bounds

    named = {t.column for t in terms}
    cols = [c for c in table_columns if c.name in named]
    in_file = dict(f.columns) if f.columns else {c.id: c.name for c in cols}
    ids = {in_file[c.id]: c.id for c in cols if in_file.get(c.id) in footer.schema.names}
    key = tuple(sorted(ids.items()))
    groups = footer.groups.get(key)
    if groups is None:
        types = {name: footer.schema.field(name).type for name in ids}
        meta = footer.meta
        groups = footer.groups[key] = [
            DataFile(
                f.path,
                record_count=meta.row_group(r).num_rows,
                columns=f.columns,
                raw_stats=footer_stats(_RowGroupView(meta, r), ids, types),
            )
            for r in range(meta.num_row_groups)
        ]
    return bounds.prune(groups, terms, cols, table_schema)


def _coalesced(chunks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte ranges covering ``chunks``, those at most COALESCE_GAP apart merged."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(chunks):
        if out and start - out[-1][1] <= COALESCE_GAP:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


# -- pruning ---------------------------------------------------------------------------
#: up to this many bounded float columns, pruning checks every combination of NaN among them
NAN_CASES_UP_TO = 3


def guarantee(
    f: DataFile,
    columns: Sequence[Column],
    schema: pa.Schema,
    *,
    nan: AbstractSet[str] = frozenset(),
    free: AbstractSet[str] = frozenset(),
) -> pc.Expression:
    """What every row of ``f`` satisfies, by its footer bounds.

    Each bound is a comparison of its own (``c >= min``, ``c <= max``, each
    ``or c is null`` when the file may hold nulls; ``c == v`` when both are
    one value; ``c is not null`` when it has no nulls and no bounds), so a
    missing bound drops only itself. Parquet writers leave
    NaN out of float bounds, so the guarantee covers the rows where no
    bounded float column is NaN; the rows where the float columns ``nan``
    are NaN are covered by the guarantee saying so, with nothing said of
    the float columns in ``free``.
    """
    stats = {cid: (lo, hi, n) for cid, lo, hi, n in f.raw_stats}
    in_file = dict(f.columns)
    parts: list[pc.Expression] = []
    for c in columns:
        field = pc.field(c.name)
        if in_file and c.id not in in_file:
            parts.append(field.is_null())  # the file predates the column
            continue
        if c.id not in stats or c.name in free:
            continue
        typ = schema.field(c.name).type
        floating = pa.types.is_floating(typ)
        if c.name in nan:
            parts.append(field == pa.scalar(math.nan, typ))
            continue
        lo, hi, nulls = stats[c.id]
        if nulls is not None and nulls == f.record_count and f.record_count > 0:
            parts.append(field.is_null())
            continue
        a, b = stat_scalar(lo, typ), stat_scalar(hi, typ, upper=True)
        may_be_null = nulls is None or nulls > 0
        if a is not None and b is not None and not may_be_null and a.equals(b) and not floating:
            parts.append(field == a)  # a known value: Arrow substitutes it (not -0.0 for 0.0)
            continue
        for bound in (None if a is None else field >= a, None if b is None else field <= b):
            if bound is not None:
                parts.append(bound | field.is_null() if may_be_null else bound)
        if a is None and b is None and not may_be_null:
            parts.append(field.is_valid())
    expr: pc.Expression = pc.scalar(True)
    for i, part in enumerate(parts):
        expr = part if i == 0 else expr & part
    return expr


def prune(
    files: Sequence[DataFile],
    predicate: pc.Expression | None,
    columns: Sequence[Column],
    schema: pa.Schema,
) -> list[int]:
    """Indexes of the ``files`` whose bounds allow a row matching ``predicate``.

    A file is skipped only when Arrow proves the predicate false under its
    guarantee, and also under the guarantee of each case of NaN among the
    float columns it bounds (``x != 1`` and ``NOT x < 5`` hold for NaN,
    which no bound includes): every combination of them up to
    :data:`NAN_CASES_UP_TO` columns, beyond that one column NaN and the
    others unknown. Bounds Arrow cannot compare keep their files.
    """
    if predicate is None or not files:
        return list(range(len(files)))
    floats = {c.id: c.name for c in columns if pa.types.is_floating(schema.field(c.name).type)}
    try:
        keep = set(_allowing(files, range(len(files)), predicate, columns, schema))
        cases: dict[tuple[frozenset[str], frozenset[str]], list[int]] = {}
        for i, f in enumerate(files):
            if i in keep or not floats:
                continue
            bounded = sorted(
                floats[cid]
                for cid, lo, hi, _ in f.raw_stats
                if cid in floats and (lo is not None or hi is not None)
            )
            for case in _nan_cases(bounded):
                cases.setdefault(case, []).append(i)
        for (nan, free), indexes in cases.items():
            if not _possible([_all_nan(nan, schema)], predicate, schema):
                continue  # false whatever the other columns hold (x > 5 when x is NaN)
            todo = [i for i in indexes if i not in keep]
            keep.update(_allowing(files, todo, predicate, columns, schema, nan, free))
    except (pa.ArrowException, TypeError, ValueError) as exc:  # bounds we cannot compare
        log.debug("no pruning: %s", exc)
        return list(range(len(files)))
    return sorted(keep)


def _nan_cases(names: list[str]) -> list[tuple[frozenset[str], frozenset[str]]]:
    """``(NaN columns, unknown columns)`` cases covering every row with a NaN in ``names``."""
    if len(names) <= NAN_CASES_UP_TO:
        return [
            (frozenset(s), frozenset())
            for k in range(1, len(names) + 1)
            for s in itertools.combinations(names, k)
        ]
    return [(frozenset([n]), frozenset(names) - {n}) for n in names]


def _allowing(
    files: Sequence[DataFile],
    indexes: Iterable[int],
    predicate: pc.Expression,
    columns: Sequence[Column],
    schema: pa.Schema,
    nan: AbstractSet[str] = frozenset(),
    free: AbstractSet[str] = frozenset(),
) -> list[int]:
    """Those of ``indexes`` whose guarantee (see :func:`guarantee`) allows ``predicate``."""
    indexes = list(indexes)
    guarantees = [guarantee(files[i], columns, schema, nan=nan, free=free) for i in indexes]
    return [indexes[j] for j in _possible(guarantees, predicate, schema)]


def _all_nan(names: AbstractSet[str], schema: pa.Schema) -> pc.Expression:
    expr: pc.Expression = pc.scalar(True)
    for n in sorted(names):
        expr = expr & (pc.field(n) == pa.scalar(math.nan, schema.field(n).type))
    return expr


def _possible(
    guarantees: list[pc.Expression], predicate: pc.Expression, schema: pa.Schema
) -> list[int]:
    """Indexes of the ``guarantees`` under which Arrow cannot prove ``predicate`` false."""
    if not guarantees:
        return []
    import pyarrow.dataset as ds  # (loads pandas: only when a read has a where)
    import pyarrow.fs as pafs

    fmt, fs = ds.ParquetFileFormat(), pafs.LocalFileSystem()
    frags = [
        fmt.make_fragment(f"/{j}", fs, partition_expression=g) for j, g in enumerate(guarantees)
    ]
    dataset = ds.FileSystemDataset(frags, schema, fmt, fs)
    return [int(fr.path[1:]) for fr in dataset.get_fragments(filter=predicate)]


def batches(tables: Iterator[pa.Table], schema: pa.Schema) -> pa.RecordBatchReader:
    """A reader streaming the batches of ``tables``, produced one at a time: each
    table, and each of its batches once taken, is let go before the next table is
    produced, so the reader holds one table at a time (not the last one too)."""

    def gen() -> Iterator[pa.RecordBatch]:
        for t in tables:
            parts = t.to_batches()
            del t
            parts.reverse()
            while parts:
                yield parts.pop()

    return pa.RecordBatchReader.from_batches(schema, gen())
