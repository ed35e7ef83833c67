"""``python -m lakehouse.bench``: the lakehouse benchmarks, in one run.

* ``meta`` (:mod:`lakehouse.bench.meta`): durable metadata commits against
  raw append+fdatasync and pyiceberg, and time travel after 10,000 versions;
* ``data`` (:mod:`lakehouse.bench.data`): table data (appends, reads of the
  latest and the first version, deletes, concurrent appends) against
  pylance and deltalake (:mod:`lakehouse.bench.anchors`);
* ``scale`` (:mod:`lakehouse.bench.scale`): tables of up to 10,000 small
  files (appends, reads of the latest and the first version, ``id = x``, a
  day-partitioned table) against pylance and DuckLake; a few minutes, so
  only with ``--only scale``;
* ``keys`` (:mod:`lakehouse.bench.keys`): merges of 1,000 keyed rows into
  tables of 1M and 10M rows, appends to a table with a primary key, and
  small appends against DuckLake with and without its data inlining
  (against pylance, deltalake and DuckLake); minutes, so only with
  ``--only keys``;
* ``iceberg`` (:mod:`lakehouse.bench.iceberg`): pyiceberg reading and
  loading lakehouse tables through our Iceberg REST catalog, and our
  metadata writer, against pyiceberg's own SQL catalog; only with
  ``--only iceberg``.

``meta`` and ``data`` run by default; ``--only meta``, ``--only data``,
``--only scale``, ``--only keys`` or ``--only iceberg`` picks one, and
``--quick`` shrinks every size to a smoke run of a few seconds. Everything
is written under ``--root`` (default: a new temporary directory under /tmp,
local disk), which is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from typing import Any

from lakehouse.bench import data, iceberg, keys, meta, report, scale

__all__ = ["main", "parser"]

PARTS = ("meta", "data", "scale", "keys", "iceberg")
DEFAULT_PARTS = ("meta", "data")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lakehouse.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", choices=PARTS, help="run one benchmark (default: meta and data)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    p.add_argument("--root", help="directory for the bench data (default: a temp dir in /tmp)")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("-v", "--verbose", action="store_true")
    meta.add_arguments(p.add_argument_group("metadata commits (meta)"))
    data.add_arguments(p.add_argument_group("table data (data)"))
    scale.add_arguments(p.add_argument_group("many small files (scale)"))
    keys.add_arguments(p.add_argument_group("merges by key, keyed and small appends (keys)"))
    iceberg.add_arguments(p.add_argument_group("Iceberg catalog against pyiceberg's (iceberg)"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING)
    if args.verbose:
        logging.getLogger("lakehouse.bench").setLevel(logging.INFO)
    root = args.root or tempfile.mkdtemp(prefix="lakehouse-bench-", dir="/tmp")
    os.makedirs(root, exist_ok=True)
    parts = [args.only] if args.only else list(DEFAULT_PARTS)
    res: dict[str, Any] = {}
    try:
        if "meta" in parts:
            res.update(meta.run(args, os.path.join(root, "meta")))
            print(meta.report(res), flush=True)
        if "data" in parts:
            res["data"] = data.run(args, os.path.join(root, "data"))
            print(report.report(res["data"]), flush=True)
        if "scale" in parts:
            res["scale"] = scale.run(args, os.path.join(root, "scale"))
            print(scale.report(res["scale"]), flush=True)
        if "keys" in parts:
            res["keys"] = keys.run(args, os.path.join(root, "keys"))
            print(keys.report(res["keys"]), flush=True)
        if "iceberg" in parts:
            res["iceberg"] = iceberg.run(args, os.path.join(root, "iceberg"))
            print(iceberg.report(res["iceberg"]), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0
