"""A table's layout applied: partition specs and sort keys meet its rows and files.

:mod:`lakehouse.partition` knows specs, transforms and the order-preserving
file ids, for any columns; this module applies them to one
:class:`~lakehouse.model.TableDef`:

* writing: :func:`split` groups rows by the current spec's partition values,
  :func:`sort_order` orders a file's rows by the sort keys, :func:`name_file`
  gives a written file its partition (file id, spec id, stored values);
* reading: :func:`file_values` decodes a file's partition values,
  :func:`prune` keeps the files whose partitions may hold a row matching a
  ``where``, :func:`key_ranges` turns a ``where`` into the few table-state key
  ranges (one per spec and partition range) that hold those files, so
  planning a read of one partition costs what that partition's files cost.

The key layout that makes ranges possible: a partitioned file's id starts
with its spec id and encoded values (``p0001/1<day>/<name>``), and both its
keys (``F/<id>`` record, ``D/<id>`` deletion vector) sort by that id; files
of unpartitioned specs keep plain ids, which sort before every ``p``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse import keys
from lakehouse import partition as part
from lakehouse.data.predicate import Predicate
from lakehouse.data.rows import plain_type, sort_indices, take_rows
from lakehouse.data.table import FileState
from lakehouse.model import DataFile, TableDef
from lakehouse.partition import PartitionSpec
from lakehouse.terms import Term


def is_partitioned(d: TableDef) -> bool:
    """Whether any spec the table ever had is partitioned (old files may use it)."""
    return any(not s.is_unpartitioned for s in d.partition_specs)


def source_types(d: TableDef, spec: PartitionSpec) -> list[pa.DataType] | None:
    """The current types of the spec's source columns (None if one was dropped)."""
    names = d.names_by_id
    out = []
    for f in spec.fields:
        name = names.get(f.source_id)
        if name is None:
            return None
        out.append(d.schema.field(name).type)
    return out


def result_types(d: TableDef, spec: PartitionSpec) -> list[pa.DataType] | None:
    """The types of the spec's partition values (None if a source column was dropped)."""
    src = source_types(d, spec)
    if src is None:
        return None
    return [f.transform.result_type(t) for f, t in zip(spec.fields, src, strict=True)]


def _types_by_id(d: TableDef) -> dict[int, pa.DataType]:
    return {c.id: d.schema.field(c.name).type for c in d.columns}


# -- writing --------------------------------------------------------------------------------
def split(d: TableDef, rows: pa.Table) -> list[tuple[tuple[Any, ...], np.ndarray | None]]:
    """The rows' partitions under the current spec: ``[(values, row indexes)]``
    (indexes None: all rows, in order)."""
    spec = d.spec
    if spec.is_unpartitioned or rows.num_rows == 0:
        return [((), None)]
    groups = part.split(spec, rows, d.names_by_id)
    if len(groups) == 1:
        return [(groups[0][0], None)]
    return list(groups)


def arrange(
    d: TableDef, rows: pa.Table, *, sort: bool = True
) -> list[tuple[tuple[Any, ...], pa.Table, np.ndarray | None]]:
    """``rows`` as they are written: per partition of the current spec, its rows
    (sorted by the sort keys unless ``sort`` is False), with the positions in
    ``rows`` they came from (None: all of ``rows``, in order)."""
    out = []
    for values, idx in split(d, rows):
        part = rows if idx is None else take_rows(rows, idx)
        order = sort_order(d, part) if sort else None
        if order is not None:
            part = take_rows(part, order)
            idx = order if idx is None else idx[order]
        out.append((values, part, idx))
    return out


def sort_order(d: TableDef, rows: pa.Table) -> np.ndarray | None:
    """Row order of a file sorted by the table's sort keys (ascending, nulls
    first; None: no sort keys, or already in order)."""
    if not d.sort_keys or rows.num_rows < 2:
        return None
    idx: np.ndarray = sort_indices(
        rows.select(list(d.sort_keys)), **_sort_options(d.sort_keys)
    ).to_numpy()
    if np.all(idx[1:] >= idx[:-1]):
        return None
    return idx


def _sort_options(names: Sequence[str]) -> dict[str, Any]:
    """Ascending, nulls first (Arrow 25 moved null placement into each sort key)."""
    if int(pa.__version__.split(".")[0]) >= 25:
        return {"sort_keys": [(k, "ascending", "at_start") for k in names]}
    return {"sort_keys": [(k, "ascending") for k in names], "null_placement": "at_start"}


