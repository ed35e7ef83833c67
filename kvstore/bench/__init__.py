"""``python -m kvstore.bench``: kvstore against sqlite3, LMDB, RocksDB and SlateDB.

Every store runs the same workloads (see :mod:`kvstore.bench.workloads`)
through a small adapter (the interface :mod:`kvstore.bench.adapters`, one
module per store under :mod:`kvstore.bench.stores`); the CLI prints ops/s,
kvstore's ratio to each store and the targets. From Python::

    from kvstore.bench import Config, run
    report = run(Config.quick(stores=("kvstore", "sqlite3")))
    report.rows  # [Row(store='kvstore', workload='load', size=2000, value=..., ...), ...]
"""

from __future__ import annotations

from kvstore.bench.adapters import Store
from kvstore.bench.model import Config, Report, Row, Target
from kvstore.bench.runner import run
from kvstore.bench.stores import STORES
from kvstore.bench.workloads import WORKLOADS

__all__ = ["STORES", "WORKLOADS", "Config", "Report", "Row", "Store", "Target", "run"]
