"""Lakehouse tables as Apache Iceberg tables (format version 2), read-only.

* :func:`write_metadata` writes (or finds: every object is immutable) the Iceberg
  metadata of a table at a version under ``<url>/iceberg/`` and returns the
  metadata JSON's location, which Iceberg readers that take a metadata file
  (pyiceberg's ``StaticTable``, DuckDB's ``iceberg_scan``) read directly;
* :func:`serve` / :class:`Server`: the Iceberg REST catalog protocol over a
  lakehouse reader (:mod:`lakehouse.iceberg.server`).

The mapping (versions to snapshots, deletion vectors to positional deletes,
inlined rows, schemas, partitions) is described in docs/iceberg.md. Submodules
are imported on first use, so ``import lakehouse.iceberg.paths`` stays cheap
(no pyarrow, fastavro or web framework).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakehouse.iceberg.catalog import IcebergCatalog
    from lakehouse.iceberg.server import Server, serve
    from lakehouse.iceberg.writer import write_metadata

_LAZY = {
    "write_metadata": "lakehouse.iceberg.writer",
    "serve": "lakehouse.iceberg.server",
    "Server": "lakehouse.iceberg.server",
    "IcebergCatalog": "lakehouse.iceberg.catalog",
}

__all__ = ["IcebergCatalog", "Server", "serve", "write_metadata"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lakehouse.iceberg' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