def name_file(d: TableDef, f: DataFile, values: tuple[Any, ...]) -> DataFile:
    """``f`` (just written under the current spec) with its partition: the file id
    that orders its keys, the spec id and the stored values."""
    spec = d.spec
    if spec.is_unpartitioned:
        fid = f.file_id
        if fid.startswith("p"):  # partitioned ids own the "p" range of keys
            fid = "_" + fid
        return (
            f
            if (fid == f.file_id and not d.spec_id)
            else replace(f, file_id=fid, spec_id=d.spec_id)
        )
    types = result_types(d, spec)
    assert types is not None  # the current spec's columns exist
    return replace(
        f,
        file_id=part.file_id(spec, types, values, f.file_id),
        spec_id=spec.spec_id,
        raw_partition=tuple(part.encode_values(spec, types, values)),
    )


def values_of(d: TableDef, rows: pa.Table) -> tuple[Any, ...]:
    """The one partition ``rows`` (a file someone else wrote) belong to under the
    current spec; ValueError if they span several."""
    groups = split(d, rows)
    if len(groups) > 1:
        shown = ", ".join(str(part.values_dict(d.spec, v)) for v, _ in groups[:3]) + (
            ", ..." if len(groups) > 3 else ""
        )
        raise ValueError(
            f"the file holds rows of {len(groups)} partitions of {d.qualified_name} ({shown}); "
            "a data file of a partitioned table holds one partition"
        )
    return groups[0][0]


# -- reading --------------------------------------------------------------------------------
_VALUES: dict[tuple[int, tuple[Any, ...], tuple[str, ...]], tuple[Any, ...] | None] = {}


def file_values(d: TableDef, f: DataFile) -> tuple[Any, ...] | None:
    """``f``'s partition values as Python values (None: unknown, e.g. a source column
    dropped since)."""
    try:
        spec = d.spec_by_id(f.spec_id)
    except KeyError:
        return None
    if spec.is_unpartitioned:
        return ()
    types = result_types(d, spec)
    if types is None:
        return None
    key = (f.spec_id, f.raw_partition, tuple(str(t) for t in types))
    if key not in _VALUES:
        if len(_VALUES) > 65536:
            _VALUES.clear()
        try:
            _VALUES[key] = part.decode_values(spec, types, f.raw_partition)
        except ValueError:
            _VALUES[key] = None
    return _VALUES[key]


def partition_dict(d: TableDef, f: DataFile) -> dict[str, Any]:
    """``DataFile.partition``: the file's values by Iceberg field name."""
    values = file_values(d, f)
    if not values:
        return {}
    return part.values_dict(d.spec_by_id(f.spec_id), values)


@dataclass(frozen=True, eq=False)
class PartitionMatch(Predicate):
    """Rows whose partition under ``spec`` is one of ``targets`` (what
    ``replace_partitions`` replaces, and its conflict guard). Its ``expression`` is
    a superset (identity fields only) good for pruning; :meth:`row_mask` is exact."""

    spec: PartitionSpec = field(default_factory=lambda: PartitionSpec(0))
    targets: frozenset[tuple[Any, ...]] = frozenset()
    names: Mapping[int, str] = field(default_factory=dict)

    def row_mask(self, rows: pa.Table | pa.RecordBatch) -> pa.Array:
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        out = np.zeros(rows.num_rows, dtype=bool)
        for values, idx in part.split(self.spec, rows, self.names):
            if tuple(values) in self.targets:
                out[idx] = True
        return pa.array(out)

    def holds(self, d: TableDef, f: DataFile) -> bool | None:
        """Whether every row of ``f`` matches (True) or none does (False), from its
        partition alone; None: it depends on the rows (another spec)."""
        if f.spec_id != self.spec.spec_id:
            return None
        values = file_values(d, f)
        return None if values is None else tuple(values) in self.targets


def partition_match(d: TableDef, targets: Iterable[tuple[Any, ...]]) -> PartitionMatch:
    """The rows of the current spec's partitions ``targets`` of table ``d``."""
    spec = d.spec
    targets = frozenset(tuple(t) for t in targets)
    names = d.names_by_id
    expr: pc.Expression = pc.scalar(True)
    terms: list[Term] = []
    for i, pf in enumerate(spec.fields):
        if pf.transform.name != "identity":
            continue
        col = names[pf.source_id]
        vals = sorted({t[i] for t in targets if t[i] is not None}, key=repr)
        typ = plain_type(d.schema.field(col).type)  # as predicates see the column
        cond = pc.field(col).isin(pa.array(vals, type=typ))
        if any(t[i] is None for t in targets):
            cond = cond | pc.field(col).is_null()
        else:
            terms.append(Term(col, "in", tuple(vals)))
        expr = expr & cond
    spelled = ", ".join(str(part.values_dict(spec, t)) for t in sorted(targets, key=repr)[:3])
    return PartitionMatch(
        expr,
        frozenset(names[pf.source_id] for pf in spec.fields),
        f"rows of partitions {spelled}{', ...' if len(targets) > 3 else ''}",
        terms=tuple(terms),
        spec=spec,
        targets=targets,
        names=names,
    )


