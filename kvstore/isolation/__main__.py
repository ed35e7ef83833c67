"""``python -m kvstore.isolation``: the isolation lab on the command line.

Subcommands::

    run      generate a workload against an engine, record and check it
    check    check a JSON Lines history recorded anywhere
    matrix   the anomaly matrix (+ abort rate versus contention, + PNG plots)
    detect   how often the checker catches an engine (broken ones by default)
    bench    time the checker on a large recorded history
    levels   which anomalies each isolation level forbids

Exit status: 0 fine, 1 a forbidden anomaly was found (run, check) or an
expectation failed (matrix, detect), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict, fields

from kvstore.isolation import anomalies as an
from kvstore.isolation.adapters import BROKEN, ENGINES, engine_spec
from kvstore.isolation.bench import checker_benchmark, detection
from kvstore.isolation.checker import MODELS, CheckResult, check
from kvstore.isolation.history import Event, dump_jsonl, load_jsonl
from kvstore.isolation.matrix import (
    abort_curves,
    abort_table_markdown,
    abort_table_text,
    default_columns,
    levels_table,
    render_markdown,
    render_text,
    run_matrix,
)
from kvstore.isolation.workload import Workload, run_seeded, run_threaded, shrink


def _out(text: str = "") -> None:
    sys.stdout.write(text + ("\n" if not text.endswith("\n") else ""))
    sys.stdout.flush()


def _report(result: CheckResult, level: str, shown: int) -> None:
    _out(
        f"{result.txns} transactions ({result.ok} ok, {result.failed} fail, {result.info} info), "
        f"model {result.model}, edges {result.edges}, checked in {result.seconds:.2f}s"
    )
    counts = result.counts()
    _out("anomalies: " + (", ".join(f"{k} x{v}" for k, v in counts.items()) or "none"))
    bad = result.forbidden(level)
    strongest = result.strongest_level()
    note = ""
    if result.txns == 0:
        note = " (the history is empty: nothing was checked)"
    elif strongest == "serializable" and not result.realtime:
        note = " (strict-serializable not checked: pass --realtime)"
    _out(f"strongest level satisfied: {strongest or 'none'}{note}")
    why = result.unchecked(level)
    if bad:
        _out(f"INVALID at {an.level_name(level)}: {len(bad)} forbidden anomalies")
    elif why is not None:
        _out(f"NOT CHECKED at {an.level_name(level)}: {why}")
    else:
        _out(f"VALID at {an.level_name(level)}")
    for a in bad[:shown]:
        _out("")
        _out(a.explain())
    if len(bad) > shown:
        _out(f"\n... and {len(bad) - shown} more (--show N)")


def _workload(args: argparse.Namespace) -> Workload:
    kw = {f.name: getattr(args, f.name) for f in fields(Workload) if hasattr(args, f.name)}
    return Workload(**{k: v for k, v in kw.items() if v is not None})


def cmd_run(args: argparse.Namespace) -> int:
    spec = engine_spec(args.engine)
    level = an.level_name(args.level)
    if level not in spec.levels:
        raise ValueError(f"engine {spec.name} offers {', '.join(spec.levels)}, not {level}")
    w = _workload(args)
    engine = spec.factory()
    try:
        run = (run_threaded if args.threaded else run_seeded)(engine, level, w)
    finally:
        engine.close()
    _out(
        f"{spec.name} at {level}: {run.committed} committed, {run.aborted} aborted "
        f"({100 * run.abort_rate:.1f}%), seed {w.seed}, concurrency {w.concurrency}"
        + (", threaded" if args.threaded else "")
    )
    result = check(run.events, realtime=args.realtime)
    if args.shrink and not result.valid(level) and not args.threaded:

        def fails(events: list[Event]) -> bool:
            return not check(events, realtime=args.realtime).valid(level)

        run = shrink(spec.factory, run, fails)
        result = check(run.events, realtime=args.realtime)
        _out(f"shrunk to {result.txns} transactions (final read included)")
    if args.out:
        dump_jsonl(run.events, args.out)
        _out(f"history written to {args.out}")
    _report(result, level, args.show)
    return 0 if result.holds(level) else 1


def cmd_check(args: argparse.Namespace) -> int:
    events = load_jsonl(args.history)
    result = check(events, model=args.model, realtime=args.realtime)
    if args.json:
        _out(json.dumps(result.to_json(args.level), indent=2))
    else:
        _report(result, args.level, args.show)
    return 0 if result.holds(args.level) else 1


def cmd_matrix(args: argparse.Namespace) -> int:
    engines = args.engines.split(",") if args.engines else None
    columns = default_columns(engines)
    m = run_matrix(columns)
    _out(m.to_markdown() if args.markdown else m.to_text())
    status = 0
    for name in {c.engine for c in columns} - set(BROKEN) - {"memory"}:
        diff = m.mismatches(name)
        if diff:
            _out(f"{name} differs from PostgreSQL: " + "; ".join(diff))
            status = 1 if name == "kvstore" else status
    if "kvstore" in {c.engine for c in columns} and not m.mismatches("kvstore"):
        _out("kvstore matches PostgreSQL (REPEATABLE READ = SNAPSHOT, SERIALIZABLE) everywhere.")
    if args.matrix_plot:
        from kvstore.isolation.plot import plot_matrix

        plot_matrix(m, args.matrix_plot)
        _out(f"matrix plot written to {args.matrix_plot}")
    if args.abort_txns > 0:
        concs = [int(c) for c in args.concurrency.split(",")]
        curve_cols = [c for c in columns if not ENGINES[c.engine].broken]
        w = Workload(txns=args.abort_txns)
        points = abort_curves(curve_cols, concs, w, seeds=args.seeds)
        _out("")
        _out(
            f"abort rate versus concurrency ({args.abort_txns} transactions x {args.seeds} "
            "seeds per point)"
        )
        _out(abort_table_markdown(points) if args.markdown else abort_table_text(points))
        forbidden = [p for p in points if p.forbidden]
        for p in forbidden:
            _out(
                f"!! {p.column.label} at concurrency {p.concurrency}: {p.forbidden} histories "
                "with forbidden anomalies"
            )
            status = 1
        if args.plot:
            from kvstore.isolation.plot import plot_abort_rates

            plot_abort_rates(points, args.plot)
            _out(f"abort-rate plot written to {args.plot}")
    return status


def cmd_detect(args: argparse.Namespace) -> int:
    names = args.engines.split(",") if args.engines else list(BROKEN)
    w = _workload(args)
    head = ["engine", "level", "caught", "rate", "anomalies (histories)", "seconds"]
    rows = []
    status = 0
    for name in names:
        spec = engine_spec(name)
        for level in spec.levels if not args.level else [an.level_name(args.level)]:
            d = detection(name, level, seeds=args.seeds, first_seed=args.first_seed, workload=w)
            rows.append(
                [
                    name,
                    level,
                    f"{d.caught}/{d.seeds}",
                    f"{100 * d.rate:.0f}%",
                    ", ".join(f"{k} {v}" for k, v in d.anomalies.items()) or "-",
                    f"{d.seconds:.1f}",
                ]
            )
            if spec.broken and d.rate < args.require:
                status = 1
            if not spec.broken and d.caught:
                status = 1
    _out(render_markdown(head, rows) if args.markdown else render_text(head, rows))
    return status


def cmd_bench(args: argparse.Namespace) -> int:
    r = checker_benchmark(
        args.txns,
        engine=args.engine,
        level=an.level_name(args.level),
        concurrency=args.concurrency,
        realtime=args.realtime,
        keep=args.keep,
    )
    if args.json:
        _out(json.dumps({**asdict(r), "txns_per_second": r.txns_per_second}, indent=2))
        return 0
    _out(
        f"history: {r.txns} transactions, {r.events} events, {r.file_bytes / 1e6:.1f} MB "
        f"JSON Lines, recorded on {r.engine} at {r.level} in {r.record_seconds:.1f}s"
    )
    _out(
        f"load {r.load_seconds:.2f}s + check {r.check_seconds:.2f}s = "
        f"{r.load_seconds + r.check_seconds:.2f}s ({r.txns_per_second:,.0f} transactions/s)"
    )
    _out(f"edges {r.edges}; anomalies {r.anomalies or 'none'}")
    return 0


def cmd_levels(args: argparse.Namespace) -> int:
    head, rows = levels_table()
    _out(render_markdown(head, rows) if args.markdown else render_text(head, rows))
    return 0


def _workload_args(p: argparse.ArgumentParser) -> None:
    d = Workload()
    g = p.add_argument_group("workload")
    g.add_argument("--txns", type=int, default=None, help=f"transactions (default {d.txns})")
    g.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help=f"open transactions at once (default {d.concurrency})",
    )
    g.add_argument("--keys", type=int, default=None, help=f"active keys (default {d.keys})")
    g.add_argument(
        "--writes-per-key",
        dest="writes_per_key",
        type=int,
        default=None,
        help=f"appends before a key retires (default {d.writes_per_key})",
    )
    g.add_argument(
        "--min-ops",
        dest="min_ops",
        type=int,
        default=None,
        help=f"shortest transaction (default {d.min_ops})",
    )
    g.add_argument(
        "--max-ops",
        dest="max_ops",
        type=int,
        default=None,
        help=f"longest transaction (default {d.max_ops})",
    )
    g.add_argument(
        "--read-share",
        dest="read_share",
        type=float,
        default=None,
        help=f"reads among single-key operations (default {d.read_share})",
    )
    g.add_argument(
        "--scan-share",
        dest="scan_share",
        type=float,
        default=None,
        help=f"scans among operations (default {d.scan_share})",
    )
    g.add_argument(
        "--scan-width",
        dest="scan_width",
        type=int,
        default=None,
        help=f"keys per scanned range (default {d.scan_width})",
    )
    g.add_argument("--model", choices=MODELS, default=None, help="history model")
    g.add_argument("--seed", type=int, default=None, help="seed (default 0)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kvstore.isolation",
        description="Record transaction histories and check them for isolation anomalies.",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = p.add_subparsers(dest="command", required=True)
    engines = ", ".join(ENGINES)

    r = sub.add_parser("run", help="run a workload, record and check its history")
    r.add_argument("--engine", default="kvstore", help=f"one of: {engines}")
    r.add_argument("--level", default="serializable", help="snapshot | serializable")
    r.add_argument("--threaded", action="store_true", help="real threads instead of the scheduler")
    r.add_argument("--shrink", action="store_true", help="shrink a failing run to a small repro")
    r.add_argument("--realtime", action="store_true", help="add real-time edges")
    r.add_argument("--out", help="write the history here (JSON Lines)")
    r.add_argument("--show", type=int, default=3, help="anomalies to explain (default 3)")
    _workload_args(r)
    r.set_defaults(fn=cmd_run)

    c = sub.add_parser("check", help="check a JSON Lines history")
    c.add_argument("history", help="path of a .jsonl history")
    c.add_argument(
        "--level",
        default="serializable",
        type=an.level_name,
        help=f"judge against: {', '.join(an.LEVELS)} (default serializable)",
    )
    c.add_argument("--model", choices=MODELS, default=None, help="default: detect")
    c.add_argument("--realtime", action="store_true", help="add real-time edges")
    c.add_argument("--json", action="store_true", help="machine-readable result")
    c.add_argument("--show", type=int, default=5, help="anomalies to explain (default 5)")
    c.set_defaults(fn=cmd_check)

    m = sub.add_parser("matrix", help="the anomaly matrix and abort rate versus contention")
    m.add_argument(
        "--engines", help=f"comma-separated (default: all installed but memory): {engines}"
    )
    m.add_argument("--markdown", action="store_true", help="Markdown tables")
    m.add_argument("--matrix-plot", dest="matrix_plot", help="write the matrix as a PNG")
    m.add_argument("--plot", help="write abort rate versus concurrency as a PNG")
    m.add_argument(
        "--abort-txns",
        dest="abort_txns",
        type=int,
        default=300,
        help="transactions per abort-rate point; 0 skips the curves (default 300)",
    )
    m.add_argument("--seeds", type=int, default=3, help="seeds per abort-rate point (default 3)")
    m.add_argument("--concurrency", default="1,2,4,8,16", help="abort-rate x axis")
    m.set_defaults(fn=cmd_matrix)

    d = sub.add_parser("detect", help="detection rate over many seeds (broken engines)")
    d.add_argument("--engines", help=f"comma-separated (default: {', '.join(BROKEN)})")
    d.add_argument("--level", help="only this level (default: every level the engine offers)")
    d.add_argument("--seeds", type=int, default=100, help="seeds (default 100)")
    d.add_argument("--first-seed", dest="first_seed", type=int, default=0)
    d.add_argument(
        "--require",
        type=float,
        default=0.95,
        help="minimum detection rate for broken engines (default 0.95)",
    )
    d.add_argument("--markdown", action="store_true")
    _workload_args(d)
    d.set_defaults(fn=cmd_detect)

    b = sub.add_parser("bench", help="time the checker on a large history")
    b.add_argument("--txns", type=int, default=100_000, help="transactions (default 100000)")
    b.add_argument("--engine", default="memory", help="engine that records it (default memory)")
    b.add_argument("--level", default="serializable")
    b.add_argument("--concurrency", type=int, default=8)
    b.add_argument("--realtime", action="store_true")
    b.add_argument("--keep", help="keep the history at this path")
    b.add_argument("--json", action="store_true")
    b.set_defaults(fn=cmd_bench)

    lv = sub.add_parser("levels", help="which anomalies each level forbids")
    lv.add_argument("--markdown", action="store_true")
    lv.set_defaults(fn=cmd_levels)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.fn(args))
    except (ValueError, FileNotFoundError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
