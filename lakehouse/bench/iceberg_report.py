"""The iceberg bench's timing (rounds of variants, order rotating), its targets,
profiles and report."""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

LOADS = 20  # loads (and config requests) in a row per timed measurement: the figure is per call
#: the variants timed in each round
SQL, REST, FLOOR = "sqlcatalog", "rest", "http_floor"
ADD, ADD_NOCHECK, FAST_APPEND = "add_files", "add_files_nocheck", "fast_append"
OURS = "write_metadata"
NAMES = {
    SQL: "pyiceberg SqlCatalog",
    REST: "our REST catalog",
    FLOOR: "GET /v1/config (HTTP floor)",
    ADD: "pyiceberg add_files",
    ADD_NOCHECK: "pyiceberg add_files, check_duplicate_files=False",
    FAST_APPEND: "pyiceberg fast append of prebuilt DataFiles",
    OURS: "write_metadata",
}
#: the ratios of each measurement kind: (numerator, denominator), taken per round
RATIOS = {
    "read": ((REST, SQL),),
    "load": ((REST, SQL), (FLOOR, REST)),
    "commit": ((OURS, ADD), (OURS, ADD_NOCHECK), (OURS, FAST_APPEND)),
}
#: the issue's targets: (measurement kind, what, numerator, denominator, bound);
#: every one is numerator / denominator <= bound, on the median of the per-round ratios
TARGETS = (
    ("read", "pyiceberg reads {read} files: our REST catalog / its SqlCatalog", REST, SQL, 1.2),
    ("load", "load_table of {load} files: our REST catalog / its SqlCatalog", REST, SQL, 1.0),
    ("commit", "one version of {n} more files: write_metadata / pyiceberg add_files",
     OURS, ADD, 0.2),
    ("commit", "one version of {n} more files: write_metadata / pyiceberg fast append of "
     "prebuilt DataFiles (its metadata work alone; stricter than the issue)",
     OURS, FAST_APPEND, 0.2),
)  # fmt: skip


def spread(xs: Iterable[float]) -> dict[str, float]:
    v = list(xs)
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


class Rounds:
    """The timed variants of every measurement, round by round (round 0 is the
    warm-up: run, checked, not kept); the variants' order rotates each round."""

    def __init__(self) -> None:
        self.procs: list[Any] = []  # psutil processes whose CPU seconds count
        self.i = 0
        self.times: dict[str, dict[str, list[tuple[float, float]]]] = {}
        self.per: dict[str, int] = {}  # calls per timed run (the figures are per call)

    def watch(self, pid: int | None = None) -> None:
        try:
            import psutil

            self.procs.append(psutil.Process(pid))
        except Exception:  # no psutil, or the process is gone: wall time only
            pass

    def _cpu(self) -> float:
        return sum(sum(p.cpu_times()[:2]) for p in self.procs)

    def run(self, key: str, variants: dict[str, Callable[[], Any]], per: int = 1) -> dict[str, Any]:
        """Time each variant once (in this round's order); their results by name."""
        names = list(variants)
        k = self.i % len(names)
        got: dict[str, Any] = {}
        self.per[key] = per
        for name in names[k:] + names[:k]:
            c, t = self._cpu(), time.perf_counter()
            got[name] = variants[name]()
            wall, cpu = time.perf_counter() - t, self._cpu() - c
            if self.i > 0:
                self.times.setdefault(key, {}).setdefault(name, []).append((wall, cpu))
        return got

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, by in self.times.items():
            per = self.per[key]
            variants = {}
            for name, ts in by.items():
                v: dict[str, Any] = {"wall_s": spread(w / per for w, _ in ts)}
                cpu = statistics.median(c / per for _, c in ts)
                if self.procs:
                    v["cpu_s"] = cpu
                variants[name] = v
            ratios = {}
            for num, den in RATIOS[key.split("_")[0]]:
                if num in by and den in by:
                    ratios[f"{num}/{den}"] = spread(
                        a[0] / b[0] for a, b in zip(by[num], by[den], strict=True)
                    )
            out[key] = {"variants": variants, "ratios": ratios}
        return out


def profile(fn: Callable[[], Any], top: int = 12) -> list[str]:
    """The ``top`` costliest functions of one call of ``fn`` (by own time), as lines."""
    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    total = st.total_tt  # type: ignore[attr-defined]
    rows_ = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    lines = [f"total {total * 1e3:,.1f} ms"]
    for (file, line, func), (_cc, nc, tt, ct, _callers) in rows_:
        where = file.split("site-packages/")[-1].split("/work/main/")[-1]
        lines.append(f"{tt * 1e3:8.1f} ms own, {ct * 1e3:8.1f} ms cum, {nc:>7} calls  "
                     f"{func} ({where}:{line})")  # fmt: skip
    return lines


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    sz, ms = res["sizes"], res.get("measurements", {})
    out = []
    for kind, what, num, den, bound in TARGETS:
        keys = [f"commit_{n}" for n in sz["append_files"]] if kind == "commit" else [kind]
        for key in keys:
            s = ms.get(key, {}).get("ratios", {}).get(f"{num}/{den}")
            v = None if s is None else s["median"]
            n = key.split("_")[-1]
            out.append({
                "key": key if kind != "commit" else f"{key}_{den}", "value": v, "spread": s,
                "target": f"<= {bound:g}x",
                "what": what.format(read=f"{sz['read_files']:,}", load=f"{sz['load_files']:,}",
                                    n=f"{int(n):,}" if n.isdigit() else n),
                "pass": None if v is None else v <= bound,
            })  # fmt: skip
    return out


