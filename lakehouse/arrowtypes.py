"""Rebuilding nested Arrow types field by field (imports only pyarrow, so every
layer of the lakehouse may use it)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

_LIST_TYPES = (
    pa.ListType,
    pa.LargeListType,
    pa.FixedSizeListType,
    pa.ListViewType,
    pa.LargeListViewType,
)


def child_fields(t: pa.DataType) -> list[pa.Field]:
    """The child fields of nested type ``t`` (a dictionary's: its value type's);
    none for a primitive type."""
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    if isinstance(t, _LIST_TYPES):
        return [t.value_field]
    if pa.types.is_dictionary(t):
        return child_fields(t.value_type)
    return []


def map_fields(t: pa.DataType, fn: Callable[[pa.Field], pa.Field]) -> pa.DataType:
    """``t`` rebuilt with ``fn`` applied to each child field of a struct, list,
    large list, fixed-size list, list view, map or (the value type of a)
    dictionary; ``t`` itself when ``fn`` returned every field unchanged (the same
    object) or ``t`` is not nested. ``fn`` recurses itself when it should."""
    if pa.types.is_dictionary(t):
        vt = t.value_type
        value = map_fields(vt, fn)
        return t if value is vt else pa.dictionary(t.index_type, value, t.ordered)
    fields = child_fields(t)
    if not fields:
        return t
    new = [fn(f) for f in fields]
    if all(n is f for n, f in zip(new, fields, strict=True)):
        return t
    if pa.types.is_struct(t):
        return pa.struct(new)
    if pa.types.is_map(t):
        return pa.map_(new[0], new[1], t.keys_sorted)
    (value,) = new
    if pa.types.is_fixed_size_list(t):
        return pa.list_(value, t.list_size)
    if pa.types.is_large_list(t):
        return pa.large_list(value)
    if pa.types.is_list_view(t):
        return pa.list_view(value)
    if pa.types.is_large_list_view(t):
        return pa.large_list_view(value)
    return pa.list_(value)
