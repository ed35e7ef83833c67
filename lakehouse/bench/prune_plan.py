"""What planning a read with a ``where`` costs per data file: pruning by bounds.

    python -m lakehouse.bench.prune_plan [files] [repeats]

Builds a table of ``files`` small files (one append of 3 rows each, ids
increasing) in a memory lakehouse, then times, for ``where="id = 5"``:

* ``arrow``: :func:`lakehouse.data.files.prune`, one Arrow fragment and
  guarantee per file (what every read did before terms);
* ``terms cold``: :func:`lakehouse.data.bounds.prune` on fresh records
  (every bound decoded, as on a record's first read);
* ``terms warm``: the same records again (decoded bounds kept with them);
* ``plan``: :func:`lakehouse.data.scan.pruned`, the read's planning step, with
  the predicate's terms (``terms``) and without them (``arrow``, as before);
* ``read``: the whole ``lh.read(t, where="id = 5")`` (file states, planning,
  the one file, the filter), with and without terms.

Prints the best of ``repeats`` runs, in microseconds per file.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import lakehouse
from lakehouse.data import bounds, scan
from lakehouse.data import files as datafiles


def _best(fn: Callable[[], Any], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def run(n_files: int = 2000, repeats: int = 5) -> dict[str, float]:
    """Seconds per file of each way of planning (see the module doc)."""
    h = lakehouse.open(f"memory://prune-{uuid.uuid4().hex}")
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    try:
        with h.begin() as txn:
            txn.create_namespace("n")
            txn.create_table("n.t", schema, properties={"compaction.auto": "false"})
        for k in range(n_files):
            with h.begin() as txn:
                ids = [3 * k, 3 * k + 1, 3 * k + 2]
                txn.append("n.t", pa.table({"id": ids, "s": [str(i) for i in ids]}, schema))
        with h.at_version(h.version) as v:
            d = v.describe_table("n.t")
            states = v.file_states("n.t")
        files = [f for f, _ in states]
        assert len(files) == n_files
        pred = scan.predicate(d, "id = 5")
        assert pred is not None and pred.exact
        cols = [c for c in d.columns if c.name == "id"]
        arrow_only = dataclasses.replace(pred, terms=(), exact=False)  # as before terms

        copies = [[dataclasses.replace(f) for f in files] for _ in range(repeats)]

        def cold() -> None:  # records never seen: every bound decoded
            bounds.prune(copies.pop(), pred.terms, cols, d.schema)

        out = {
            "arrow": _best(
                lambda: datafiles.prune(files, pred.expression, cols, d.schema), repeats
            ),
            "terms cold": _best(cold, repeats),
            "terms warm": _best(lambda: bounds.prune(files, pred.terms, cols, d.schema), repeats),
            "plan arrow": _best(lambda: scan.pruned(d, states, arrow_only), repeats),
            "plan terms": _best(lambda: scan.pruned(d, states, pred), repeats),
            "read arrow": _best(lambda: h.read("n.t", where=arrow_only), repeats),
            "read terms": _best(lambda: h.read("n.t", where="id = 5"), repeats),
        }
        assert h.read("n.t", where="id = 5").column("id").to_pylist() == [5]
        return {k: v / n_files for k, v in out.items()}
    finally:
        h.close()


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv else 2000
    repeats = int(argv[1]) if len(argv) > 1 else 5
    for name, seconds in run(n, repeats).items():
        sys.stdout.write(
            f"{name:>11}: {seconds * 1e6:8.2f} us/file  ({seconds * n * 1e3:.1f} ms)\n"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
