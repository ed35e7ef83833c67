"""The iceberg bench's own side: a lakehouse, its REST catalog (served by
``python -m lakehouse serve-iceberg`` in a process of its own, or from a thread),
its metadata writer."""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import lakehouse
from lakehouse.bench.iceberg_tables import NS, PROPS, SCHEMA

log = logging.getLogger("lakehouse.bench")
SERVER_START_S = 120.0  # how long the server process may take to say its port
_STARTED = re.compile(r"serving the Iceberg REST catalog of .* on (http://\S+)")


class ServerProcess:
    """``python -m lakehouse serve-iceberg URL --port 0`` in a process of its own, its
    log (the startup line says the port; then a line per request) in ``log_path``.
    :meth:`stop` sends SIGTERM (SIGKILL if it has not stopped 10 s later); on Linux
    the process also gets SIGTERM when this one dies without stopping it."""

    def __init__(self, url: str, log_path: str) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 (closed by stop)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lakehouse", "serve-iceberg", url, "--port", "0"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
                preexec_fn=_die_with_parent(),
            )
        except BaseException:
            self._log.close()
            raise
        try:
            self.url = self._wait_url()
        except BaseException:
            self.stop()
            raise
        log.info("iceberg catalog server: pid %d, %s", self.proc.pid, self.url)

    def _tail(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-2000:]

    def _wait_url(self) -> str:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            with open(self.log_path, "rb") as f:
                m = _STARTED.search(f.read().decode(errors="replace"))
            if m and _listening(m.group(1)):  # the line comes before the socket listens
                return m.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the Iceberg catalog server exited ({self.proc.returncode}): {self._tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Iceberg catalog server did not say its port in {SERVER_START_S:g} s: "
                    f"{self._tail()}"
                )
            time.sleep(0.02)

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    log.warning("the catalog server (pid %d) ignored SIGTERM", self.proc.pid)
                    self.proc.kill()
                    self.proc.wait()
        finally:
            self._log.close()


def _listening(url: str) -> bool:
    host, _, port = url.removeprefix("http://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=1).close()
    except OSError:
        return False
    return True


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to send the child SIGTERM when its parent dies
    (``prctl(PR_SET_PDEATHSIG)``); None elsewhere. libc is loaded before the fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    sig = int(signal.SIGTERM)
    return lambda: prctl(1, sig, 0, 0, 0)  # 1: PR_SET_PDEATHSIG


class Ours:
    def __init__(self, path: str) -> None:
        self.url = path
        self.lh = lakehouse.open(path)
        with self.lh.begin() as txn:
            txn.create_namespace(NS)
        self.server: Any = None  # a ServerProcess or a lakehouse.iceberg.Server
        self.server_pid: int | None = None
        self.catalog: Any = None
        self.http: Any = None  # a requests session for the HTTP floor
        self.base = ""

    def create(self, name: str) -> None:
        with self.lh.begin() as txn:
            txn.create_table(name, SCHEMA, PROPS, partition_by=["p"])

    def append(self, name: str, batch: pa.Table) -> int:
        with self.lh.begin() as txn:
            txn.append(name, batch)
        assert txn.committed_version is not None
        return txn.committed_version

    def files(self, name: str) -> int:
        return int(self.lh.table_stats(name).files)

    def write_metadata(self, name: str) -> str:
        from lakehouse import iceberg

        return str(iceberg.write_metadata(self.lh, name))

    def serve(self, how: str = "process", log_dir: str | None = None) -> None:
        """Start the REST catalog (``process``: ``python -m lakehouse serve-iceberg``;
        ``thread``: :class:`lakehouse.iceberg.Server` in this process) and its clients."""
        import requests
        from pyiceberg.catalog.rest import RestCatalog

        if how == "process":
            self.server = ServerProcess(
                self.url, os.path.join(log_dir or os.path.dirname(self.url), "server.log")
            )
            self.server_pid = self.server.proc.pid
        else:
            from lakehouse import iceberg

            self.server = iceberg.Server(self.url, port=0)
            self.server.start()
        self.base = self.server.url
        self.catalog = RestCatalog("lakehouse", uri=self.base)
        self.http = requests.Session()

    def config(self) -> Any:
        """``GET /v1/config``: one HTTP round trip to the server, nothing read."""
        r = self.http.get(f"{self.base}/v1/config", timeout=30)
        r.raise_for_status()
        return r.json()

    def close(self) -> None:
        try:
            if self.http is not None:
                self.http.close()
            if self.server is not None:
                self.server.stop()
        finally:
            self.lh.close()
