"""The load family: ``load``, ``memory``, ``get`` and ``scan``.

Each load runs in a fresh interpreter (:func:`load_in_subprocess`, whose
child is :func:`child_main`) on an empty directory, which also gives its peak
RSS (the ``memory`` row); the largest load is then reopened in this process
for the random point gets (:func:`get`) and the full scan (:func:`scan`).
"""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass

from kvstore.bench.adapters import Store
from kvstore.bench.machine import peak_rss_bytes
from kvstore.bench.model import Config, Report, Row
from kvstore.bench.stores import STORES
from kvstore.bench.workloads import batches, key

log = logging.getLogger("kvstore.bench")


@dataclass(frozen=True)
class LoadResult:
    loaded: int
    seconds: float
    peak_rss: int


_CHILD = "from kvstore.bench.loads import child_main; child_main()"


def load_in_subprocess(store: str, path: str, n: int, cfg: Config) -> LoadResult:
    """Run one load in a new interpreter; returns what it loaded, its time and peak RSS."""
    out = path + ".result.json"
    spec = {
        "store": store,
        "path": path,
        "n": n,
        "batch": cfg.batch,
        "seconds": cfg.load_seconds,
        "out": out,
    }
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=cfg.load_seconds * 4 + 300,
    )
    if proc.stderr.strip():
        log.debug("%s load %d stderr:\n%s", store, n, proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(
            f"load subprocess exited with {proc.returncode}: {proc.stderr.strip()[-1500:]}"
        )
    with open(out) as f:
        res = json.load(f)
    os.unlink(out)
    return LoadResult(res["loaded"], res["seconds"], res["peak_rss"])


def child_main() -> None:
    """Entry point of the load subprocess: argv[1] is the JSON spec; writes JSON to spec.out."""
    logging.basicConfig(level=logging.WARNING)
    spec = json.loads(sys.argv[1])
    store = STORES[spec["store"]](spec["path"])
    store.open_for_load()
    start = time.perf_counter()
    loaded = store.load(batches(spec["n"], spec["batch"]), start + spec["seconds"])
    seconds = time.perf_counter() - start
    store.close()
    with open(spec["out"], "w") as f:
        json.dump({"loaded": loaded, "seconds": seconds, "peak_rss": peak_rss_bytes()}, f)


def get(cls: type[Store], path: str, loaded: int, size: int, cfg: Config, report: Report) -> None:
    rng = random.Random(cfg.seed)
    keys = [key(rng.randrange(loaded)) for _ in range(cfg.get_ops)]
    store = cls(path)
    store.open()  # a reopen: the load ran (and closed the store) in a subprocess
    try:
        start = time.perf_counter()
        done, found = store.get_many(keys, start + cfg.get_seconds)
        seconds = time.perf_counter() - start
    finally:
        store.close()
    if found != done:
        raise AssertionError(f"{done - found} of {done} loaded keys were not found")
    report.add(Row(cls.name, "get", size, done / seconds, done, seconds))


def scan(cls: type[Store], path: str, loaded: int, size: int, cfg: Config, report: Report) -> None:
    store = cls(path)
    store.open()
    try:
        start = time.perf_counter()
        n = store.scan_all(start + cfg.scan_seconds)
        seconds = time.perf_counter() - start
    finally:
        store.close()
    note = ""
    if n < loaded:
        if seconds < cfg.scan_seconds:
            raise AssertionError(f"the scan returned {n} keys, {loaded} were loaded")
        note = f"time bound: scanned {n} of {loaded} keys"
    report.add(Row(cls.name, "scan", size, n / seconds, n, seconds, note))
