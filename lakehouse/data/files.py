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

import io
import itertools
import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from crc32c import crc32c
from pyroaring import BitMap

from lakehouse.data.stats import footer_stats, stat_scalar
from lakehouse.errors import CorruptionError
from lakehouse.model import Column, DataFile

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
    return base[: -len(SUFFIX)] if base.endswith(SUFFIX) else base


# -- writing ---------------------------------------------------------------------------
def encode_parquet(table: pa.Table, row_group_rows: int | None = None) -> tuple[bytes, Any]:
    """Parquet bytes of ``table`` and their footer (no need to parse it back);
    ``row_group_rows``: rows per row group (sorted files: small groups let a read
    with a ``where`` skip most of them by their statistics)."""
    buf = io.BytesIO()
    footer: list[Any] = []
    # snappy without dictionaries: small files decode in about half the CPU of
    # zstd with dictionaries (measured: 300 files of 1,000 rows, 75 vs 142 ms)
    pq.write_table(
        table,
        buf,
        compression="snappy",
        use_dictionary=False,
        write_statistics=True,
        write_page_checksum=True,
        metadata_collector=footer,
        **({} if row_group_rows is None else {"row_group_size": row_group_rows}),
    )
    return buf.getvalue(), footer[0]


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
    appended.
    """
    pf = open_parquet(data, f.path, f)
    in_file = dict(f.columns) if f.columns else None
    wanted: list[tuple[Column, str | None]] = []
    try:
        file_names = set(pf.schema_arrow.names)
        for c in columns:
            name = in_file.get(c.id) if in_file is not None else c.name
            wanted.append((c, name if name in file_names else None))
        names = [n for _, n in wanted if n is not None]
        raw = pf.read(columns=names, use_threads=False)
    except READ_ERRORS as exc:
        raise CorruptionError(f"data file {f.path} could not be read: {exc}") from None
    if raw.num_rows != f.record_count:
        raise CorruptionError(
            f"data file {f.path} holds {raw.num_rows} rows; its record says {f.record_count}"
        )
    if not with_positions and names == [c.name for c in columns]:  # no renames, none missing
        direct = raw.cast(schema) if raw.schema != schema else raw
        mask = keep_mask(raw.num_rows, deleted)
        return direct if mask is None else direct.filter(mask)
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
        arrays.append(pa.array(np.arange(raw.num_rows, dtype=np.uint32)))
        fields.append(pa.field("_pos", pa.uint32()))
    out = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    mask = keep_mask(raw.num_rows, deleted)
    return out if mask is None else out.filter(mask)


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
    """A reader streaming the batches of ``tables``, produced one at a time."""

    def gen() -> Iterator[pa.RecordBatch]:
        for t in tables:
            yield from t.to_batches()

    return pa.RecordBatchReader.from_batches(schema, gen())