def prune(d: TableDef, files: Sequence[FileState], pred: Predicate | None) -> list[FileState]:
    """The ``files`` whose partitions may hold a row matching ``pred``."""
    if pred is None or not is_partitioned(d):
        return list(files)
    if isinstance(pred, PartitionMatch):
        return [fs for fs in files if pred.holds(d, fs[0]) is not False]
    terms = pred.terms
    if not terms:
        return list(files)
    names = d.names_by_id
    types = _types_by_id(d)
    out = []
    memo: dict[tuple[int, tuple[Any, ...]], bool] = {}
    for fs in files:
        f = fs[0]
        key = (f.spec_id, f.raw_partition)
        ok = memo.get(key)
        if ok is None:
            values = file_values(d, f)
            spec = d.spec_by_id(f.spec_id) if values is not None else None
            ok = (
                values is None
                or spec is None
                or spec.is_unpartitioned
                or part.may_match(spec, types, names, values, terms)
            )
            memo[key] = ok
        if ok:
            out.append(fs)
    return out


def key_ranges(
    d: TableDef, pred: Predicate | None, bound: tuple[str, str] | None = None
) -> list[tuple[bytes, bytes | None]] | None:
    """Ranges ``[start, end)`` of the table's ``F/`` state keys that hold every file a
    read restricted by ``pred`` needs (None: the whole table); ``bound``: the
    table's plain-file-id bounds at the version read (see
    :func:`lakehouse.keys.file_bound_key`). The matching ``D/`` ranges are the
    same with ``D/`` for ``F/`` (:func:`dv_ranges`)."""
    exact = pred if isinstance(pred, PartitionMatch) else None
    terms = () if pred is None else pred.terms
    if not (terms or exact) or not is_partitioned(d):
        return None
    prefix = keys.table_state_prefix(d.namespace, d.name) + b"F/"
    names = d.names_by_id
    types = _types_by_id(d)
    out: list[tuple[bytes, bytes | None]] = []
    # files of unpartitioned specs: plain ids, none of which starts with "p"
    if any(s.is_unpartitioned for s in d.partition_specs) or not d.partition_specs:
        out += keys.plain_file_ranges(d.namespace, d.name, b"F/", bound)
    for spec in d.partition_specs:
        if spec.is_unpartitioned:
            continue
        ranges: list[tuple[str, str]] | None
        if exact is not None and spec.spec_id == exact.spec.spec_id:
            ranges = _exact_ranges(d, spec, exact.targets)
        else:
            ranges = part.key_ranges(spec, types, names, terms)
        if ranges is None:
            spec_prefix = prefix + part.key_prefix(spec, [], []).encode()
            out.append((spec_prefix, keys.prefix_end(spec_prefix)))
        else:
            out.extend((prefix + s.encode(), prefix + e.encode()) for s, e in ranges)
    return out


def _exact_ranges(
    d: TableDef, spec: PartitionSpec, targets: Iterable[tuple[Any, ...]]
) -> list[tuple[str, str]] | None:
    """The key range of each partition in ``targets`` (None: unknown types)."""
    types = result_types(d, spec)
    if types is None:
        return None
    out = []
    for values in sorted(part.key_prefix(spec, types, t) for t in targets):
        end = keys.prefix_end(values.encode())
        assert end is not None
        out.append((values, end.decode()))
    return out


def dv_ranges(
    ranges: Iterable[tuple[bytes, bytes | None]], d: TableDef
) -> list[tuple[bytes, bytes | None]]:
    """The ``D/`` key ranges matching ``F/`` key ranges of table ``d``."""
    fp = keys.table_state_prefix(d.namespace, d.name) + b"F/"
    dp = keys.table_state_prefix(d.namespace, d.name) + b"D/"
    out = []
    for s, e in ranges:
        out.append((dp + s[len(fp) :], None if e is None else dp + e[len(fp) :]))
    return out
