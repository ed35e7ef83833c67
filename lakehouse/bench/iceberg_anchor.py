"""The iceberg bench's anchor: pyiceberg's ``SqlCatalog`` on sqlite, its tables'
files written with pyarrow."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakehouse.bench.iceberg_tables import NS


class PyIceberg:
    def __init__(self, path: str) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        self.path = path
        self.data = os.path.join(path, "files")
        os.makedirs(self.data, exist_ok=True)
        self.catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{path}/catalog.db", warehouse=f"file://{path}/warehouse"
        )
        self.catalog.create_namespace(NS)
        self.written = 0
        self.tables: dict[str, Any] = {}  # loaded once: a commit refreshes the object

    def create(self, name: str) -> None:
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.table import TableProperties
        from pyiceberg.transforms import IdentityTransform
        from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType

        schema = Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "p", IntegerType(), required=False),
            NestedField(3, "name", StringType(), required=False),
            NestedField(4, "amount", DoubleType(), required=False),
        )
        spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
        # the files carry no field ids (as ours): a name mapping, as add_files sets it
        props = {TableProperties.DEFAULT_NAME_MAPPING: schema.name_mapping.model_dump_json()}
        self.tables[name] = self.catalog.create_table(
            name, schema=schema, partition_spec=spec, properties=props
        )

    def write(self, batch: pa.Table, per_file: int) -> list[str]:
        """Write ``batch`` as one Parquet file per ``per_file`` rows (one partition
        each); their paths."""
        paths = []
        for off in range(0, batch.num_rows, per_file):
            path = os.path.join(self.data, f"{self.written:08d}.parquet")
            pq.write_table(batch.slice(off, per_file), path)
            paths.append(path)
            self.written += 1
        return paths

    def data_files(self, name: str, paths: list[str]) -> list[Any]:
        """The files' ``DataFile`` objects, built from their footers as ``add_files``
        builds them."""
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        tbl = self.tables[name]
        return [parquet_file_to_data_file(tbl.io, tbl.metadata, p) for p in paths]

    def _summary(self, name: str) -> Any:
        snap = self.tables[name].current_snapshot()
        assert snap is not None and snap.summary is not None
        return snap.summary

    def fast_append(self, name: str, files: list[Any]) -> Any:
        """Commit already-written files: one fast append (to the table loaded before, as a
        writer holds it); returns the new snapshot's summary."""
        tbl = self.tables[name]
        with tbl.transaction() as tx, tx.update_snapshot().fast_append() as fa:
            for f in files:
                fa.append_data_file(f)
        return self._summary(name)

    def add_files(self, name: str, paths: list[str], check: bool = True) -> Any:
        """Commit already-written files through the public API (``Table.add_files``:
        duplicate check unless ``check`` is false, footers read, fast append); the new
        snapshot's summary."""
        self.tables[name].add_files(paths, check_duplicate_files=check)
        return self._summary(name)

    def close(self) -> None:
        self.catalog.engine.dispose()
