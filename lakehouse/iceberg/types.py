"""The lakehouse's table model as Iceberg (format v2) sees it: schemas, field ids,
name mappings, column metrics, partition specs and sort orders.

Pure functions from :class:`~lakehouse.model.TableDef` parts and
:class:`~lakehouse.model.DataFile` records to the JSON and Avro values of
Iceberg metadata (spec: https://iceberg.apache.org/spec/); no I/O, no pyiceberg.
This module gathers them from where they live:

* :mod:`lakehouse.iceberg.typemap`: Arrow type -> Iceberg type, field ids
  (nested ones by :func:`nested_id`), schemas and schema ids;
* :mod:`lakehouse.iceberg.mapping`: the name mapping, Parquet field ids, and
  the column types every reader reads in a materialised file;
* :mod:`lakehouse.iceberg.bounds`: single-value serialization and the column
  metrics of a data file;
* :mod:`lakehouse.iceberg.partitions`: partition types, specs and records, and
  sort orders.
"""

from __future__ import annotations

from lakehouse.iceberg.bounds import bound_bytes, file_metrics, long_value
from lakehouse.iceberg.mapping import field_ids_schema, name_mapping, readable_rows, readable_type
from lakehouse.iceberg.partitions import (
    file_partition,
    partition_record,
    partition_spec_json,
    partition_type,
    sort_orders,
)
from lakehouse.iceberg.typemap import (
    MAX_NESTED_COLUMN_ID,
    NAME_MAPPING_PROPERTY,
    NESTED_BASE,
    NESTED_SPAN,
    OMITTED_PROPERTY,
    RESERVED_IDS,
    IcebergType,
    UnsupportedColumn,
    column_type,
    iceberg_schema,
    nested_id,
    primitive_type,
    schema_id,
)

__all__ = [
    "MAX_NESTED_COLUMN_ID",
    "NAME_MAPPING_PROPERTY",
    "NESTED_BASE",
    "NESTED_SPAN",
    "OMITTED_PROPERTY",
    "RESERVED_IDS",
    "IcebergType",
    "UnsupportedColumn",
    "bound_bytes",
    "column_type",
    "field_ids_schema",
    "file_metrics",
    "file_partition",
    "iceberg_schema",
    "long_value",
    "name_mapping",
    "nested_id",
    "partition_record",
    "partition_spec_json",
    "partition_type",
    "primitive_type",
    "readable_rows",
    "readable_type",
    "schema_id",
    "sort_orders",
]
