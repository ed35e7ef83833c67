"""The table-data results (:mod:`lakehouse.bench.data`) summarised and as Markdown.

Every figure is ``{"median", "min", "max"}`` over the rounds; a ratio is
taken within each round first (both systems measured side by side), then
summarised the same way, so the spread of a ratio is not inflated by the
machine's load changing between rounds.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

NOFSYNC = "ours, fsync off"


def summary(xs: Iterable[float]) -> dict[str, float]:
    v = list(xs)
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def summarise(rounds: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    anchors = [n for n in names if n != "ours"]
    s: dict[str, Any] = {"append_per_s": {}, "read_s": {}, "delete_s": {}, "ratios": {}}
    for n in rounds[0]["append_per_s"]:
        s["append_per_s"][n] = summary(r["append_per_s"][n] for r in rounds)
    for k in ("latest", "first", "first_small"):
        s["read_s"][k] = {n: summary(r["read_s"][k][n] for r in rounds) for n in names}
    s["delete_s"] = {n: summary(r["delete_s"][n] for r in rounds) for n in names}
    s["time_travel_ratio"] = {
        n: summary(r["read_s"]["first"][n] / r["read_s"]["first_small"][n] for r in rounds)
        for n in names
    }
    s["concurrent_committed"] = {
        n: summary(r["concurrent"][n]["committed"] for r in rounds) for n in names
    }
    s["concurrent_per_s"] = {n: summary(r["concurrent"][n]["per_s"] for r in rounds) for n in names}
    if "verify_ratio" in rounds[0]:
        s["verify_ratio"] = {
            way: summary(r["verify_ratio"][way] for r in rounds)
            for way in rounds[0]["verify_ratio"]
        }
    if "ours" in names:
        for a in anchors:
            s["ratios"][a] = {
                "append": summary(r["append_per_s"]["ours"] / r["append_per_s"][a] for r in rounds),
                "read_latest": summary(
                    r["read_s"]["latest"][a] / r["read_s"]["latest"]["ours"] for r in rounds
                ),
                "read_first": summary(
                    r["read_s"]["first"][a] / r["read_s"]["first"]["ours"] for r in rounds
                ),
                "delete": summary(r["delete_s"][a] / r["delete_s"]["ours"] for r in rounds),
            }
            if NOFSYNC in rounds[0]["append_per_s"]:
                s["ratios"][a]["append_nofsync"] = summary(
                    r["append_per_s"][NOFSYNC] / r["append_per_s"][a] for r in rounds
                )
    s["targets"] = targets(rounds, names)
    return s


#: issue 22's targets for this workload: (key, what, numerator, denominator, bound, op);
#: numerator and denominator are (measurement, system), the ratio is taken per round
TARGETS = (
    ("append_vs_lance", "appends: ours commits/s / pylance commits/s",
     ("append_per_s", "ours"), ("append_per_s", "pylance"), 3.0, ">="),
    ("read_latest_vs_lance", "read latest after the appends: ours time / pylance time",
     ("latest", "ours"), ("latest", "pylance"), 0.5, "<="),
    ("delete_vs_lance", "delete 1%: ours time / pylance time",
     ("delete_s", "ours"), ("delete_s", "pylance"), 0.5, "<="),
    ("delete_vs_deltalake", "delete 1%: ours time / deltalake time",
     ("delete_s", "ours"), ("delete_s", "deltalake"), 1.0, "<="),
)  # fmt: skip


def _figure(r: dict[str, Any], what: tuple[str, str]) -> float:
    kind, name = what
    return float(r["read_s"][kind][name] if kind == "latest" else r[kind][name])


def targets(rounds: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """Issue 22's ratios in its direction (ours over the anchor), each summarised over
    the rounds, with pass/fail on the median (None: a system was not measured)."""
    out = []
    for key, what, num, den, bound, op in TARGETS:
        ok = num[1] in names and den[1] in names
        spread = summary(_figure(r, num) / _figure(r, den) for r in rounds) if ok else None
        v = None if spread is None else spread["median"]
        passed = None if v is None else (v <= bound if op == "<=" else v >= bound)
        out.append({"key": key, "what": what, "value": v, "spread": spread,
                    "target": f"{op} {bound:g}x", "pass": passed})  # fmt: skip
    return out


# ---------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------
def _v(x: dict[str, float], scale: float = 1.0, fmt: str = ",.0f") -> str:
    m, lo, hi = (x[k] * scale for k in ("median", "min", "max"))
    if f"{lo:{fmt}}" == f"{hi:{fmt}}":
        return f"{m:{fmt}}"
    return f"{m:{fmt}} ({lo:{fmt}}-{hi:{fmt}})"


def _x(x: dict[str, float]) -> str:
    return _v(x, fmt=".2f") + "x"


def report(res: dict[str, Any]) -> str:
    sz, names, s = res["sizes"], res["systems"], res["summary"]
    anchors = [n for n in names if n != "ours"]
    total = (sz["appends"] + 1) * sz["rows"]
    head = ["| workload |", *(f" {n} |" for n in names)]
    head += [f" ours vs {a} |" for a in anchors if "ours" in names]
    cols = len(head) - 1
    lines = [
        f"table data, local disk, {sz['appends']} appends of {sz['rows']:,} rows; median of "
        f"{sz['rounds']} round(s) (min-max); ratios per round, >1x means ours is faster",
        "",
        "".join(head),
        "|---|" + "---:|" * cols,
    ]

    def row(label: str, per: dict[str, str], ratio: dict[str, str] | None = None) -> None:
        cells = [per.get(n, "") for n in names]
        if "ours" in names:
            cells += [(ratio or {}).get(a, "") for a in anchors]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    ratios = s["ratios"]
    ap = s["append_per_s"]
    row(
        "appends, commits/s (ours durable, anchors without fsync)",
        {n: _v(ap[n]) for n in names},
        {a: _x(ratios[a]["append"]) for a in ratios},
    )
    if NOFSYNC in ap:
        row("appends, commits/s, ours with fsync off", {"ours": _v(ap[NOFSYNC])},
            {a: _x(ratios[a]["append_nofsync"]) for a in ratios})  # fmt: skip
    rd = s["read_s"]
    row(f"read latest ({total:,} rows), ms", {n: _v(rd["latest"][n], 1e3, ",.1f") for n in names},
        {a: _x(ratios[a]["read_latest"]) for a in ratios})  # fmt: skip
    row(f"read version 1 after {sz['appends'] + 1} versions, ms",
        {n: _v(rd["first"][n], 1e3, ",.1f") for n in names},
        {a: _x(ratios[a]["read_first"]) for a in ratios})  # fmt: skip
    row("read version 1 of a table with 2 versions, ms",
        {n: _v(rd["first_small"][n], 1e3, ",.1f") for n in names})  # fmt: skip
    for way, ratio in s.get("verify_ratio", {}).items():
        row(f"{way} with / without integrity checks (page, footer and file checksums)",
            {"ours": _x(ratio)})  # fmt: skip
    row(f"time travel: {sz['appends'] + 1} versions / 2 versions (target ≤ 1.5x)",
        {n: _x(s["time_travel_ratio"][n]) for n in names})  # fmt: skip
    row(f"delete 1% ({total // 100:,} rows, one commit), ms",
        {n: _v(s["delete_s"][n], 1e3, ",.1f") for n in names},
        {a: _x(ratios[a]["delete"]) for a in ratios})  # fmt: skip
    last = res["rounds"][-1]
    row(f"delete: data files written / live files replaced (last round, {sz['deletes']} deletes)",
        {n: "{new_data_files} / {live_files_replaced}".format(**last["delete_files"][n])
         for n in names})  # fmt: skip
    n_conc = sz["threads"] * sz["per_thread"]
    row(f"{sz['threads']} threads x {sz['per_thread']} appends: committed of {n_conc}",
        {n: _v(s["concurrent_committed"][n]) for n in names})  # fmt: skip
    row("concurrent appends, commits/s", {n: _v(s["concurrent_per_s"][n]) for n in names})
    for r_i, r in enumerate(res["rounds"]):
        for n, c in r["concurrent"].items():
            if c["errors"] or not c["rows_match"]:
                lines.append(
                    f"\nround {r_i + 1}, {n}: {c['errors']} rows match commits: {c['rows_match']}"
                    + "".join(f"\n  {k}: {v}" for k, v in c["error_examples"].items())
                )
    if "targets" in s:
        lines.append("\ntargets (issue 22; ratios per round, median (min-max)):")
        for t in s["targets"]:
            v = "n/a" if t["spread"] is None else _v(t["spread"], fmt=".3g") + "x"
            verdict = {True: "pass", False: "FAIL", None: "not measured"}[t["pass"]]
            lines.append(f"- {t['what']}: {v} (target {t['target']}): {verdict}")
    for n, why in res["missing"].items():
        lines.append(f"\n{n}: {why}")
    return "\n".join(lines) + "\n"
