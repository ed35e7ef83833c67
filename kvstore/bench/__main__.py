"""Command line: ``python -m kvstore.bench [--quick] [--stores ...] [--json] [--out FILE]``.

Prints machine info, ops/s per store and workload, kvstore's ratio to every
other store and the targets. Progress goes to stderr through logging.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace

from kvstore.bench.model import Config, Report, Target
from kvstore.bench.stores import STORES
from kvstore.bench.workloads import (
    KEY_BYTES,
    OPEN_TXNS,
    RAW_RECORD_BYTES,
    ROW_ORDER,
    UNITS,
    VALUE_BYTES,
    WORKLOADS,
    human,
)


def parse_count(text: str) -> int:
    """'100000', '100k' or '1M' -> an int."""
    t = text.strip().lower().replace("_", "")
    mult = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    if mult != 1:
        t = t[:-1]
    try:
        n = int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a key count: {text!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"key counts must be positive: {text!r}")
    return n


def _names(known: Sequence[str], what: str) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(s.strip() for s in text.split(",") if s.strip())
        bad = [n for n in names if n not in known]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what}: {', '.join(bad) or text!r} (known: {', '.join(known)})"
            )
        return names

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kvstore.bench",
        description="Benchmark kvstore against sqlite3, LMDB, RocksDB and SlateDB.",
        epilog="`python -m kvstore.bench --store s3 [--endpoint URL]` runs the S3 benchmark "
        "instead (durable put latency, group commit, requests per commit).",
    )
    p.add_argument(
        "--keys",
        type=lambda s: tuple(parse_count(x) for x in s.split(",")),
        help="comma-separated load sizes, e.g. 100k,1M (default: 100k,1M; "
        "--quick: 2k,10k); get and scan use the largest",
    )
    p.add_argument(
        "--stores",
        type=_names(tuple(STORES), "store"),
        help=f"comma-separated subset of {','.join(STORES)}",
    )
    p.add_argument(
        "--workloads",
        type=_names(WORKLOADS, "workload"),
        help=f"comma-separated subset of {','.join(WORKLOADS)}",
    )
    p.add_argument("--quick", action="store_true", help="small sizes and short time bounds")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--out", metavar="FILE", help="also write the tables as Markdown to FILE")
    p.add_argument(
        "--dir",
        metavar="DIR",
        help="where data goes (a temporary directory is made inside and removed "
        "afterwards; default: the system temp directory)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return p


def config_from_args(args: argparse.Namespace) -> Config:
    cfg = Config.quick() if args.quick else Config()
    return replace(
        cfg,
        root=args.dir,
        sizes=args.keys or cfg.sizes,
        stores=args.stores or cfg.stores,
        workloads=args.workloads or cfg.workloads,
    )


# ----------------------------------------------------------------------------
# rendering
# ----------------------------------------------------------------------------
def label(workload: str, size: int | None, cfg: Config) -> str:
    """The table's name for a row."""
    n = human(size) if size is not None else ""
    hot = f"txn RMW, {cfg.hot_threads} threads, {cfg.hot_keys} hot keys"
    ow = f"{human(cfg.overwrite_puts)} puts over {human(cfg.overwrite_keys)} keys"
    return {
        "load": f"load {n} (batched)",
        "get": f"random get, {n} keys, reopened",
        "scan": f"full scan, {n} keys",
        "raw_fsync": "raw append+fdatasync (around durable put)",
        "raw_overwrite": "raw overwrite+fdatasync: the limit (around durable put)",
        "put_durable": "durable put, 1 thread",
        "put_durable_mt": f"durable put, {cfg.threads} threads",
        "memory": f"peak RSS of the {n} load (MiB)",
        "txn_rmw": "txn RMW 2 keys, SERIALIZABLE, non-durable",
        "txn_rmw_durable": "txn RMW 2 keys, SERIALIZABLE, durable",
        "txn_hot_snapshot": f"{hot}, SNAPSHOT (commits/s)",
        "txn_hot_snapshot_aborts": "  abort rate at SNAPSHOT (% of attempts)",
        "txn_hot_serializable": f"{hot}, SERIALIZABLE (commits/s)",
        "txn_hot_serializable_aborts": "  abort rate at SERIALIZABLE (% of attempts)",
        "txn_open0": "txn RMW, SERIALIZABLE, no other txn open",
        "txn_open100": f"txn RMW, SERIALIZABLE, {OPEN_TXNS} long txns open",
        "overwrite": f"overwrite: {ow}, non-durable",
        "overwrite_max_ms": "overwrite: slowest single put (ms)",
        "get_after_overwrite": "random get after the overwrite",
        "space_amp": "after compact(): live SST bytes / data bytes",
        "get_after_compact": "random get after overwrite + compact()",
        "get_fresh": f"random get, fresh load of the {human(cfg.overwrite_keys)} keys",
    }[workload]


def fmt_value(v: float | None, unit: str = "ops/s") -> str:
    """A table cell for a value of ``unit``."""
    if v is None:
        return "-"
    if unit == "%":
        return f"{v:.1f}%"
    if unit == "x":
        return f"{v:.2f}x"
    if unit == "ms":
        return f"{v:,.1f}"
    return f"{v:,.0f}"


