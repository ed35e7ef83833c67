"""PNG figures for reports (matplotlib, Agg backend: no display needed).

matplotlib is an optional dependency (the ``isolation`` extra); it is
imported only when a figure is drawn.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from kvstore.isolation.matrix import AbortPoint, Column, Matrix
from kvstore.isolation.scenarios import PREVENTED


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise RuntimeError(
            "plots need matplotlib: pip install 'kvstore-lakehouse[isolation]'"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_abort_rates(points: Sequence[AbortPoint], path: str | os.PathLike[str]) -> None:
    """Abort rate versus concurrency, one line per engine and level."""
    plt = _pyplot()
    cols: list[Column] = []
    for p in points:
        if p.column not in cols:
            cols.append(p.column)
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    engines = list(dict.fromkeys(c.engine for c in cols))
    markers = "osD^v<>"
    for col in cols:
        pts = sorted((p for p in points if p.column == col), key=lambda p: p.concurrency)
        i = engines.index(col.engine)
        ax.plot(
            [p.concurrency for p in pts],
            [100 * p.abort_rate for p in pts],
            "--" if col.level == "snapshot" else "-",
            marker=markers[i % len(markers)],
            markersize=8 - 1.5 * (i % 3),  # coinciding curves stay visible
            alpha=0.85,
            label=col.label,
        )
    ax.set_xscale("log", base=2)
    concs = sorted({p.concurrency for p in points})
    ax.set_xticks(concs)
    ax.set_xticklabels([str(c) for c in concs])
    ax.set_xlabel("concurrent transactions (seeded scheduler)")
    ax.set_ylabel("transactions aborted (%)")
    ax.set_title("Abort rate versus contention (dashed: SNAPSHOT, solid: SERIALIZABLE)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_matrix(matrix: Matrix, path: str | os.PathLike[str]) -> None:
    """The anomaly matrix as a grid: green prevented, red anomaly."""
    plt = _pyplot()
    labels = ["PostgreSQL RR", "PostgreSQL SER", *(c.label for c in matrix.columns)]
    grid: list[list[float]] = []
    for s in matrix.scenarios:
        row = [
            0.0 if s.postgres.get(lv) == PREVENTED else 1.0 for lv in ("snapshot", "serializable")
        ]
        row += [0.0 if matrix.cell(s.name, c).outcome == PREVENTED else 1.0 for c in matrix.columns]
        grid.append(row)
    fig, ax = plt.subplots(
        figsize=(1.0 + 0.75 * len(labels), 1.5 + 0.32 * len(matrix.scenarios)), dpi=120
    )
    ax.imshow(grid, cmap="RdYlGn_r", vmin=-0.3, vmax=1.3, aspect="auto")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=40, ha="right", fontsize=8)
    ax.set_yticks(range(len(matrix.scenarios)))
    ax.set_yticklabels([s.name for s in matrix.scenarios], fontsize=8)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            ax.text(j, i, "✗" if v else "✓", ha="center", va="center", fontsize=8)
    ax.axvline(1.5, color="black", linewidth=1)
    ax.set_title("Anomalies prevented (✓) or shown (✗) per engine and level")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
