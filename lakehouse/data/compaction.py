"""Compaction: merge a partition's small files, cluster its rows by the sort keys.

Planning (:func:`plan`) is a pure function of the table's files, so its
policy is tested with tables of cases; the work (:func:`compact`) reads the
planned files, writes the new ones and records where every row went.

**Scope.** Files are grouped by partition, ``(spec id, stored values)``:
files of different partitions are never merged. A file of an older spec is
rewritten into the *current* spec's partitions (as Iceberg's
``rewrite_data_files`` does), so compaction also moves old data to the
current layout. ``where`` (over partition columns) or ``partition`` (a
``DataFile.partition`` dict) limits a compaction to some partitions.

**Which files, without sort keys.** Files with deleted rows, and small files
(below half the target size), binned in file-id order into groups of about
the target size; a group of one small file without deletions is left alone.
Each group becomes one file (a partition of an older spec: one per current
partition).

**Which files, with sort keys (clustering).** Each file's range of the first
sort key (from its footer statistics, nulls first) is an interval; files
whose intervals overlap form a *component*. A component needs rewriting when
it holds more than one file (their ranges overlap, so a point read touches
several), a file with deleted rows, or a small file. Neighbouring components
(in key order) that need rewriting form a *run*; a file that needs nothing
ends a run. A run of more than one file, or with deletions, is rewritten: its
live rows are sorted across all its files (stable, ascending, nulls first)
and cut into files of about the target size, cuts falling only where the
first sort key changes. The new files' ranges then neither overlap each
other nor the files left alone, so compacting again finds nothing to do::

    before   [0..40] [10..50] [60..90]  [100..110] [120..130]   (3rd big, others small)
    runs     [0..40 10..50]   (alone)   [100..110  120..130]
    after    [0..24] [25..50] [60..90]  [100..130]

**Incremental (``min_files``, what automatic compaction does).** Only small
files are merged, and only within a *size tier* (below 4 KiB x ``min_files``
bytes, then one tier per further factor of ``min_files``) holding at least
``min_files`` files, in groups of about the target size, rows sorted by the
sort keys within each group. A row is rewritten about once per tier (not on
every compaction, as merging every small file into the growing last one
would), and ranges may still overlap: a full ``compact`` clusters them.
Files whose deleted fraction (deleted rows / rows) reaches the table property
``compaction.delete-threshold`` (default 0.5) are rewritten too, whatever
their size or tier (those of one partition binned together, about the target
size per new file); the rest with deletions keep them until a full ``compact``
or their tier's merge. Automatic compaction queues a partition when a commit's
deletes make one of its files reach the threshold.

**Inlined rows** (inline data files, :mod:`lakehouse.data.inline`) are
always candidates: an inline file is never "done" (its rows belong in
Parquet), so a group or run holding one is rewritten even when it is that
file alone; with ``min_files`` each joins the size tier of its partition
that its payload's size puts it in, and a tier holding one is merged
whatever its count. The output is always Parquet (compaction never
inlines), partitioned and sorted as the table says. An incremental
compaction moves them only when the table's scope holds enough
(:func:`flush_due`: at least ``inline.flush_rows`` live rows, or at least
``min_files`` inline files); an explicit one always does.

**The record.** One :class:`~lakehouse.model.Rewrite` per group or run: its
sources, its output files and, when the rows were reordered, the
permutation (:mod:`lakehouse.data.rewrites`), so a concurrent delete of a
moved row follows it to the right position of the right new file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lakehouse.data import dv as dvfmt
from lakehouse.data import inline, keyindex, partitioning, scan
from lakehouse.data.buffer import TableData
from lakehouse.data.predicate import parse_where
from lakehouse.data.rewrites import encode_order
from lakehouse.data.rows import plain
from lakehouse.data.stats import user_stats
from lakehouse.data.table import file_key_id
from lakehouse.model import CompactResult, DataFile, DataOp, Rewrite, TableDef

#: default target size of a compacted file (table property ``compaction.target-file-bytes``)
TARGET_FILE_BYTES = 64 << 20

#: rows per row group of a clustered file: a point read decodes one group, not the
#: file (1M rows of 3 columns: 1.9 ms with 16Ki-row groups, 79 ms with one group)
CLUSTERED_ROW_GROUP_ROWS = 16384

#: a partition: (spec id, stored values made hashable)
PartKey = tuple[int, Any]

#: the lowest and highest interval ends (null sorts first, unknown bounds cover all)
_NULL, _TOP = (0,), (2,)


@dataclass(frozen=True)
class Candidate:
    """What planning knows of one file."""

    fid: str
    partition: PartKey
    size: int
    deleted: bool
    #: the first sort key's range, as comparable tuples (None: no sort keys)
    lo: tuple[Any, ...] | None = None
    hi: tuple[Any, ...] | None = None
    #: an inline file (rows kept in the kvstore): always rewritten
    inline: bool = False
    #: deleted rows / rows (incremental compaction rewrites it at the delete threshold)
    dead: float = 0.0


@dataclass(frozen=True)
class Job:
    """One rewrite: these files (in this order) become new files; ``sort``: clustered."""

    partition: PartKey
    fids: tuple[str, ...]
    sort: bool


def part_key(f: DataFile) -> PartKey:
    return (f.spec_id, _hashable(f.raw_partition))


def _hashable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    return v


# -- planning (pure) ----------------------------------------------------------------------
def plan(
    files: Sequence[Candidate],
    target: int,
    sort: bool,
    min_files: int | None = None,
    delete_threshold: float | None = None,
) -> list[Job]:
    """The rewrites that compact ``files`` (see the module docstring); ``min_files``:
    only small files, ``min_files`` or more of one size tier at a time, and (with
    ``delete_threshold``) the files whose deleted fraction reaches it."""
    by_part: dict[PartKey, list[Candidate]] = {}
    for c in files:
        by_part.setdefault(c.partition, []).append(c)
    jobs: list[Job] = []
    for key in sorted(by_part, key=repr):
        group = sorted(by_part[key], key=lambda c: c.fid)
        if min_files is not None:
            tiers = _tiers(group, target, min_files)
            if delete_threshold is not None:
                tiers += _deleted(group, target, delete_threshold, tiers)
            jobs += [Job(key, g, sort) for g in tiers]
        elif sort:
            jobs += [Job(key, run, True) for run in _runs(group, target)]
        else:
            jobs += [Job(key, g, False) for g in _bins(group, target)]
    return jobs


def _bins(files: list[Candidate], target: int) -> list[tuple[str, ...]]:
    """Small files and files with deletions, in groups of about ``target`` bytes."""
    out: list[list[Candidate]] = []
    cur: list[Candidate] = []
    size = 0
    for c in files:
        if not (c.deleted or c.inline or c.size < target // 2):
            continue
        if cur and size + c.size > target:
            out.append(cur)
            cur, size = [], 0
        cur.append(c)
        size += c.size
    if cur:
        out.append(cur)
    return [tuple(c.fid for c in g) for g in out if len(g) > 1 or g[0].deleted or g[0].inline]


#: files below this size are all in the first size tier
TIER_BASE = 4096


def _tier(size: int, min_files: int) -> int:
    """Size tier of a small file: 0 below ``TIER_BASE * min_files`` bytes, then one
    more per factor of ``min_files``."""
    t, bound = 0, TIER_BASE * min_files
    while size >= bound:
        t, bound = t + 1, bound * min_files
    return t


def _tiers(files: list[Candidate], target: int, min_files: int) -> list[tuple[str, ...]]:
    """Small files of a size tier holding ``min_files`` or more, in groups of about
    ``target`` bytes (incremental: each row is rewritten about once per tier)."""
    tiers: dict[int, list[Candidate]] = {}
    for c in files:
        if c.size < target // 2 or c.inline:
            tiers.setdefault(_tier(c.size, min_files), []).append(c)
    out: list[tuple[str, ...]] = []
    for t in sorted(tiers):
        # a tier holding inline files is merged whatever its count (they are due)
        if len(tiers[t]) >= min_files or any(c.inline for c in tiers[t]):
            by_fid = {c.fid: c for c in tiers[t]}
            out += [g for g in _bins(tiers[t], target) if len(g) > 1 or by_fid[g[0]].inline]
    return out


def _deleted(
    files: list[Candidate], target: int, threshold: float, taken: list[tuple[str, ...]]
) -> list[tuple[str, ...]]:
    """Files (not inline, not in ``taken``) whose deleted fraction reaches
    ``threshold``, in groups of about ``target`` bytes of live rows."""
    done = {fid for g in taken for fid in g}
    heavy = [c for c in files if c.dead >= threshold and not c.inline and c.fid not in done]
    return _bins(heavy, target)


def _runs(files: list[Candidate], target: int) -> list[tuple[str, ...]]:
    """Runs of neighbouring overlapping-or-small components (clustering)."""
    ordered = sorted(files, key=lambda c: (c.lo, c.hi, c.fid))
    comps: list[list[Candidate]] = []
    reach: tuple[Any, ...] | None = None
    for c in ordered:
        assert c.lo is not None and c.hi is not None
        if comps and reach is not None and c.lo <= reach:
            comps[-1].append(c)
            reach = max(reach, c.hi)
        else:
            comps.append([c])
            reach = c.hi
    runs: list[list[Candidate]] = []
    cur: list[Candidate] = []
    for comp in comps:
        needs = len(comp) > 1 or any(c.deleted or c.inline or c.size < target // 2 for c in comp)
        if needs:
            cur += comp
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return [
        tuple(c.fid for c in sorted(r, key=lambda c: c.fid))
        for r in runs
        if len(r) > 1 or r[0].deleted or r[0].inline
    ]


def candidates(d: TableDef, files: Mapping[str, tuple[DataFile, BitMap]]) -> list[Candidate]:
    """What planning needs of ``files`` (by file id): partition, size, deletions and
    the first sort key's range."""
    first = d.sort_keys[0] if d.sort_keys else None
    names: dict[int, tuple[str, pa.DataType]] = {}
    if first is not None:
        col = next(c for c in d.columns if c.name == first)
        names = {col.id: (first, d.schema.field(first).type)}
    out = []
    for fid, (f, dv) in sorted(files.items()):
        live = f.record_count - len(dv)
        size = f.size * live // max(f.record_count, 1)
        lo = hi = None
        if first is not None:
            lo, hi = _range(user_stats(f, names).get(first), live, bool(dv))
        dead = len(dv) / f.record_count if f.record_count else 0.0
        out.append(Candidate(fid, part_key(f), size, bool(dv), lo, hi, f.is_inline, dead))
    return out


