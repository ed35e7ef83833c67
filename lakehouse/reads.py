"""The read calls shared by transactions and read-only views.

A subclass supplies two primitives over one consistent kvstore view,
``_fetch(key)`` and ``_scan(prefix)``; everything else (listings, describe
calls, name checks, decoding) lives here once. A transaction overrides
:meth:`ReadOps._lookup` and :meth:`ReadOps._names` to merge its own buffered
changes and to record what it read (SERIALIZABLE).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lakehouse import codec, keys
from lakehouse.errors import NotFound
from lakehouse.model import (
    DataFile,
    Definition,
    NamespaceDef,
    TableDef,
    ViewDef,
    check_name,
    split_qualified,
)


class ReadOps:
    """``list_*`` / ``describe_*`` over one lakehouse version."""

    _name_limit: int

    # -- primitives (subclasses) ---------------------------------------------------
    def _fetch(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def _scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        raise NotImplementedError

    def _check_usable(self) -> None:
        """Raise if the view or transaction is closed."""

    # -- hooks (a transaction overlays its own changes) --------------------------------
    def _lookup(self, kind: str, ns: str, name: str | None) -> Definition | None:
        data = self._fetch(keys.object_key(kind, ns, name))
        return None if data is None else codec.decode_def(data)

    def _names(self, kind: str, ns: str | None) -> list[str]:
        """Sorted plain names: namespaces (ns None), or the tables/views of ``ns``."""
        if ns is None:
            return [keys.parse_namespace_key(k) for k, _ in self._scan(keys.NAMESPACE_PREFIX)]
        prefix = keys.children_prefix(kind, ns)
        return [keys.child_name(prefix, k) for k, _ in self._scan(prefix)]

    def _state_items(self, ns: str, table: str) -> list[tuple[bytes, bytes]]:
        return list(self._scan(keys.table_state_prefix(ns, table)))

    # -- helpers -------------------------------------------------------------------------
    def _ns_name(self, name: Any) -> str:
        return check_name(name, "namespace name", self._name_limit, dots=False)

    def _qualified(self, name: Any, what: str) -> tuple[str, str]:
        return split_qualified(name, what, self._name_limit)

    def _require_namespace(self, ns: str) -> NamespaceDef:
        d = self._lookup("namespace", ns, None)
        if d is None:
            raise NotFound(f"namespace {ns!r} does not exist")
        assert isinstance(d, NamespaceDef)
        return d

    # -- public read calls -----------------------------------------------------------------
    def list_namespaces(self) -> list[str]:
        """Every namespace name, sorted."""
        self._check_usable()
        return self._names("namespace", None)

    def list_tables(self, namespace: str) -> list[str]:
        """Plain names of the tables in ``namespace``, sorted (NotFound if it is missing)."""
        self._check_usable()
        ns = self._ns_name(namespace)
        self._require_namespace(ns)
        return self._names("table", ns)

    def list_views(self, namespace: str) -> list[str]:
        """Plain names of the views in ``namespace``, sorted (NotFound if it is missing)."""
        self._check_usable()
        ns = self._ns_name(namespace)
        self._require_namespace(ns)
        return self._names("view", ns)

    def describe_namespace(self, name: str) -> NamespaceDef:
        self._check_usable()
        return self._require_namespace(self._ns_name(name))

    def describe_table(self, name: str) -> TableDef:
        """The table ``"ns.table"``: ``.name``, ``.schema`` (pyarrow), ``.properties``, ..."""
        self._check_usable()
        ns, t = self._qualified(name, "table name")
        d = self._lookup("table", ns, t)
        if d is None:
            self._require_namespace(ns)
            raise NotFound(f"table {ns}.{t} does not exist")
        assert isinstance(d, TableDef)
        return d

    def describe_view(self, name: str) -> ViewDef:
        """The view ``"ns.view"``: ``.name``, ``.sql``, ``.properties``, ``.referenced``."""
        self._check_usable()
        ns, v = self._qualified(name, "view name")
        d = self._lookup("view", ns, v)
        if d is None:
            self._require_namespace(ns)
            raise NotFound(f"view {ns}.{v} does not exist")
        assert isinstance(d, ViewDef)
        return d

    def namespace_exists(self, name: str) -> bool:
        self._check_usable()
        return self._lookup("namespace", self._ns_name(name), None) is not None

    def table_exists(self, name: str) -> bool:
        self._check_usable()
        ns, t = self._qualified(name, "table name")
        return self._lookup("table", ns, t) is not None

    def view_exists(self, name: str) -> bool:
        self._check_usable()
        ns, v = self._qualified(name, "view name")
        return self._lookup("view", ns, v) is not None

    def list_data_files(self, table: str) -> list[DataFile]:
        """The data files in the table's state (empty until data operations land)."""
        d = self.describe_table(table)
        return [
            codec.decode_data_file(v)
            for k, v in self._state_items(d.namespace, d.name)
            if keys.is_data_file_key(k)
        ]
