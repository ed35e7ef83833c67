"""The runner: every selected workload on every available store, into one :class:`Report`.

:func:`run` makes the run's temporary data directory, measures the raw
append+fdatasync rate, then for each store (skipping those whose package is
missing) runs the workload families in table order (:mod:`kvstore.bench.loads`,
:mod:`kvstore.bench.writes`, :mod:`kvstore.bench.txns`), marks the rows the
store does not run as n/a, turns a failing workload into an error line
instead of ending the run, and finally judges kvstore's targets
(:mod:`kvstore.bench.targets`). All data is deleted afterwards.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from functools import partial

from kvstore.bench import loads, txns, writes
from kvstore.bench.adapters import ROW_GROUPS, SERIALIZABLE, SNAPSHOT, Store
from kvstore.bench.machine import machine_info, raw_append_fdatasync, raw_overwrite_fdatasync
from kvstore.bench.model import Config, Report, Row
from kvstore.bench.stores import STORES
from kvstore.bench.targets import evaluate_targets
from kvstore.bench.workloads import WORKLOAD_ROWS, MiB, human

log = logging.getLogger("kvstore.bench")


def run(cfg: Config) -> Report:
    """Run ``cfg`` on every available store; all data is deleted afterwards."""
    if cfg.root is not None:
        os.makedirs(cfg.root, exist_ok=True)
    root = tempfile.mkdtemp(prefix="kvbench-", dir=cfg.root)
    report = Report(cfg, machine_info(root))
    try:
        n, seconds = raw_append_fdatasync(root, cfg.fsync_seconds)
        report.raw_fsync_ops = n / seconds
        log.info("raw append+fdatasync: %.0f ops/s", report.raw_fsync_ops)
        n, seconds = raw_overwrite_fdatasync(root, cfg.fsync_seconds)
        report.raw_overwrite_ops = n / seconds
        log.info("raw overwrite+fdatasync: %.0f ops/s", report.raw_overwrite_ops)
        for name in cfg.stores:
            cls = STORES[name]
            reason = cls.missing()
            if reason is not None:
                report.skipped[name] = reason
                log.warning("skipping %s: %s", name, reason)
                continue
            store_dir = os.path.join(root, name)
            os.makedirs(store_dir)
            try:
                _run_store(cls, store_dir, cfg, report)
            finally:
                shutil.rmtree(store_dir, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report.machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report.targets = evaluate_targets(report)
    return report


def _attempt(report: Report, store: str, what: str, fn: Callable[[], None]) -> None:
    """Run one workload; a failure becomes an error line instead of ending the run."""
    try:
        fn()
    except Exception as exc:
        log.exception("%s: %s failed", store, what)
        report.errors.append(f"{store} {what}: {type(exc).__name__}: {exc}")


def _run_store(cls: type[Store], store_dir: str, cfg: Config, report: Report) -> None:
    name = cls.name
    wanted = set(cfg.workloads)
    largest = max(cfg.sizes)
    dataset: tuple[str, int] | None = None  # (path, keys loaded) for get and scan

    sizes = sorted(set(cfg.sizes)) if "load" in wanted else []
    if not sizes and wanted & {"get", "scan", "memory"}:
        sizes = [largest]  # get/scan/memory still need the largest data set

    for n in sizes:
        path = os.path.join(store_dir, f"load-{n}")

        def load(n: int = n, path: str = path) -> None:
            nonlocal dataset
            res = loads.load_in_subprocess(name, path, n, cfg)
            note = "" if res.loaded == n else f"time bound: loaded {res.loaded} of {n} keys"
            if "load" in wanted:
                report.add(
                    Row(name, "load", n, res.loaded / res.seconds, res.loaded, res.seconds, note)
                )
            if n == largest:
                dataset = (path, res.loaded)
                if "memory" in wanted:
                    report.add(
                        Row(name, "memory", n, res.peak_rss / MiB, res.loaded, res.seconds, note)
                    )

        _attempt(report, name, f"load {human(n)}", load)
        if n != largest:
            shutil.rmtree(path, ignore_errors=True)

    if dataset is not None:
        path, loaded = dataset
        if "get" in wanted:
            get = partial(loads.get, cls, path, loaded, largest, cfg, report)
            _attempt(report, name, "get", get)
        if "scan" in wanted:
            scan = partial(loads.scan, cls, path, loaded, largest, cfg, report)
            _attempt(report, name, "scan", scan)
        shutil.rmtree(path, ignore_errors=True)

    if "put_durable" in wanted:
        _attempt(
            report,
            name,
            "put_durable",
            lambda: writes.put_durable(cls, os.path.join(store_dir, "put1"), cfg, report),
        )
    if "put_durable_mt" in wanted:
        _attempt(
            report,
            name,
            "put_durable_mt",
            lambda: writes.put_durable_mt(cls, os.path.join(store_dir, "putmt"), cfg, report),
        )

    for group in sorted({g for w in wanted for g in _groups_of(w)}):
        why = cls.not_run.get(group)
        if why is not None:
            for row in ROW_GROUPS[group]:
                report.not_applicable[(name, row)] = why

    def runs(group: str) -> bool:
        return group not in cls.not_run

    if "txn_rmw" in wanted:
        if runs("txn_rmw"):
            for durable in (False, True):
                w = "txn_rmw_durable" if durable else "txn_rmw"
                p = os.path.join(store_dir, w)
                _attempt(report, name, w, partial(txns.rmw, cls, p, durable, cfg, report))
        for isolation in (SNAPSHOT, SERIALIZABLE):
            w = f"txn_hot_{isolation}"
            if runs(w):
                p = os.path.join(store_dir, w)
                _attempt(report, name, w, partial(txns.hot, cls, p, isolation, cfg, report))
    if "txn_open100" in wanted and runs("txn_open"):
        _attempt(
            report,
            name,
            "txn_open100",
            lambda: txns.long_open(cls, os.path.join(store_dir, "open"), cfg, report),
        )
    if "overwrite" in wanted and runs("overwrite"):
        _attempt(
            report,
            name,
            "overwrite",
            lambda: writes.overwrite(
                cls, os.path.join(store_dir, "overwrite"), cfg, report, runs("compact")
            ),
        )


def _groups_of(workload: str) -> list[str]:
    """The row groups (adapters.ROW_GROUPS) that a command-line workload produces."""
    rows = set(WORKLOAD_ROWS.get(workload, ()))
    return [g for g, members in ROW_GROUPS.items() if rows & set(members)]