def _range(s: Any, rows: int, deleted: bool) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    if s is None:
        return _NULL, _TOP
    nulls = s.null_count
    if s.min is None or s.max is None:
        if nulls is not None and nulls >= rows and not deleted:
            return _NULL, _NULL  # all null
        return _NULL, _TOP
    lo = _NULL if nulls is None or nulls else (1, s.min)
    return lo, (1, s.max)


# -- the work -------------------------------------------------------------------------------
def target_bytes(d: TableDef, given: Any) -> int:
    """The target file size: ``given``, else the table property, else the default."""
    if given is None:
        raw = d.properties.get("compaction.target-file-bytes")
        given = TARGET_FILE_BYTES if raw is None else _int_property(d, raw)
    if isinstance(given, bool) or not isinstance(given, int) or given <= 0:
        raise ValueError(f"target_file_bytes must be a positive int, got {given!r}")
    return given


def _int_property(d: TableDef, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(
            f"table {d.qualified_name}: property compaction.target-file-bytes must be an "
            f"integer, not {raw!r}"
        ) from None


#: ``inline.flush_rows`` unset: automatic compaction flushes a table's inlined rows
#: once they number this many times its ``inline.max_rows`` (docs/lakehouse.md,
#: "Flushing inlined rows", has the measurements behind it)
FLUSH_FACTOR = 10

#: the table property: live inlined rows that make automatic compaction flush them
FLUSH_PROPERTY = "inline.flush_rows"


def check_flush_rows(value: str) -> int:
    """``inline.flush_rows`` as an int (ValueError naming it unless a non-negative
    integer such as ``"10000"``)."""
    text = value.strip() if isinstance(value, str) else ""
    if not text.isdigit() or not text.isascii():
        raise ValueError(
            f"table property {FLUSH_PROPERTY} must be a non-negative integer (live inlined "
            f"rows that make automatic compaction flush them), not {value!r}"
        )
    return int(text)


def flush_rows(d: TableDef) -> int:
    """``d``'s ``inline.flush_rows``: the property, else :data:`FLUSH_FACTOR` times
    its ``inline.max_rows`` (ValueError naming the property if malformed)."""
    raw = d.properties.get(FLUSH_PROPERTY)
    if raw is None:
        return FLUSH_FACTOR * inline.max_rows(d)
    try:
        return check_flush_rows(raw)
    except ValueError as exc:
        raise ValueError(f"{exc} (table {d.qualified_name})") from None


#: the table property: the deleted fraction (deleted rows / rows) of a file at
#: which incremental and automatic compaction rewrite it
DELETE_THRESHOLD_PROPERTY = "compaction.delete-threshold"

#: its default: a read pays for every deleted row still stored, a rewrite costs the
#: file's live rows once; at 0.5 a rewrite copies at most one live row per deleted
#: row it drops (write amplification at most 2x per deleted row). DuckLake's
#: ``rewrite_data_files`` waits for 0.95, Delta's OPTIMIZE purges above 5%
#: (docs/lakehouse.md, "Compaction and clustering")
DELETE_THRESHOLD = 0.5


def check_delete_threshold(value: Any) -> float:
    """``compaction.delete-threshold`` as a float (ValueError naming it unless a
    number in (0, 1] such as ``"0.5"``)."""
    try:
        x = float(value.strip()) if isinstance(value, str) else math.nan
    except ValueError:
        x = math.nan
    if not 0.0 < x <= 1.0:  # also NaN
        raise ValueError(
            f"table property {DELETE_THRESHOLD_PROPERTY} must be a number in (0, 1] (the "
            f"deleted fraction of a file that makes compaction rewrite it), not {value!r}"
        )
    return x


def delete_threshold(d: TableDef) -> float:
    """``d``'s ``compaction.delete-threshold`` (ValueError naming it if malformed)."""
    raw = d.properties.get(DELETE_THRESHOLD_PROPERTY)
    if raw is None:
        return DELETE_THRESHOLD
    try:
        return check_delete_threshold(raw)
    except ValueError as exc:
        raise ValueError(f"{exc} (table {d.qualified_name})") from None


def flush_due(d: TableDef, files: Iterable[tuple[DataFile, BitMap]], min_files: int) -> bool:
    """Whether an incremental compaction moves the inline files among ``files``: they
    hold at least ``inline.flush_rows`` live rows, or number ``min_files`` or more."""
    held = [(f, dv) for f, dv in files if f.is_inline]
    if not held:
        return False
    live = sum(f.record_count - len(dv) for f, dv in held)
    return live >= flush_rows(d) or len(held) >= min_files


def _scope(d: TableDef, where: Any, partition: Any) -> Callable[[DataFile], bool] | None:
    """Which files a ``where`` / ``partition`` restricted compaction looks at."""
    if where is not None and partition is not None:
        raise TypeError("give where or partition, not both")
    if partition is not None:
        if not isinstance(partition, Mapping):
            raise TypeError(
                f"partition must be a dict of partition values (DataFile.partition), "
                f"not {type(partition).__name__}"
            )
        want = dict(partition)
        return lambda f: partitioning.partition_dict(d, f) == want
    if where is None:
        return None
    pred = parse_where(where, d.schema)
    names = d.names_by_id
    allowed = {
        names[pf.source_id] for s in d.partition_specs for pf in s.fields if pf.source_id in names
    }
    if pred.columns is None or not pred.columns <= allowed:
        raise ValueError(
            f"a compaction's where may name only partition columns of {d.qualified_name} "
            f"({', '.join(sorted(allowed)) or 'it has none'}), not {pred.text!r}"
        )

    def keep(f: DataFile) -> bool:
        spec = d.spec_by_id(f.spec_id)
        return not spec.is_unpartitioned and bool(partitioning.prune(d, [(f, BitMap())], pred))

    return keep


def compact(
    buf: TableData,
    table: str,
    target_file_bytes: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    where: Any = None,
    partition: Any = None,
    min_files: int | None = None,
) -> CompactResult:
    d = buf.table(table)
    if min_files is not None and (
        isinstance(min_files, bool) or not isinstance(min_files, int) or min_files < 2
    ):
        raise ValueError(f"min_files must be an int >= 2, got {min_files!r}")
    target = target_bytes(d, target_file_bytes)
    keep = _scope(d, where, partition)
    w = buf.write(d.namespace, d.name)
    base = buf.base_files(d.namespace, d.name)
    files = {
        fid: fs
        for fid, fs in base.items()
        if not (fid in w.removed or fid in w.deletes or fs[0].is_external)
        and (keep is None or keep(fs[0]))
    }
    if min_files is not None and not flush_due(d, files.values(), min_files):
        files = {fid: fs for fid, fs in files.items() if not fs[0].is_inline}
    threshold = None if min_files is None else delete_threshold(d)
    jobs = plan(candidates(d, files), target, bool(d.sort_keys), min_files, threshold)
    if not jobs:
        return CompactResult()
    w.note(DataOp.COMPACT)
    removed = added = rows_total = before = after = 0
    total, done = sum(files[fid][0].size for j in jobs for fid in j.fids), 0
    for job in jobs:
        parts = []
        for fid in job.fids:  # progress: bytes of the files being rewritten, read so far
            fs = files[fid]
            parts.append(scan.read_one(buf.ctx.data, d, fs, list(d.columns), None, list(d.columns)))
            done += fs[0].size
            if progress is not None:
                progress(done, total)
        rows = pa.concat_tables(parts).cast(d.schema) if parts else d.schema.empty_table()
        for fid in job.fids:
            w.remove(fid, files[fid][0])
            before += files[fid][0].size
        removed += len(job.fids)
        sources = tuple(
            (fid, files[fid][0].record_count, dvfmt.encode(files[fid][1])) for fid in job.fids
        )
        sizes = [files[fid][0].record_count - len(files[fid][1]) for fid in job.fids]
        outs, order = _write(buf, d, w, rows, target, job.sort, _live_bytes(files, job), sizes)
        for f in outs:
            after += f.size
        added += len(outs)
        rows_total += rows.num_rows
        ids = tuple((file_key_id(f), f.record_count) for f in outs)
        if len(ids) <= 1 and not order:
            w.rewrites.append(Rewrite(ids[0][0] if ids else "", sources))
        else:
            w.rewrites.append(Rewrite(ids[0][0], sources, ids if len(ids) > 1 else (), order))
        if d.primary_key:  # the moved rows' index entries follow them
            keyindex.note_rewrite(w, d, rows, w.rewrites[-1])
    return CompactResult(removed, added, rows_total, before, after)


def _live_bytes(files: Mapping[str, tuple[DataFile, BitMap]], job: Job) -> int:
    """Bytes the live rows of ``job``'s files take (for the output file size)."""
    total = 0
    for fid in job.fids:
        f, dv = files[fid]
        total += f.size * (f.record_count - len(dv)) // max(f.record_count, 1)
    return total


def _write(
    buf: TableData,
    d: TableDef,
    w: Any,
    rows: pa.Table,
    target: int,
    sort: bool,
    nbytes: int,
    sizes: list[int],
) -> tuple[list[DataFile], bytes]:
    """Write ``rows`` (the input, in order) as the new files: split by the current
    spec, each partition sorted (``sort``) and cut into target-size files. Returns
    the files, in output order, and the encoded permutation."""
    if not rows.num_rows:
        return [], b""
    per_file = max(1, int(target * rows.num_rows / max(nbytes, 1)))
    outs: list[DataFile] = []
    orders: list[np.ndarray] = []
    for values, part, idx in partitioning.arrange(d, rows, sort=sort):
        index = np.arange(rows.num_rows, dtype=np.int64) if idx is None else idx
        cuts = _cuts(part, d.sort_keys[0] if sort else None, per_file)
        groups = CLUSTERED_ROW_GROUP_ROWS if sort else None
        for start, end in zip(cuts, cuts[1:], strict=False):
            outs.append(buf.write_file(d, part.slice(start, end - start), w, values, groups))
        orders.append(index)
    return outs, encode_order(np.concatenate(orders), sizes)


def _cuts(rows: pa.Table, key: str | None, per_file: int) -> list[int]:
    """Where files start (and the end): every ``per_file`` rows, moved forward to
    where ``key`` changes (rows sorted by it), so no key value spans two files."""
    n = rows.num_rows
    if n <= per_file:
        return [0, n]
    if key is None:
        return [*range(0, n, per_file), n]
    col = plain(rows.column(key).combine_chunks())  # no kernels for view types
    prev, nxt = col.slice(0, n - 1), col.slice(1)
    pn, nn = prev.is_null(), nxt.is_null()
    changed = pc.if_else(pc.or_(pn, nn), pc.xor(pn, nn), pc.not_equal(prev, nxt))
    starts = np.flatnonzero(changed.to_numpy(zero_copy_only=False)) + 1
    cuts = [0]
    while n - cuts[-1] > per_file:
        k = int(np.searchsorted(starts, cuts[-1] + per_file))
        if k == len(starts):
            break
        cuts.append(int(starts[k]))
    return [*cuts, n]