def table(
    headers: list[str], rows: list[list[str]], *, markdown: bool, text_last: bool = False
) -> str:
    """A plain-text or Markdown table; numbers right-aligned (a text last column left)."""
    right = set(range(1, len(headers) - (1 if text_last else 0)))
    if markdown:
        lines = [
            "| " + " | ".join(headers) + " |",
            "|" + "|".join("---:" if i in right else ":---" for i in range(len(headers))) + "|",
        ]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def fmt_target(t: Target) -> str:
    mark = {True: "✓", False: "✗", None: "?"}[t.passed]
    if t.actual is None:
        actual = "n/a"
    elif t.unit == "x":
        actual = f"{t.actual:.2f}x"
    else:
        actual = f"{t.actual:,.0f} {t.unit}"
    return f"{mark} {t.text} ({actual})"


def render(report: Report, *, markdown: bool) -> str:
    cfg, m = report.config, report.machine
    stores = report.stores
    others = [s for s in stores if s != "kvstore"]
    keys = report.row_keys()
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    raw = report.raw_fsync_ops
    over = report.raw_overwrite_ops
    sizes = ", ".join(human(n) for n in sorted(cfg.sizes))
    bullet = "- " if markdown else ""
    out = [
        ("## " if markdown else "") + f"kvstore benchmark, {m['date']}",
        "",
        f"{bullet}machine: {m['cpus']} CPUs ({m['cpus_usable']} usable), "
        f"{m['memory_gib']} GiB RAM, {m['python']}, {m['platform']}",
        f"{bullet}load average: {m['loadavg_at_start']} at start, "
        f"{m.get('loadavg_at_end', '?')} at end (the machine may be shared)",
        f"{bullet}versions: {versions}",
        f"{bullet}data: {KEY_BYTES}-byte keys, {VALUE_BYTES}-byte values, loads of {sizes} keys "
        f"in batches of {cfg.batch}; durable puts: up to {cfg.put_ops} per thread or "
        f"{cfg.put_seconds:g}s; transactions: {cfg.txn_seconds:g}s per run over "
        f"{human(cfg.txn_keys)} keys; overwrite: {human(cfg.overwrite_puts)} puts over "
        f"{human(cfg.overwrite_keys)} keys (bound {cfg.overwrite_seconds:g}s)",
        f"{bullet}raw append+fdatasync ({RAW_RECORD_BYTES}-byte appends): "
        f"{'-' if raw is None else f'{raw:,.0f}'} ops/s; overwrite+fdatasync of written "
        f"blocks (the limit): {'-' if over is None else f'{over:,.0f}'} ops/s",
        "",
    ]
    by_row: dict[tuple[str, int | None], list[Target]] = {}
    for t in report.targets:
        by_row.setdefault((t.workload, t.size), []).append(t)

    def cell(s: str, w: str, n: int | None) -> str:
        if (s, w) in report.not_applicable:
            return "n/a"
        return fmt_value(report.value(s, w, n), UNITS.get(w, "ops/s"))

    def ratio_cell(s: str, w: str, n: int | None) -> str:
        if (s, w) in report.not_applicable or ("kvstore", w) in report.not_applicable:
            return "n/a"
        return fmt_ratio(report.ratio(s, w, n))

    ops_rows = [[label(w, n, cfg)] + [cell(s, w, n) for s in stores] for w, n in keys]
    ratio_rows = [
        [label(w, n, cfg)]
        + [ratio_cell(s, w, n) for s in others]
        + ["; ".join(fmt_target(t) for t in by_row.get((w, n), []))]
        for w, n in keys
    ]
    out += [
        "ops/s per store (txn rows: commits/s; other units as labelled):",
        "",
        table(["workload", *stores], ops_rows, markdown=markdown),
        "",
        "kvstore / other (for peak RSS and slowest put lower is better) and kvstore's targets:",
        "",
        table(
            ["workload", *(f"vs {s}" for s in others), "targets"],
            ratio_rows,
            markdown=markdown,
            text_last=True,
        ),
        "",
    ]
    judged = [t for t in report.targets if t.passed is not None]
    out.append(f"targets met: {sum(bool(t.passed) for t in judged)} of {len(judged)}")
    notes = [
        f"{r.store} {label(r.workload, r.size, cfg).strip()}: {r.note}"
        for r in report.rows
        if r.note
    ]
    notes += [f"skipped {s}: {why}" for s, why in report.skipped.items()]
    rows_na: dict[tuple[str, str], list[str]] = {}
    for (s, w), why in report.not_applicable.items():
        rows_na.setdefault((s, why), []).append(w)
    stores_na: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (s, why), ws in rows_na.items():
        stores_na.setdefault((why, tuple(sorted(ws, key=ROW_ORDER.index))), []).append(s)
    notes += [
        f"n/a for {', '.join(ss)} ({', '.join(ws)}): {why}" for (why, ws), ss in stores_na.items()
    ]
    notes += [f"error: {e}" for e in report.errors]
    notes += [f"{s}: {STORES[s].durability}" for s in stores]
    out += ["", "notes:", *(f"- {n}" for n in notes)]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--store" in argv or any(a.startswith("--store=") for a in argv):
        # `--store s3`: the S3 benchmark (its own moto endpoint, or --endpoint)
        i = next(i for i, a in enumerate(argv) if a == "--store" or a.startswith("--store="))
        value = argv[i].split("=", 1)[1] if "=" in argv[i] else argv[i + 1]
        rest = argv[:i] + argv[i + (1 if "=" in argv[i] else 2) :]
        if value != "s3":
            print(f"unknown --store {value!r}; the only store is 's3'", file=sys.stderr)
            return 2
        from kvstore.bench.s3 import main as s3_main

        return s3_main(rest)
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr
    )
    if not args.quiet:
        logging.getLogger("kvstore.bench").setLevel(logging.INFO)
    from kvstore.bench.runner import run

    report = run(config_from_args(args))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(render(report, markdown=True))
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render(report, markdown=False), end="")
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
