"""The Iceberg REST catalog served over HTTP: :func:`serve` (blocking, until
SIGTERM/SIGINT) and :class:`Server` (a background thread), both running the
Starlette application of :mod:`lakehouse.iceberg.rest` on uvicorn.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from typing import Any

from lakehouse.iceberg.catalog import IcebergCatalog
from lakehouse.iceberg.rest import app, check_token

__all__ = ["Server", "app", "check_token", "serve"]

log = logging.getLogger("lakehouse.iceberg")


def _bind(host: str, port: int) -> socket.socket:
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int in 0..65535, not {port!r}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so (else
    # every answer waits ~40 ms for a delayed ACK)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _uvicorn(catalog: IcebergCatalog, token: str | None) -> Any:
    import uvicorn

    config = uvicorn.Config(
        app(catalog, token=token),
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config)


def _catalog(url_or_lh: Any, storage_options: dict[str, Any] | None) -> IcebergCatalog:
    if isinstance(url_or_lh, IcebergCatalog):
        return url_or_lh
    return IcebergCatalog(url_or_lh, storage_options=storage_options)


def serve(
    url_or_lh: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8181,
    token: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> None:
    """Serve the Iceberg REST catalog of a lakehouse (URL, or an open lakehouse or
    reader) until SIGTERM or SIGINT (then it stops cleanly and returns)."""
    token = check_token(token)
    catalog = _catalog(url_or_lh, storage_options)
    try:
        sock = _bind(host, port)
        try:
            server = _uvicorn(catalog, token)
            log.info(
                "serving the Iceberg REST catalog of %s on %s%s",
                catalog.url,
                _url(sock),
                " (bearer token required)" if token else "",
            )
            with _quiet_signals():
                server.run(sockets=[sock])
        finally:
            sock.close()
    finally:
        if catalog is not url_or_lh:
            catalog.close()
    log.info("stopped")


class _quiet_signals:
    """While uvicorn serves in the main thread, it handles SIGTERM/SIGINT itself and
    afterwards raises them again for the handlers it found: these, which ignore
    them, so a signal stops the server and :func:`serve` returns."""

    def __enter__(self) -> None:
        self._old: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._old[sig] = signal.signal(sig, lambda *_: None)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


class Server:
    """The catalog served from a background thread (for tests and embedding)::

        with Server(url, token="t") as server:
            RestCatalog("lh", uri=server.url, token="t")

    ``port=0`` picks a free port; :attr:`url` says which.
    """

    def __init__(
        self,
        url_or_lh: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self._token = check_token(token)
        self._source = url_or_lh
        self._host = host
        self._port = port
        self._storage_options = storage_options
        self._thread: threading.Thread | None = None
        self._server: Any = None
        self._sock: socket.socket | None = None
        self.catalog: IcebergCatalog | None = None
        self.url = ""

    def start(self) -> Server:
        if self._thread is not None:
            raise RuntimeError("the server is already running")
        catalog = _catalog(self._source, self._storage_options)
        try:
            sock = _bind(self._host, self._port)
        except BaseException:
            if catalog is not self._source:
                catalog.close()
            raise
        self.catalog, self._sock, self.url = catalog, sock, _url(sock)
        self._server = server = _uvicorn(catalog, self._token)
        failed: list[BaseException] = []

        def run() -> None:
            try:
                server.run(sockets=[sock])
            except BaseException as exc:  # reported by start()
                failed.append(exc)

        self._thread = threading.Thread(target=run, name="lakehouse-iceberg", daemon=True)
        self._thread.start()
        while not server.started and self._thread.is_alive():
            time.sleep(0.005)
        if not server.started:
            self.stop()
            raise RuntimeError(f"the Iceberg catalog server did not start: {failed[:1]}")
        log.info("serving the Iceberg REST catalog of %s on %s", catalog.url, self.url)
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join()
        self._thread = None
        if self._sock is not None:
            self._sock.close()
        if self.catalog is not None and self.catalog is not self._source:
            self.catalog.close()
        log.info("stopped")

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
