#!/usr/bin/env python3
"""Same-run A/B benchmark of two checkouts of this repository.

    python tools/ab_bench.py --base /work/ab-base --head /work/main [--rounds 3] [--quick]

Runs ``python -m kvstore.bench`` and ``python -m lakehouse.bench`` once per
round for each checkout, alternating base and head (A B A B ...), so that
a machine whose load drifts (it may be shared) slows both alike. Every run
uses the same interpreter (by default the head's ``.venv/bin/python``) with
``PYTHONPATH`` and the working directory set to the checkout under test, and
hands its numbers back as JSON (``kvstore.bench --json`` on stdout,
``lakehouse.bench --json FILE``). Prints a Markdown table: per workload the
median of each side, head/base, the spread (min-max) of each side, and a flag
where head is worse than base beyond both spreads (the ranges do not
overlap) by at least ``--min-change`` (so at least 2 rounds are needed for a
flag); the exit status is 1 when anything is flagged.

A workload only one side reports (a bench that gained or lost a row) is shown
with "-" on the other side; a run that fails is reported and left out, and
the remaining runs go on. Ctrl-C stops early and prints what was measured.

By default only the code under test runs: ``kvstore.bench --stores kvstore``
and ``lakehouse.bench --systems ours --iceberg-commits 0`` (the other stores'
numbers do not depend on the checkout); ``--kv-args`` / ``--lh-args`` replace
those defaults. A dev tool: standard library only, not part of the package.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

BENCHES = ("kvstore", "lakehouse")
DEFAULT_ARGS = {
    "kvstore": ["--stores", "kvstore"],
    "lakehouse": ["--systems", "ours", "--iceberg-commits", "0"],
}
HIGHER, LOWER = "higher", "lower"


@dataclass(frozen=True)
class Metric:
    """One number a bench run reports, and which way is better."""

    name: str
    value: float
    better: str  # HIGHER or LOWER
    #: a rate or a time (a worse value reads "slower"); else e.g. MiB or a ratio
    speed: bool = True


@dataclass
class Side:
    """One checkout: where it is and what its runs measured."""

    label: str
    path: str
    values: dict[str, list[float]] = field(default_factory=dict)
    meta: dict[str, Metric] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


# ---------------------------------------------------------------------------
# what each bench reports
# ---------------------------------------------------------------------------
def _human(n: int) -> str:
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def kvstore_metrics(doc: dict[str, Any]) -> list[Metric]:
    """The rows of ``python -m kvstore.bench --json`` (every store present)."""
    out: list[Metric] = []
    raw = doc.get("raw_append_fdatasync_ops_per_s")
    if isinstance(raw, (int, float)):
        out.append(Metric("kvstore: raw append+fdatasync, ops/s (machine)", raw, HIGHER))
    stores = {r.get("store") for r in doc.get("rows", [])}
    for r in doc.get("rows", []):
        value = r.get("value")
        if not isinstance(value, (int, float)):
            continue
        unit = r.get("unit", "ops/s")
        size = f" {_human(r['size'])}" if r.get("size") else ""
        store = "" if stores == {"kvstore"} else f"{r.get('store')} "
        machine = " (machine)" if r.get("workload") == "raw_fsync" else ""
        name = f"kvstore: {store}{r.get('workload')}{size}, {unit}{machine}"
        if unit == "ops/s":
            out.append(Metric(name, value, HIGHER))
        else:  # MiB, ms (slowest put), % (abort rate), x (space amplification)
            out.append(Metric(name, value, LOWER, speed=unit == "ms"))
    return out


def lakehouse_metrics(doc: dict[str, Any]) -> list[Metric]:
    """The figures of ``python -m lakehouse.bench --json FILE`` (meta and/or data)."""
    out: list[Metric] = []

    def add(name: str, value: Any, better: str, scale: float = 1.0, speed: bool = True) -> None:
        if isinstance(value, (int, float)) and math.isfinite(value):
            out.append(Metric(name, value * scale, better, speed))

    t = doc.get("throughput") or {}
    add("lakehouse meta: raw append+fdatasync, /s (machine)", t.get("raw_fsync_per_s"), HIGHER)
    add("lakehouse meta: commits/s, 1 thread", t.get("lakehouse_1_thread_per_s"), HIGHER)
    add("lakehouse meta: commits/s, 8 threads", t.get("lakehouse_8_threads_per_s"), HIGHER)
    add("lakehouse meta: commits/s, fsync off", t.get("fsync_off_per_s"), HIGHER)
    add("lakehouse meta: CPU µs per commit", t.get("cpu_us_per_commit"), LOWER)
    for tt in doc.get("time_travel") or []:
        n = tt.get("tables")
        add(f"lakehouse meta: time travel, {n} tables, build s", tt.get("build_s"), LOWER)
        for where in ("memtable+L0", "compacted"):
            r = tt.get(where) or {}
            prefix = f"lakehouse meta: time travel, {n} tables, {where}"
            add(f"{prefix}, version 1 µs", r.get("at_version_1_us"), LOWER)
            add(f"{prefix}, latest µs", r.get("latest_us"), LOWER)
    s = (doc.get("data") or {}).get("summary") or {}

    def med(x: Any) -> Any:
        return x.get("median") if isinstance(x, dict) else None

    for n, x in (s.get("append_per_s") or {}).items():
        add(f"lakehouse data: appends/s, {n}", med(x), HIGHER)
    for k, per in (s.get("read_s") or {}).items():
        for n, x in per.items():
            add(f"lakehouse data: read {k} ms, {n}", med(x), LOWER, 1e3)
    for n, x in (s.get("delete_s") or {}).items():
        add(f"lakehouse data: delete 1% ms, {n}", med(x), LOWER, 1e3)
    for n, x in (s.get("time_travel_ratio") or {}).items():
        add(f"lakehouse data: time travel ratio, {n}", med(x), LOWER, speed=False)
    for n, x in (s.get("concurrent_per_s") or {}).items():
        add(f"lakehouse data: concurrent appends/s, {n}", med(x), HIGHER)
    return out


# ---------------------------------------------------------------------------
# running one bench in one checkout
# ---------------------------------------------------------------------------
def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def checkout_env(path: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = path  # only this checkout (it also becomes the cwd: sys.path[0])
    return env


def check_checkout(python: str, path: str) -> str:
    """Fail unless ``python`` imports kvstore and lakehouse from ``path``; a description."""
    probe = (
        "import kvstore, lakehouse, importlib.util as u; "
        "print(kvstore.__file__); print(lakehouse.__file__); "
        "print(u.find_spec('kvstore._speedups') is not None)"
    )
    proc = subprocess.run(
        [python, "-c", probe], cwd=path, env=checkout_env(path), capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"{path}: cannot import the packages:\n{proc.stderr.strip()[-2000:]}")
    kv, lh, speedups = proc.stdout.split()
    root = os.path.realpath(path) + os.sep
    for f in (kv, lh):
        if not os.path.realpath(f).startswith(root):
            raise SystemExit(f"{path}: {f} was imported instead (PYTHONPATH not honoured?)")
    rev = subprocess.run(
        ["git", "-C", path, "describe", "--always", "--dirty"], capture_output=True, text=True
    ).stdout.strip()
    return f"{rev or '?'}{'' if speedups == 'True' else ', no C speedups built'}"


def run_bench(
    bench: str, side: Side, python: str, args: list[str], workdir: str, timeout: float
) -> list[Metric]:
    """One run of one bench in one checkout; raises RuntimeError when it gives no numbers."""
    if bench == "kvstore":
        cmd = [python, "-m", "kvstore.bench", *args, "--json", "-q"]
    else:
        out = os.path.join(workdir, "lakehouse.json")
        root = os.path.join(workdir, "lakehouse-root")
        cmd = [python, "-m", "lakehouse.bench", *args, "--json", out, "--root", root]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            cwd=side.path,
            env=checkout_env(side.path),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout:g}s") from None
    finally:
        side.seconds += time.perf_counter() - start
    # the end of stderr (a traceback's last lines), indented under a Markdown bullet
    tail = "".join(f"\n      {line}" for line in proc.stderr.strip().splitlines()[-6:])
    if bench == "kvstore":
        text = proc.stdout
        doc = _json_from(text[text.find("{") :]) if "{" in text else None
        metrics = kvstore_metrics(doc) if doc else []
        if doc and doc.get("errors"):
            side.failures.append(f"{bench}: the run reported errors: {doc['errors']}")
    else:
        try:
            with open(out, encoding="utf-8") as f:
                doc = json.load(f)
            os.unlink(out)
        except (OSError, ValueError):
            doc = None
        metrics = lakehouse_metrics(doc) if doc else []
    if not metrics:
        raise RuntimeError(f"exit code {proc.returncode}, no results; stderr ends:{tail}")
    if proc.returncode != 0 and bench == "lakehouse":
        side.failures.append(f"{bench}: exit code {proc.returncode}; stderr ends:{tail}")
    return metrics


def _json_from(text: str) -> dict[str, Any] | None:
    try:
        doc = json.JSONDecoder().raw_decode(text)[0]
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


# ---------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------
def fmt(v: float) -> str:
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def spread(xs: list[float]) -> str:
    if not xs:
        return "-"
    lo, hi = fmt(min(xs)), fmt(max(xs))
    return lo if lo == hi else f"{lo}-{hi}"


def verdict(m: Metric, base: list[float], head: list[float], min_change: float) -> str:
    """'⚠ slower' (or worse) when head is worse than base beyond both spreads."""
    if not base:
        return "only in head"
    if not head:
        return "only in base"
    if len(base) < 2 or len(head) < 2 or m.name.endswith("(machine)"):
        return ""  # one run has no spread; the machine rows do not measure the code
    b, h = statistics.median(base), statistics.median(head)
    if b == 0 or abs(h / b - 1) < min_change:
        return ""
    higher = m.better == HIGHER
    worse = max(head) < min(base) if higher else min(head) > max(base)
    better = min(head) > max(base) if higher else max(head) < min(base)
    if worse:
        return "⚠ slower" if m.speed else "⚠ worse"
    if better:
        return "faster" if m.speed else "better"
    return ""


def table(base: Side, head: Side, order: Iterable[str], min_change: float) -> str:
    lines = [
        "| workload | base median | head median | head/base | base spread | head spread | |",
        "|:---|---:|---:|---:|---:|---:|:---|",
    ]
    for name in order:
        m = head.meta.get(name) or base.meta[name]
        b, h = base.values.get(name, []), head.values.get(name, [])
        bm = statistics.median(b) if b else None
        hm = statistics.median(h) if h else None
        ratio = f"{hm / bm:.3f}" if bm and hm is not None else "-"
        arrow = "↑" if m.better == HIGHER else "↓"
        lines.append(
            f"| {name} {arrow} | {'-' if bm is None else fmt(bm)} | "
            f"{'-' if hm is None else fmt(hm)} | {ratio} | {spread(b)} | {spread(h)} | "
            f"{verdict(m, b, h, min_change)} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python tools/ab_bench.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base", required=True, help="the reference checkout (A)")
    p.add_argument("--head", required=True, help="the checkout under test (B)")
    p.add_argument("--rounds", type=int, default=3, help="runs per checkout and bench (3)")
    p.add_argument("--quick", action="store_true", help="pass --quick to every bench")
    p.add_argument(
        "--benches",
        default=",".join(BENCHES),
        help="comma-separated subset of kvstore,lakehouse (default: both)",
    )
    p.add_argument("--python", help="interpreter for every run (default: HEAD/.venv/bin/python)")
    p.add_argument(
        "--kv-args",
        help=f"arguments for kvstore.bench (default: {shlex.join(DEFAULT_ARGS['kvstore'])!r})",
    )
    p.add_argument(
        "--lh-args",
        help=f"arguments for lakehouse.bench (default: {shlex.join(DEFAULT_ARGS['lakehouse'])!r})",
    )
    p.add_argument(
        "--min-change",
        type=float,
        default=0.03,
        help="smallest |head/base - 1| flagged even outside the spreads (default 0.03)",
    )
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run (default 3600)")
    p.add_argument("--out", metavar="FILE", help="also write the Markdown report to FILE")
    p.add_argument("--json", metavar="FILE", help="also write every run's numbers to FILE")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    benches = [b.strip() for b in args.benches.split(",") if b.strip()]
    unknown = sorted(set(benches) - set(BENCHES))
    if unknown or not benches:
        raise SystemExit(f"--benches: unknown {unknown or args.benches!r} (known: {BENCHES})")
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    base = Side("base", os.path.abspath(args.base))
    head = Side("head", os.path.abspath(args.head))
    python = args.python or os.path.join(head.path, ".venv", "bin", "python")
    if not os.path.exists(python):
        python = sys.executable
    extra = {
        "kvstore": shlex.split(args.kv_args)
        if args.kv_args is not None
        else DEFAULT_ARGS["kvstore"],
        "lakehouse": (
            shlex.split(args.lh_args) if args.lh_args is not None else DEFAULT_ARGS["lakehouse"]
        ),
    }
    if args.quick:
        extra = {b: ["--quick", *a] for b, a in extra.items()}
    revs = {side.label: check_checkout(python, side.path) for side in (base, head)}
    load_start = os.getloadavg()
    started = time.time()
    order: list[str] = []  # metric names in first-seen order
    runs: list[dict[str, Any]] = []
    interrupted = False
    with tempfile.TemporaryDirectory(prefix="ab-bench-") as workdir:
        try:
            for r in range(1, args.rounds + 1):
                for bench in benches:
                    for side in (base, head):  # A B A B ...
                        log(f"round {r}/{args.rounds}: {bench}.bench on {side.label} ...")
                        t0 = time.perf_counter()
                        try:
                            metrics = run_bench(
                                bench, side, python, extra[bench], workdir, args.timeout
                            )
                        except RuntimeError as exc:
                            side.failures.append(f"round {r}, {bench}: {exc}")
                            log(f"  failed: {str(exc).splitlines()[0]}")
                            continue
                        log(f"  {len(metrics)} figures in {time.perf_counter() - t0:.0f}s")
                        prev = None
                        for m in metrics:
                            if m.name not in side.values:
                                side.values[m.name] = []
                                side.meta[m.name] = m
                            side.values[m.name].append(m.value)
                            if m.name not in order:  # after its predecessor in this run
                                order.insert(order.index(prev) + 1 if prev else len(order), m.name)
                            prev = m.name
                        runs.append(
                            {
                                "round": r,
                                "bench": bench,
                                "side": side.label,
                                "values": {m.name: m.value for m in metrics},
                            }
                        )
        except KeyboardInterrupt:
            interrupted = True
            log("interrupted: reporting what was measured")
    load_end = os.getloadavg()
    report = [
        "## A/B benchmark: " + "; ".join(f"{b}.bench {shlex.join(extra[b])}" for b in benches),
        "",
        f"- base: `{base.path}` ({revs['base']}); head: `{head.path}` ({revs['head']})",
        f"- {args.rounds} round(s), base and head alternating (A B A B); interpreter `{python}`",
        f"- load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end; "
        f"{(time.time() - started) / 60:.1f} min (base runs {base.seconds:.0f}s, "
        f"head runs {head.seconds:.0f}s)",
        "- ↑ higher is better, ↓ lower is better; ⚠ marks head worse than base beyond both "
        f"spreads (the min-max ranges do not overlap) and by at least {args.min_change:.0%}; "
        "nothing is flagged with one run per side (no spread) nor on the (machine) rows, "
        "which measure the disk, not the code",
        "",
        table(base, head, order, args.min_change) if order else "(no results)",
    ]
    failures = [f"{s.label} {f}" for s in (base, head) for f in s.failures]
    if interrupted:
        failures.append("interrupted before the last round finished")
    if failures:
        report += ["", "Problems:", *(f"- {f}" for f in failures)]
    text = "\n".join(report) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {"base": base.path, "head": head.path, "revs": revs, "runs": runs}, f, indent=2
            )
    flagged = any(
        verdict(head.meta.get(n) or base.meta[n], base.values.get(n, []), head.values.get(n, []),
                args.min_change).startswith("⚠")
        for n in order
    )  # fmt: skip
    return 1 if flagged or interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