def _ms(s: float | None) -> str:
    if s is None:
        return "n/a"
    v = s * 1e3
    return f"{v:,.2f}" if v < 10 else f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def _side(v: dict[str, Any] | None) -> str:
    """min / median ms of a variant."""
    if v is None:
        return "n/a"
    w = v["wall_s"]
    return f"{_ms(w['min'])} / {_ms(w['median'])}"


def _x(s: dict[str, float] | None) -> tuple[str, str]:
    """(median, min-max) of a ratio."""
    if s is None:
        return "n/a", "n/a"
    return f"{s['median']:.3g}x", f"{s['min']:.3g}-{s['max']:.3g}"


def report(res: dict[str, Any]) -> str:
    sz, ms = res["sizes"], res.get("measurements", {})
    server = {
        "process": "`python -m lakehouse serve-iceberg` in its own process",
        "thread": "lakehouse.iceberg.Server in a thread of the bench",
    }[res["server"]]
    lines = [
        f"iceberg: pyiceberg {res['pyiceberg']} against itself; our server: {server}; "
        f"{sz['repeats']} rounds after a warm-up, order rotating; ms min / median; ratios "
        f"taken per round: median (spread = min-max); CPU: this process + the server; "
        f"{sz['rows_per_file']} rows per file",
        "",
        "| measurement | anchor (pyiceberg) | ms min / median | ours | ms min / median "
        "| ours / anchor | spread | CPU ratio | target |",
        "|:---|:---|---:|:---|---:|---:|:---|---:|:---|",
    ]
    bound = {(k, num, den): b for k, _, num, den, b in TARGETS}
    labels = {
        "read": f"read {sz['read_files']:,} files (load + scan)",
        "load": f"load_table, {sz['load_files']:,} files (per load, {LOADS} in a row, warm)",
    }
    for key, m in ms.items():
        kind = key.split("_")[0]
        label = labels.get(key) or f"commit {int(key.split('_')[1]):,} more files"
        for num, den in RATIOS[kind]:
            if num == FLOOR:
                continue
            v = m["variants"]
            a, b = v.get(den), v.get(num)
            r, rr = _x(m["ratios"].get(f"{num}/{den}"))
            cpu = "n/a"
            if a and b and "cpu_s" in a and a["cpu_s"] > 0:
                cpu = f"{b['cpu_s'] / a['cpu_s']:.3g}x"
            t = bound.get((kind, num, den))
            tgt = "-" if t is None else f"≤ {t:g}x"
            lines.append(f"| {label} | {NAMES[den].removeprefix('pyiceberg ')} | {_side(a)} "
                         f"| {NAMES[num]} | {_side(b)} | {r} | {rr} | {cpu} | {tgt} |")  # fmt: skip
    load = ms.get("load", {})
    floor, share = (
        load.get("variants", {}).get(FLOOR),
        load.get("ratios", {}).get(f"{FLOOR}/{REST}"),
    )
    if floor is not None and share is not None:
        lines.append(
            f"\nHTTP round-trip floor: GET /v1/config, {LOADS} in a row, {_side(floor)} ms per "
            f"request = {share['median']:.0%} of our load_table (per round "
            f"{share['min']:.0%}-{share['max']:.0%}): what any REST load pays for the protocol"
        )
    lines.append(
        "\ncommit: ours = write_metadata of the new version (the lakehouse append untimed); "
        "pyiceberg add_files = Table.add_files(paths) (duplicate check: a scan of the table's "
        "manifests; footers read; fast append), also without the duplicate check; fast "
        "append = DataFile objects built beforehand from the footers (untimed)"
    )
    lines.append("\ntargets (issue 24; ratio per round, median (min-max)):")
    for t in res["targets"]:
        v = "n/a" if t["spread"] is None else "{} ({})".format(*_x(t["spread"]))
        verdict = {True: "pass", False: "FAIL", None: "not measured"}[t["pass"]]
        lines.append(f"- {t['what']}: {v} (target {t['target']}): {verdict}")
    if res.get("missing"):
        lines.append(f"\n{res['missing']}")
    b = res.get("build_s", {})
    if b:
        parts = [f"{k} table: ours {v['ours']:,.1f} s, pyiceberg {v['pyiceberg']:,.1f} s"
                 for k, v in b.items() if isinstance(v, dict)]  # fmt: skip
        if "write_metadata_first_s" in b:
            parts.append(f"first write_metadata of both {b['write_metadata_first_s']:,.1f} s")
        lines.append("\nbuilt (untimed above): " + "; ".join(parts))
    for what, prof in res.get("profile", {}).items():
        lines.append(f"\nprofile of one {what}:")
        lines += ["    " + x for x in prof]
    la = res.get("loadavg", {})
    took = f"\niceberg bench took {res['elapsed_s']:,.0f} s"
    if "end" in la:
        took += "; load average (1, 5, 15 min) at the start {}, at the end {}".format(
            *(", ".join(f"{x:.2f}" for x in la[k]) for k in ("start", "end"))
        )
    lines.append(took)
    return "\n".join(lines) + "\n"
