"""Selecting, ordering and joining rows of any column type.

Arrow (pyarrow 26) has no ``filter``, ``take``, sort, ``is_in``, comparison or
hash-join kernels for the view types ``string_view`` and ``binary_view``, so a
table holding such a column (or a struct, list or map holding one) cannot be
filtered as is. Every place the lakehouse selects rows goes through these
helpers instead: a table without view types takes Arrow's fast path; one with
them is cast to the same values in the large non-view types
(``large_string``, ``large_binary``), worked on, and cast back, so the result
keeps the table's schema exactly::

    filter_rows(t, mask)        # t.filter(mask)
    take_rows(t, indices)       # t.take(indices)
    sort_indices(t, **options)  # pc.sort_indices(t, ...)
    join(a, b, keys, kind)      # a.join(b, keys=keys, join_type=kind)

:func:`plain` (and :func:`plain_schema`, :func:`plain_type`) give the non-view
form itself, for computations such as predicates that only read the values.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.arrowtypes import map_fields

Rows = TypeVar("Rows", pa.Table, pa.RecordBatch, pa.Array, pa.ChunkedArray)


@lru_cache(maxsize=1024)
def plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every view type in it (nested ones too) replaced by its large
    non-view type holding the same values; ``t`` itself when it has none."""
    if pa.types.is_string_view(t):
        return pa.large_string()
    if pa.types.is_binary_view(t):
        return pa.large_binary()
    if pa.types.is_dictionary(t):
        value = plain_type(t.value_type)
        return t if value == t.value_type else pa.dictionary(t.index_type, value, t.ordered)
    return map_fields(t, _plain_field)


def _plain_field(f: pa.Field) -> pa.Field:
    t = f.type
    p = plain_type(t)
    return f if p == t else f.with_type(p)


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with :func:`plain_type` of every field (the same object when no
    field holds a view type)."""
    fields = [f.with_type(plain_type(f.type)) for f in schema]
    if all(p.type == f.type for p, f in zip(fields, schema, strict=True)):
        return schema
    return pa.schema(fields, metadata=schema.metadata)


def plain(rows: Rows) -> Rows:
    """``rows`` cast to :func:`plain_schema` (or :func:`plain_type`): no view types."""
    if isinstance(rows, (pa.Table, pa.RecordBatch)):
        schema = rows.schema  # (a new object on each access)
        wanted = plain_schema(schema)
        return rows if wanted is schema else rows.cast(wanted)
    t = plain_type(rows.type)
    return rows if t == rows.type else rows.cast(t)


def value_scanner(rows: pa.Table | pa.RecordBatch, expression: pc.Expression) -> Any:
    """A ``pyarrow.dataset`` scanner computing ``expression`` as column ``"value"``
    over ``rows`` read in their :func:`plain` types (Arrow has no compute kernels for
    view types): the one path that types and evaluates expressions over rows."""
    import pyarrow.dataset as ds  # loads pandas: only when needed

    return ds.dataset(plain(rows)).scanner(columns={"value": expression})


def _selected(rows: Rows, select: Callable[[Any], Any]) -> Rows:
    """``select(rows)``, through the :func:`plain` types and back when ``rows`` holds
    a view type (the schema is walked once)."""
    if isinstance(rows, (pa.Table, pa.RecordBatch)):
        schema = rows.schema  # (a new object on each access)
        wanted = plain_schema(schema)
        if wanted is schema:
            return select(rows)
        return select(rows.cast(wanted)).cast(schema)
    t = plain_type(rows.type)
    if t == rows.type:
        return select(rows)
    return select(rows.cast(t)).cast(rows.type)


def _has_views(rows: pa.Table) -> bool:
    schema = rows.schema  # (a new object on each access)
    return plain_schema(schema) is not schema


def filter_rows(rows: Rows, mask: Any) -> Rows:
    """``rows.filter(mask)`` (a boolean mask; null drops the row) for any column type."""
    return _selected(rows, lambda r: r.filter(mask))


def take_rows(rows: Rows, indices: Any) -> Rows:
    """``rows.take(indices)`` for any column type."""
    return _selected(rows, lambda r: r.take(indices))


def sort_indices(rows: pa.Table | pa.RecordBatch, **options: Any) -> pa.Array:
    """``pc.sort_indices(rows, **options)`` for any column type (view values sort as
    their bytes, as the large types do)."""
    return pc.sort_indices(plain(rows), **options)


def join(left: pa.Table, right: pa.Table, keys: str | list[str], join_type: str) -> pa.Table:
    """``left.join(right, keys=keys, join_type=join_type)`` for any column type.

    Acero joins neither view-typed keys nor nested non-key columns (a struct, a
    list), so when either table has one, only the keys are joined (in their
    :func:`plain` types), with each side's row numbers, and every column is then
    taken from its own table: the result's columns keep their types. That path
    serves ``"inner"`` and ``"left outer"`` joins (the key columns come from
    ``left``); other join types cast the view columns and back."""
    on = [keys] if isinstance(keys, str) else list(keys)
    if not (_awkward(left, on) or _awkward(right, on)):
        return left.join(right, keys=on, join_type=join_type)
    if join_type not in ("inner", "left outer"):
        out = plain(left).join(plain(right), keys=on, join_type=join_type)
        types = {f.name: f.type for f in right.schema} | {f.name: f.type for f in left.schema}
        fields = [f.with_type(types.get(f.name, f.type)) for f in out.schema]
        return out.cast(pa.schema(fields, metadata=out.schema.metadata))
    lrow, rrow = "__lakehouse_left_row", "__lakehouse_right_row"
    lkeys = plain(left.select(on)).append_column(lrow, pa.array(range(left.num_rows), pa.int64()))
    rkeys = plain(right.select(on)).append_column(rrow, pa.array(range(right.num_rows), pa.int64()))
    pairs = lkeys.join(rkeys, keys=on, join_type=join_type).select([lrow, rrow])
    picked_left = take_rows(left, pairs.column(lrow))
    picked_right = take_rows(right.drop_columns(on), pairs.column(rrow))
    out = picked_left
    for i, name in enumerate(picked_right.column_names):
        out = out.append_column(picked_right.schema.field(i), picked_right.column(name))
    return out


def _awkward(t: pa.Table, keys: list[str]) -> bool:
    """Whether ``t`` has a column an Acero join cannot carry: a view type anywhere, or
    a nested non-key column."""
    return _has_views(t) or any(pa.types.is_nested(f.type) for f in t.schema if f.name not in keys)
