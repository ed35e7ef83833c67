"""The systems the table-data benchmark measures, behind one small interface.

:class:`System` is what :mod:`lakehouse.bench.data` drives: create a table
holding a first batch, append, read the latest and the first version,
delete by a SQL predicate, and list data files (on disk and live) so a
benchmark can tell whether an operation rewrote any. The anchors here are
the two open table formats closest to ours, used as their users do (a URI,
no handle kept between operations, so every call resolves the latest
version as a second process would):

* :class:`Lance` (``pylance``): ``lance.write_dataset(..., mode="append")``,
  ``lance.dataset(uri, version=v).to_table()``, ``dataset.delete(where)``
  (deletion files, data files kept);
* :class:`Delta` (``deltalake``, delta-rs): ``write_deltalake(..., mode=
  "append")``, ``DeltaTable(uri, version=v).to_pyarrow_table()``,
  ``DeltaTable.delete(where)`` (copy-on-write: rewrites the files it hits).

Neither calls fsync (``strace -f -e trace=fsync,fdatasync`` during 20
appends shows none; both publish a commit with a link or rename), while a
durable lakehouse commit is on stable storage when it returns. Both are the
``bench`` extra; a missing one raises ImportError when constructed.
"""

from __future__ import annotations

import os
from typing import Any, cast

import pyarrow as pa


def files_under(root: str, *, suffix: str = "", under: str = "") -> set[str]:
    """Relative paths of the files below ``root/under`` ending in ``suffix``."""
    out = set()
    top = os.path.join(root, under) if under else root
    for dirpath, _, names in os.walk(top):
        for n in names:
            if n.endswith(suffix):
                out.add(os.path.relpath(os.path.join(dirpath, n), root))
    return out


class System:
    """One table of one system at ``path`` (a fresh directory)."""

    #: the label in reports
    name = ""
    #: the version a table has right after :meth:`create`
    first_version = 1

    def __init__(self, path: str) -> None:
        self.path = path

    def create(self, rows: pa.Table) -> None:
        """Create the table holding ``rows`` (its first version)."""
        raise NotImplementedError

    def append(self, rows: pa.Table) -> None:
        """Append ``rows`` in one commit; safe to call from several threads at once."""
        raise NotImplementedError

    def read_latest(self) -> pa.Table:
        raise NotImplementedError

    def read_first(self) -> pa.Table:
        """All rows as of the first version (after :meth:`create`)."""
        raise NotImplementedError

    def delete(self, where: str) -> None:
        """Delete the rows matching the SQL predicate ``where`` in one commit."""
        raise NotImplementedError

    def count(self) -> int:
        """Rows at the latest version."""
        return cast(int, self.read_latest().num_rows)

    def disk_files(self) -> set[str]:
        """Data files present on disk (live or not)."""
        raise NotImplementedError

    def live_files(self) -> set[str]:
        """Data files the latest version reads."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class Lance(System):
    name = "pylance"
    first_version = 1

    def __init__(self, path: str) -> None:
        import lance

        super().__init__(path)
        self._lance = lance

    def create(self, rows: pa.Table) -> None:
        self._lance.write_dataset(rows, self.path, mode="create")

    def append(self, rows: pa.Table) -> None:
        self._lance.write_dataset(rows, self.path, mode="append")

    def read_latest(self) -> pa.Table:
        return self._lance.dataset(self.path).to_table()

    def read_first(self) -> pa.Table:
        return self._lance.dataset(self.path, version=self.first_version).to_table()

    def delete(self, where: str) -> None:
        self._lance.dataset(self.path).delete(where)

    def count(self) -> int:
        return int(self._lance.dataset(self.path).count_rows())

    def disk_files(self) -> set[str]:
        return files_under(self.path, suffix=".lance", under="data")

    def live_files(self) -> set[str]:
        ds = self._lance.dataset(self.path)
        return {"data/" + f.path for frag in ds.get_fragments() for f in frag.data_files()}

    def deletion_files(self) -> int:
        return len(files_under(self.path, under="_deletions"))


class Delta(System):
    name = "deltalake"
    first_version = 0

    def __init__(self, path: str) -> None:
        import deltalake

        super().__init__(path)
        self._dl = deltalake

    def create(self, rows: pa.Table) -> None:
        self._dl.write_deltalake(self.path, rows, mode="error")

    def append(self, rows: pa.Table) -> None:
        self._dl.write_deltalake(self.path, rows, mode="append")

    def read_latest(self) -> pa.Table:
        return _to_arrow(self._dl.DeltaTable(self.path))

    def read_first(self) -> pa.Table:
        return _to_arrow(self._dl.DeltaTable(self.path, version=self.first_version))

    def delete(self, where: str) -> None:
        self._dl.DeltaTable(self.path).delete(where)

    def count(self) -> int:
        return int(self._dl.DeltaTable(self.path).count())

    def disk_files(self) -> set[str]:
        return {
            p for p in files_under(self.path, suffix=".parquet") if not p.startswith("_delta_log")
        }

    def live_files(self) -> set[str]:
        return {os.path.relpath(u, self.path) for u in self._dl.DeltaTable(self.path).file_uris()}


def _to_arrow(dt: Any) -> pa.Table:
    return dt.to_pyarrow_table()


ANCHORS: dict[str, type[System]] = {"pylance": Lance, "deltalake": Delta}
