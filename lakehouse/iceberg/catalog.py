"""The Iceberg REST catalog's answers, without HTTP: :class:`IcebergCatalog`.

The catalog reads the lakehouse through a :func:`lakehouse.open_reader` (so it
never fences the writer) and refreshes it before it answers, so every answer
is as of the latest durable version. Refreshes are shared: a request that
arrives while another one refreshes waits for the next refresh to finish and
does not start its own (one refresh started after the request arrived is all
it needs).

Namespaces are the lakehouse's (one level). ``<ns>@v<N>`` names namespace
``ns`` as of lakehouse version ``N`` (it exists iff version ``N`` is retained
and ``ns`` existed then); such names are not listed, only resolved.

:meth:`IcebergCatalog.load` answers with the Iceberg metadata of a table
(written or found by :func:`lakehouse.iceberg.writer.write_metadata`) and
keeps what it read: the metadata location by (table id, version, oldest
retained version) and the metadata bytes by location (the location names the
table id and the effective version, and the object is immutable), so a
table that did not change is read once.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lakehouse.errors import LakehouseError, NotFound, VersionExpired

__all__ = [
    "IcebergCatalog",
    "MetadataUnavailable",
    "NoSuchNamespace",
    "NoSuchTable",
    "parse_namespace",
]

log = logging.getLogger("lakehouse.iceberg")

#: ``ns@v7``: namespace ``ns`` as of lakehouse version 7
_VERSIONED = re.compile(r"(?P<ns>.+)@v(?P<version>[0-9]{1,19})")

#: how many metadata locations and metadata documents the catalog keeps
LOCATIONS_KEPT = 4096
DOCUMENTS_KEPT = 256

#: times a load of a plain namespace's table starts again when its version expired meanwhile
LOAD_ATTEMPTS = 5


class NoSuchNamespace(NotFound):
    """The namespace (or version namespace) does not exist (or its version expired)."""


class NoSuchTable(NotFound):
    """The namespace exists; the table does not."""


class MetadataUnavailable(LakehouseError):
    """The table's Iceberg metadata cannot be written or read (a server-side failure)."""


def parse_namespace(name: str) -> tuple[str, int | None]:
    """``"ns@v7"`` -> ``("ns", 7)``; ``"ns"`` -> ``("ns", None)``.

    A name with an ``@`` that is not ``<ns>@v<N>`` is a ValueError (callers
    first look the whole name up as a plain namespace: names may hold ``@``).
    """
    if "@" not in name:
        return name, None
    m = _VERSIONED.fullmatch(name)
    if m is None:
        raise ValueError(
            f"namespace {name!r}: a version namespace is spelled <namespace>@v<version>, "
            "e.g. sales@v7"
        )
    return m.group("ns"), int(m.group("version"))


