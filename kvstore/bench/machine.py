"""What the machine gives the benchmark: its description, its raw sync rate, peak RSS.

:func:`machine_info` is the report's header (CPUs, memory, Python, platform,
load average, the versions of every store's package); :func:`raw_append_fdatasync`
measures the disk's append+fdatasync rate and :func:`raw_overwrite_fdatasync`
its overwrite+fdatasync rate (of blocks already written: the limit kvstore's
durable puts are judged against); :func:`peak_rss_bytes` is a process's own peak RSS (the
``memory`` row, read in the load subprocess).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kvstore.bench.workloads import RAW_RECORD_BYTES


def machine_info(data_dir: str) -> dict[str, Any]:
    versions: dict[str, str] = {"sqlite": sqlite3.sqlite_version}
    for dist in ("kvstore-lakehouse", "lmdb", "rocksdict", "slatedb"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    except (ValueError, OSError, AttributeError):
        mem_gib = None
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "memory_gib": None if mem_gib is None else round(mem_gib, 1),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "versions": versions,
        "data_dir": data_dir,
    }


def _synced_writes(
    fd: int, write: Callable[[int], None], seconds: float, max_ops: int
) -> tuple[int, float]:
    """``write(n)`` then fdatasync, for ``seconds`` or ``max_ops``: (writes, seconds)."""
    sync = getattr(os, "fdatasync", os.fsync)
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while n < max_ops:
        write(n)
        sync(fd)
        n += 1
        if time.perf_counter() >= deadline:
            break
    return n, time.perf_counter() - start


def raw_append_fdatasync(
    directory: str, seconds: float, max_ops: int = 1_000_000
) -> tuple[int, float]:
    """Appends of RAW_RECORD_BYTES, each followed by fdatasync: (appends, seconds)."""
    path = os.path.join(directory, "raw-append.bin")
    record = b"\x00" * RAW_RECORD_BYTES
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:

        def append(n: int) -> None:
            os.write(fd, record)

        return _synced_writes(fd, append, seconds, max_ops)
    finally:
        os.close(fd)
        os.unlink(path)


def raw_overwrite_fdatasync(
    directory: str, seconds: float, max_ops: int = 1_000_000, region: int = 8 << 20
) -> tuple[int, float]:
    """Overwrites of RAW_RECORD_BYTES in blocks already written (a ``region`` of
    zeros, written and synced first, cycled through), each followed by
    fdatasync: (writes, seconds). The limit of a durable commit: the sync
    flushes data only, no size or extent change (docs/format/wal.md)."""
    path = os.path.join(directory, "raw-overwrite.bin")
    record = b"\x01" * RAW_RECORD_BYTES
    slots = region // RAW_RECORD_BYTES
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, bytes(region))
        getattr(os, "fdatasync", os.fsync)(fd)

        def overwrite(n: int) -> None:
            os.pwrite(fd, record, (n % slots) * RAW_RECORD_BYTES)

        return _synced_writes(fd, overwrite, seconds, max_ops)
    finally:
        os.close(fd)
        os.unlink(path)


def peak_rss_bytes() -> int:
    """This process's peak RSS.

    On Linux, ``VmHWM`` of the process's own address space: ``ru_maxrss``
    keeps the high-water mark from before ``exec``, so in the load subprocess
    it would report the benchmark parent's RSS at fork time whenever that is
    larger (it is, after the parent ran other workloads).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB
