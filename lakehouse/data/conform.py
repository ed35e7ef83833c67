"""Matching user data to a table's schema, and the schema changes a table allows.

Data is matched **by column name**: columns may come in any order; a
missing nullable column is filled with nulls; a missing non-nullable
column, an unknown column, nulls in a non-nullable column, or a value that
does not survive the cast to the column's type raise ``ValueError`` naming
the column. Casts are *safe* (Arrow checks every value: no overflow, no
truncation) and only between kinds that mean the same thing (integers and
decimals and floats among themselves, timestamps among themselves, strings
among themselves, ...): a string is never parsed into a number.

Schema evolution keeps column ids: a column keeps its id across a rename,
and may only change type by **widening** (:data:`WIDENINGS`), which every
old file can be read through without being rewritten.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from lakehouse.model import Column


def to_table(data: Any, what: str = "data") -> pa.Table:
    """A ``pyarrow.Table`` from a Table, RecordBatch, RecordBatchReader or pandas DataFrame."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    mod = type(data).__module__
    if mod.startswith("pandas"):
        try:
            return pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            # Arrow's message names the column: "Conversion failed for column qty ..."
            why = "; ".join(str(a) for a in reversed(exc.args))
            raise ValueError(f"{what}: cannot convert the DataFrame: {why}") from None
    if hasattr(data, "__arrow_c_stream__"):  # polars, duckdb results, ...
        return pa.table(data)
    raise TypeError(
        f"{what} must be a pyarrow.Table, RecordBatch, RecordBatchReader or pandas "
        f"DataFrame, not {type(data).__name__}"
    )


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_time(t):
        return "time"
    if pa.types.is_duration(t):
        return "duration"
    return str(t)


def conform(table: pa.Table, schema: pa.Schema, what: str = "data") -> pa.Table:
    """``table`` as ``schema``: columns matched by name, cast safely, in schema order."""
    names = table.column_names
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"{what} has duplicate column(s) {dup}")
    unknown = [n for n in names if schema.get_field_index(n) < 0]
    if unknown:
        raise ValueError(
            f"{what} has column(s) {unknown} that the table does not have "
            f"(its columns: {schema.names})"
        )
    arrays = []
    for field in schema:
        if field.name not in names:
            if not field.nullable:
                raise ValueError(f"{what} lacks column {field.name!r}, which may not be null")
            arrays.append(pa.nulls(table.num_rows, field.type))
            continue
        col = table.column(field.name)
        if isinstance(col.type, pa.DictionaryType):
            col = col.cast(col.type.value_type)
        if col.type != field.type:
            col = cast_column(col, field.type, field.name)
        if not field.nullable and col.null_count:
            raise ValueError(f"column {field.name!r} may not be null; {what} has nulls in it")
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=schema)


def cast_column(col: Any, target: pa.DataType, name: str) -> Any:
    """``col`` cast safely to ``target``, or ValueError naming column ``name``."""
    src = col.type
    if not pa.types.is_null(src) and _kind(src) != _kind(target):
        raise ValueError(f"column {name!r} is {target}; cannot cast {src} values to it")
    if pa.types.is_timestamp(src) and (src.tz is None) != (target.tz is None):
        raise ValueError(
            f"column {name!r} is {target}; {src} values "
            f"{'have no' if src.tz is None else 'have a'} time zone"
        )
    try:
        return col.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"column {name!r}: cannot cast {src} to {target} safely: {exc}") from None


#: type changes a column may make in place (old files are read through a cast)
WIDENINGS: set[tuple[str, str]] = {
    ("int8", "int16"),
    ("int8", "int32"),
    ("int8", "int64"),
    ("int16", "int32"),
    ("int16", "int64"),
    ("int32", "int64"),
    ("uint8", "uint16"),
    ("uint8", "uint32"),
    ("uint8", "uint64"),
    ("uint16", "uint32"),
    ("uint16", "uint64"),
    ("uint32", "uint64"),
    ("uint8", "int16"),
    ("uint8", "int32"),
    ("uint8", "int64"),
    ("uint16", "int32"),
    ("uint16", "int64"),
    ("uint32", "int64"),
    ("float", "double"),
    ("halffloat", "float"),
    ("halffloat", "double"),
    ("int8", "double"),
    ("int16", "double"),
    ("int32", "double"),
    ("date32[day]", "date64[ms]"),
    ("string", "large_string"),
    ("binary", "large_binary"),
}


def evolve(
    schema: pa.Schema,
    previous: tuple[Column, ...],
    last_id: int,
    renames: dict[str, str],
    has_data: bool,
) -> tuple[tuple[Column, ...], int]:
    """Column ids for the new ``schema`` of a table whose columns were ``previous``.

    ``renames`` (old name -> new name) is applied to ``previous`` first; then
    columns are matched by name: kept ids may widen their type, new names get
    new ids, missing names are dropped (their ids are never reused). Adding
    a non-nullable column to a table that has data raises ValueError: its
    old rows would read as nulls.
    """
    by_name = {c.name: c for c in previous}
    for old, new in renames.items():
        if old not in by_name:
            raise ValueError(f"cannot rename column {old!r}: the table has no such column")
        if new in by_name and new not in renames:
            raise ValueError(f"cannot rename {old!r} to {new!r}: that column already exists")
    renamed = {renames.get(c.name, c.name): c for c in previous}
    cols: list[Column] = []
    for f in schema:
        typ = str(f.type)
        old_col = renamed.get(f.name)
        if old_col is not None:
            if old_col.type != typ and (old_col.type, typ) not in WIDENINGS:
                raise ValueError(
                    f"column {f.name!r} cannot change type from {old_col.type} to {typ} "
                    "(only widening, e.g. int32 -> int64 or float -> double); drop it and add a "
                    "new column instead"
                )
            cols.append(Column(old_col.id, f.name, typ, f.nullable))
        else:
            if has_data and not f.nullable:
                raise ValueError(
                    f"cannot add non-nullable column {f.name!r}: the table has rows, which "
                    "would read as null"
                )
            last_id += 1
            cols.append(Column(last_id, f.name, typ, f.nullable))
    return tuple(cols), last_id