class _Lru:
    """A small thread-safe LRU map."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class IcebergCatalog:
    """What the Iceberg REST server answers, as Python calls (no HTTP here).

    ``url_or_lh``: a lakehouse URL (opened with :func:`lakehouse.open_reader`
    and closed by :meth:`close`), or an open ``Lakehouse``/``LakehouseReader``
    (used as is, left open). Errors: :class:`NoSuchNamespace`,
    :class:`NoSuchTable` (both ``lakehouse.NotFound``), ``VersionExpired``,
    ``ValueError`` (a version namespace spelled wrong).
    """

    def __init__(self, url_or_lh: Any, *, storage_options: dict[str, Any] | None = None) -> None:
        if isinstance(url_or_lh, str):
            import lakehouse

            opts = {"storage_options": storage_options} if storage_options else {}
            self._lh: Any = lakehouse.open_reader(url_or_lh, **opts)
            self._owned = True
        else:
            if storage_options:
                raise ValueError("storage_options apply to a URL, not to an open lakehouse")
            self._lh = url_or_lh
            self._owned = False
        self._storage_options = dict(storage_options or {})
        self._refresh_lock = threading.Lock()
        self._started = 0  # refreshes started
        self._done = 0  # the number of the last refresh finished
        self._locations = _Lru(LOCATIONS_KEPT)
        self._documents = _Lru(DOCUMENTS_KEPT)
        self._loading: dict[Any, threading.Lock] = {}
        self._loading_lock = threading.Lock()
        #: counters: refreshes done, their total seconds, metadata writes/finds, documents read
        self.stats = {"refreshes": 0, "refresh_s": 0.0, "metadata_calls": 0, "documents_read": 0}

    @property
    def lakehouse(self) -> Any:
        """The lakehouse (reader) the catalog reads."""
        return self._lh

    @property
    def url(self) -> str:
        return str(self._lh.url)

    # -- freshness -----------------------------------------------------------------------------
    def refresh(self) -> int:
        """Load what the writer has made durable; returns the latest version.

        Shared between threads: a call returns once a refresh that started after
        it was called has finished (its own, or a concurrent caller's).
        """
        arrived = self._started
        refresh: Callable[[], Any] | None = getattr(self._lh, "refresh", None)
        if refresh is None:  # the writer itself: always current
            return int(self._lh.version)
        with self._refresh_lock:
            if self._done > arrived:
                return int(self._lh.version)
            self._started += 1
            number = self._started
            t0 = time.perf_counter()
            refresh()
            self.stats["refresh_s"] += time.perf_counter() - t0
            self.stats["refreshes"] += 1
            self._done = number
        return int(self._lh.version)

    # -- resolution ----------------------------------------------------------------------------
    @contextmanager
    def _resolved(self, name: str) -> Iterator[tuple[Any, str, int, bool]]:
        """``(view, namespace, version, versioned)`` for namespace ``name`` (plain or
        ``ns@vN``); the view is closed on exit."""
        if not isinstance(name, str) or not name:
            raise ValueError("a namespace name must be a non-empty string")
        head = self.refresh()
        with self._view(head) as view:
            if _exists(view, name):
                yield view, name, head, False
                return
        base, version = parse_namespace(name)
        if version is None:
            raise NoSuchNamespace(f"namespace {name!r} does not exist")
        try:
            old = self._view(version)
        except VersionExpired as exc:
            raise _ExpiredNamespace(f"namespace {name!r}: {exc}") from None
        except NotFound as exc:
            raise NoSuchNamespace(f"namespace {name!r}: {exc}") from None
        with old:
            if not _exists(old, base):
                raise NoSuchNamespace(
                    f"namespace {name!r}: namespace {base!r} did not exist at version {version}"
                )
            yield old, base, version, True

    def _view(self, version: int) -> Any:
        return self._lh.at_version(version)

    # -- the catalog's calls -------------------------------------------------------------------
    def namespaces(self) -> list[str]:
        """The namespaces at the latest version (sorted; version namespaces are not listed)."""
        head = self.refresh()
        with self._view(head) as view:
            return list(view.list_namespaces())

    def namespace(self, name: str) -> dict[str, str]:
        """The properties of namespace ``name`` (``ns@vN``: as of version N)."""
        with self._resolved(name) as (view, base, _version, _versioned):
            return dict(view.describe_namespace(base).properties)

    def tables(self, ns: str) -> list[str]:
        """The tables of namespace ``ns`` (``ns@vN``: as of version N), sorted."""
        with self._resolved(ns) as (view, base, _version, _versioned):
            return list(view.list_tables(base))

    def table_id(self, ns: str, table: str) -> str:
        """The lakehouse table id of ``ns``.``table`` (NoSuchTable when it does not exist)."""
        with self._resolved(ns) as (view, base, _version, _versioned):
            return str(self._describe(view, ns, base, table).table_id)

    def load(self, ns: str, table: str) -> tuple[str, bytes]:
        """(metadata location, metadata JSON bytes) of ``ns``.``table`` at the latest
        version (``ns@vN``: at version N).

        A plain namespace's latest version can expire while the load waits its turn
        (a writer that expires versions quickly): the load then starts again at the
        new latest version; only a version namespace's own expiry is an answer."""
        location = self.locate(ns, table)
        return location, self.document(location)

    def locate(self, ns: str, table: str) -> str:
        """The metadata location :meth:`load` answers (written or found), without
        reading the document (a conditional GET that matches needs no more)."""
        for attempt in range(1, LOAD_ATTEMPTS + 1):
            try:
                return self._location(ns, table)
            except VersionExpired as exc:
                if isinstance(exc, _ExpiredNamespace) or attempt == LOAD_ATTEMPTS:
                    raise
                log.info("table %s.%s: %s; loading the latest version again", ns, table, exc)
        raise AssertionError("unreachable")

    def document(self, location: str) -> bytes:
        """The metadata JSON bytes at ``location`` (one :meth:`locate` answered)."""
        with self._loading_for(location):
            data: bytes | None = self._documents.get(location)
            if data is None:
                data = self._read(location)
                self._documents.put(location, data)
        return data

    def _location(self, ns: str, table: str) -> str:
        with self._resolved(ns) as (view, base, version, versioned):
            d = self._describe(view, ns, base, table)
            oldest = int(self._lh.oldest_version)
            key = (d.table_id, version, oldest)
            location: str | None = self._locations.get(key)
            if location is None:
                with self._loading_for(key):
                    location = self._locations.get(key)
                    if location is None:
                        try:
                            location, data = self._write(f"{base}.{table}", version)
                        except VersionExpired as exc:
                            if versioned:  # the version the client named is gone
                                raise _ExpiredNamespace(f"namespace {ns!r}: {exc}") from None
                            raise
                        self._locations.put(key, location)
                        if data is not None:  # what it wrote: no need to read it back
                            self._documents.put(location, data)
            return location

    def close(self) -> None:
        """Close the reader the catalog opened (an open lakehouse passed in stays open)."""
        if self._owned:
            self._lh.close()

    def __enter__(self) -> IcebergCatalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _describe(view: Any, ns: str, base: str, table: str) -> Any:
        if not isinstance(table, str) or not table:
            raise ValueError("a table name must be a non-empty string")
        try:
            return view.describe_table(f"{base}.{table}")
        except NotFound:
            raise NoSuchTable(f"table {table!r} does not exist in namespace {ns!r}") from None

    @contextmanager
    def _loading_for(self, key: Any) -> Iterator[None]:
        """One thread computes a given key; the others wait for it and find it cached."""
        with self._loading_lock:
            lock = self._loading.setdefault(key, threading.Lock())
        with lock:
            yield
        with self._loading_lock:
            if self._loading.get(key) is lock and not lock.locked():
                del self._loading[key]

    def _write(self, qualified: str, version: int) -> tuple[str, bytes | None]:
        """(location, the bytes written; None when the document existed)."""
        from lakehouse.iceberg.writer import write_metadata_bytes

        self.stats["metadata_calls"] += 1
        try:
            location, data = write_metadata_bytes(self._lh, qualified, version=version)
            return str(location), data
        except VersionExpired:
            raise
        except NotFound as exc:  # dropped meanwhile: it is the table that is missing
            raise NoSuchTable(str(exc)) from None
        except ValueError as exc:  # not a bad request: the table cannot be described
            raise MetadataUnavailable(f"table {qualified}: {exc}") from exc

    def _read(self, location: str) -> bytes:
        """The bytes of the metadata JSON at ``location`` (a local path, or a URL under
        the lakehouse's ``iceberg/`` read through the lakehouse's own store)."""
        self.stats["documents_read"] += 1
        if "://" not in location:
            with open(location, "rb") as f:
                return f.read()
        from lakehouse.iceberg import paths
        from lakehouse.iceberg.writer import context_of

        ctx = context_of(self._lh)
        root = ctx.layout.iceberg_url
        name = None if root is None else paths.relative(root, location)
        if root is None or name is None:
            raise MetadataUnavailable(f"metadata {location} is not under the lakehouse")
        return bytes(paths.store(root, dict(ctx.options.storage_options)).get(name))


def _exists(view: Any, name: str) -> bool:
    """Whether namespace ``name`` exists in ``view`` (a name the lakehouse could not
    hold, with a dot or a control character, does not)."""
    try:
        return bool(view.namespace_exists(name))
    except (ValueError, TypeError):
        return False


class _ExpiredNamespace(NoSuchNamespace, VersionExpired):
    """A version namespace whose version expired (404, the reason in the message)."""
