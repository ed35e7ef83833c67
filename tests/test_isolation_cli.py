"""``python -m kvstore.isolation``: run, check, matrix, detect, bench, levels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvstore.isolation.__main__ import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_run_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "h.jsonl"
    code, out = run_cli(
        capsys,
        "run",
        "--engine",
        "kvstore",
        "--level",
        "serializable",
        "--txns",
        "200",
        "--concurrency",
        "4",
        "--seed",
        "3",
        "--out",
        str(path),
    )
    assert code == 0, out
    assert "VALID at serializable" in out and path.exists()
    assert len(path.read_text().splitlines()) == 2 * 201
    code, out = run_cli(capsys, "check", str(path), "--level", "serializable", "--realtime")
    assert code == 0 and "strongest level satisfied: strict-serializable" in out
    code, out = run_cli(capsys, "check", str(path), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["valid"] and doc["txns"] == 201 and doc["model"] == "list-append"


def test_check_judges_a_snapshot_history_per_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "si.jsonl"
    code, out = run_cli(capsys, "run", "--level", "snapshot", "--seed", "1", "--out", str(path))
    assert code == 0  # SNAPSHOT allows write skew
    assert "G2-item" in out
    code, out = run_cli(capsys, "check", str(path), "--level", "serializable", "--show", "1")
    assert code == 1
    assert "INVALID at serializable" in out and "-rw->" in out and "more (--show N)" in out
    code, _ = run_cli(capsys, "check", str(path), "--level", "repeatable-read")
    assert code == 0


def test_run_catches_and_shrinks_a_broken_engine(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli(capsys, "run", "--engine", "broken-fake-ser", "--shrink")
    assert code == 1
    assert "shrunk to" in out and "INVALID at serializable" in out
    assert "write skew" in out or "phantom" in out


def test_run_threaded_and_register(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli(capsys, "run", "--threaded", "--txns", "100", "--model", "rw-register")
    assert code == 0 and "threaded" in out and "model rw-register" in out


def test_matrix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot, grid = tmp_path / "abort.png", tmp_path / "matrix.png"
    code, out = run_cli(
        capsys,
        "matrix",
        "--engines",
        "kvstore,sqlite3",
        "--markdown",
        "--abort-txns",
        "60",
        "--seeds",
        "1",
        "--concurrency",
        "1,4",
        "--plot",
        str(plot),
        "--matrix-plot",
        str(grid),
    )
    assert code == 0, out
    assert "| G2-item | Hermitage | anomaly | prevented | anomaly (G2-item) | prevented |" in out
    assert "kvstore matches PostgreSQL" in out
    assert "| concurrency | kvstore SI | kvstore SER | sqlite3 SER |" in out
    assert plot.stat().st_size > 0 and grid.stat().st_size > 0


def test_detect(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli(
        capsys,
        "detect",
        "--engines",
        "broken-fake-ser,kvstore",
        "--seeds",
        "3",
        "--level",
        "serializable",
    )
    assert code == 0, out
    assert "broken-fake-ser" in out and "3/3" in out and "0/3" in out


def test_bench(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli(capsys, "bench", "--txns", "2000", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["txns"] == 2001 and doc["anomalies"] == {}
    seconds = doc["load_seconds"] + doc["check_seconds"]
    assert seconds > 0 and doc["txns_per_second"] == pytest.approx(doc["txns"] / seconds)


def test_levels_and_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli(capsys, "levels", "--markdown")
    assert code == 0 and "| G2-item |  |  |  | forbidden | forbidden |" in out
    assert main(["check", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["run", "--engine", "nope"]) == 2
    assert main(["run", "--engine", "sqlite3", "--level", "snapshot"]) == 2
    assert "unknown engine" in capsys.readouterr().err


def test_module_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kvstore.isolation", "levels"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0 and "strict-serializable" in proc.stdout


def test_strict_serializable_is_claimed_only_when_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 13, item 9: without real-time edges, and for an empty history, the
    checker does not claim strict serializability (or anything at all)."""
    path = tmp_path / "h.jsonl"
    code, _ = run_cli(
        capsys, "run", "--engine", "kvstore", "--level", "serializable", "--txns", "50",
        "--seed", "1", "--out", str(path),
    )  # fmt: skip
    assert code == 0
    code, out = run_cli(capsys, "check", str(path))
    assert code == 0
    assert "strongest level satisfied: serializable (strict-serializable not checked" in out
    code, out = run_cli(capsys, "check", str(path), "--level", "strict-serializable")
    assert code == 1 and "NOT CHECKED at strict-serializable" in out
    code, out = run_cli(capsys, "check", str(path), "--level", "strict", "--realtime")
    assert code == 0 and "VALID at strict-serializable" in out
    code, out = run_cli(capsys, "check", str(path), "--json", "--level", "strict")
    doc = json.loads(out)
    assert doc["strongest_level"] == "serializable" and doc["valid"] is False
    assert "real-time" in doc["unchecked"]

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, out = run_cli(capsys, "check", str(empty), "--level", "serializable")
    assert code == 1
    assert "strongest level satisfied: none (the history is empty" in out
    assert "NOT CHECKED at serializable" in out
    code, out = run_cli(capsys, "check", str(empty), "--json", "--realtime")
    assert json.loads(out)["strongest_level"] is None
