"""Smoke tests of ``python -m lakehouse.bench --only iceberg`` at toy sizes (no timings
asserted): it runs, reports, stops its catalog server process on every way out, and
its cross-checks fail when a side is wrong."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyiceberg")

from lakehouse import bench
from lakehouse.bench import iceberg as ib
from lakehouse.bench import iceberg_report as ir

try:
    from lakehouse.iceberg import Server, write_metadata  # noqa: F401

    OURS = True
except ImportError:  # the catalog is not there: pyiceberg's side only
    OURS = False

needs_ours = pytest.mark.skipif(not OURS, reason="lakehouse.iceberg is not there yet")

TINY = ["--iceberg-read-files", "6", "--iceberg-load-files", "8", "--iceberg-load-commits",
        "2", "--iceberg-append-files", "2,3", "--iceberg-rows-per-file", "2"]  # fmt: skip
THREAD = ["--iceberg-server", "thread"]  # faster: the checks, not the process, are tested


def _run(tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "res.json"
    code = bench.main(["--only", "iceberg", "--root", str(tmp_path / "b"), *TINY, "--repeats",
                       "2", *extra, "--json", str(out)])  # fmt: skip
    return code, json.loads(out.read_text())["iceberg"]


def _gone(pid: int) -> bool:
    """No process ``pid`` runs our catalog server (waited for: not even a zombie)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"serve-iceberg" not in f.read()
    except FileNotFoundError:
        return True


def test_iceberg_bench_runs_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, res = _run(tmp_path, "--iceberg-profile")
    assert code == 0
    text = capsys.readouterr().out
    assert res["sizes"] == {"read_files": 6, "load_files": 8, "load_commits": 2,
                            "append_files": [2, 3], "rows_per_file": 2, "repeats": 2}  # fmt: skip
    assert res["server"] == "process"
    assert [len(res["loadavg"][k]) for k in ("start", "end")] == [3, 3]
    assert "load average (1, 5, 15 min) at the start" in text
    # three rounds of two appends each after the 8 built files
    assert res["load_files_at_end"] == 8 + 3 * (2 + 3)
    ms = res["measurements"]
    assert set(ms) == {"read", "load", "commit_2", "commit_3"}
    commit = {"add_files", "add_files_nocheck", "fast_append", "write_metadata"}
    want = {"read": {"sqlcatalog", "rest"}, "load": {"sqlcatalog", "rest", "http_floor"},
            "commit_2": commit, "commit_3": commit}  # fmt: skip
    if not OURS:
        want = {k: v - {"rest", "http_floor", "write_metadata"} for k, v in want.items()}
    for key, m in ms.items():
        assert set(m["variants"]) == want[key], key
        for name, v in m["variants"].items():
            w = v["wall_s"]
            assert 0 < w["min"] <= w["median"] <= w["max"], (key, name)
            if name in {"sqlcatalog", "add_files"}:
                assert f"| {ir._ms(w['min'])} / {ir._ms(w['median'])} |" in text
        for r in m["ratios"].values():
            assert 0 < r["min"] <= r["median"] <= r["max"]
    got = {t["key"]: t for t in res["targets"]}
    assert list(got) == ["read", "load", "commit_2_add_files", "commit_3_add_files",
                         "commit_2_fast_append", "commit_3_fast_append"]  # fmt: skip
    assert "| commit 3 more files | add_files |" in text
    assert "| commit 3 more files | add_files, check_duplicate_files=False |" in text
    assert "| commit 3 more files | fast append of prebuilt DataFiles |" in text
    assert "| read 6 files (load + scan) | SqlCatalog |" in text
    if not OURS:
        assert all(t["value"] is None and t["pass"] is None for t in got.values())
        assert "lakehouse.iceberg is not available" in res["missing"]
        return
    for t in got.values():
        assert t["value"] == t["spread"]["median"]
        assert t["pass"] == (t["value"] <= float(t["target"].split()[1].rstrip("x")))
        assert f"{t['value']:.3g}x ({t['spread']['min']:.3g}-{t['spread']['max']:.3g})" in text
    assert (
        got["commit_3_add_files"]["spread"] == ms["commit_3"]["ratios"]["write_metadata/add_files"]
    )
    floor = ms["load"]["ratios"]["http_floor/rest"]
    assert f"= {floor['median']:.0%} of our load_table" in text
    assert res["missing"] is None
    assert any(k.startswith("write_metadata") for k in res["profile"])
    assert "profile of one write_metadata (3 more files):" in text
    assert _gone(res["server_pid"])
    assert not os.path.exists(tmp_path / "b" / "iceberg")


def test_ratios_are_taken_per_round() -> None:
    r = ib.Rounds()
    r.times = {"commit_5": {"add_files": [(1.0, 0), (1.0, 0), (10.0, 0)],
                            "fast_append": [(1.0, 0)] * 3,
                            "write_metadata": [(2.0, 0), (3.0, 0), (10.0, 0)]}}  # fmt: skip
    r.per = {"commit_5": 1}
    s = r.summary()["commit_5"]
    assert s["variants"]["write_metadata"]["wall_s"] == {"median": 3.0, "min": 2.0, "max": 10.0}
    # per round 2, 3, 1: median 2 (the ratio of the medians would be 3)
    assert s["ratios"]["write_metadata/add_files"] == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert s["ratios"]["write_metadata/fast_append"]["median"] == 3.0
    assert "cpu_s" not in s["variants"]["add_files"]  # no process watched: no CPU figure


@needs_ours
def test_a_failed_check_stops_the_server_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write_metadata answering with the metadata of an older version is caught, and
    the server process is stopped by SIGTERM (it exits cleanly) on the way out."""
    real, started = ib.Ours.write_metadata, []
    first: dict[str, str] = {}
    real_init = ib.ServerProcess.__init__

    def stale(self: ib.Ours, name: str) -> str:
        return first.setdefault(name, real(self, name))

    def init(self: ib.ServerProcess, *a: Any, **k: Any) -> None:
        real_init(self, *a, **k)
        started.append(self)

    monkeypatch.setattr(ib.Ours, "write_metadata", stale)
    monkeypatch.setattr(ib.ServerProcess, "__init__", init)
    with pytest.raises(AssertionError, match="write_metadata of 2 more"):
        _run(tmp_path)
    (server,) = started
    assert server.proc.returncode == 0  # serve-iceberg returns 0 after SIGTERM
    assert _gone(server.proc.pid)
    assert not os.path.exists(tmp_path / "b")


def test_sigterm_during_the_run_exits_through_the_finally_blocks() -> None:
    """SIGTERM to the bench raises SystemExit (so the server is stopped as on any error,
    see above) while it runs, and the handler before is back afterwards."""
    before = signal.getsignal(signal.SIGTERM)
    unwound = []
    with pytest.raises(SystemExit) as exc, ib._sigterm_exits():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
        finally:
            unwound.append(True)
    assert exc.value.code == 128 + signal.SIGTERM and unwound == [True]
    assert signal.getsignal(signal.SIGTERM) is before


@needs_ours
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_server_process_stops_when_the_bench_is_killed(tmp_path: Path) -> None:
    """SIGKILL to the bench (no way to clean up): the server still gets SIGTERM from
    the kernel when the bench dies."""
    sig = signal.SIGKILL
    root = tmp_path / "b"
    cmd = [sys.executable, "-m", "lakehouse.bench", "-v", "--only", "iceberg", "--root",
           str(root), *TINY, "--repeats", "1000"]  # fmt: skip
    bench_ = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert bench_.stderr is not None
        for line in bench_.stderr:  # the bench logs the server's pid once it answers
            if "iceberg catalog server: pid" in line:
                pid = int(line.split("pid ")[1].split(",")[0])
                break
        else:
            pytest.fail(f"the bench ended ({bench_.wait()}) without starting its server")
        assert not _gone(pid)
        bench_.send_signal(sig)
        assert bench_.wait(60) == -sig
        deadline = time.monotonic() + 30
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pid)  # (the kernel's reaper, not us, waits for it)
    finally:
        if bench_.poll() is None:
            bench_.kill()
            bench_.wait()


@pytest.mark.parametrize("side", ["add_files", "fast_append"])
def test_a_pyiceberg_side_missing_a_file_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, side: str
) -> None:
    real_add, real_files = ib.PyIceberg.add_files, ib.PyIceberg.data_files

    def add_one_short(self: ib.PyIceberg, name: str, paths: list[str], *a: Any) -> Any:
        return real_add(self, name, paths[:-1] if len(paths) == 3 else paths, *a)

    def one_short(self: ib.PyIceberg, name: str, paths: list[str]) -> list[Any]:
        files = real_files(self, name, paths)
        return files[:-1] if name == ib.FAST and len(files) == 3 else files

    if side == "add_files":
        monkeypatch.setattr(ib.PyIceberg, "add_files", add_one_short)
    else:
        monkeypatch.setattr(ib.PyIceberg, "data_files", one_short)
    what = {"add_files": "add_files", "fast_append": "fast append"}[side]
    with pytest.raises(AssertionError, match=f"pyiceberg {what} of 3: added, total files"):
        _run(tmp_path, *THREAD)


def test_wrong_rows_fail() -> None:
    want = ib.rows(0, 3, 2)
    ib.same_rows("same", want.select(["name", "id", "amount", "p"]), want)  # order aside
    with pytest.raises(AssertionError, match="x: rows"):
        ib.same_rows("x", want.slice(1), want)
    other = ib.rows(1, 3, 2)
    with pytest.raises(AssertionError, match="x: column id"):
        ib.same_rows("x", other, want)


@needs_ours
def test_a_rest_read_missing_rows_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row deleted behind the bench's back (after its own check of ``lh.read``):
    the rows pyiceberg reads through our catalog no longer match pyiceberg's."""
    real = ib.Ours.serve

    def serve_then_delete(self: ib.Ours, *a: Any, **k: Any) -> None:
        with self.lh.begin() as txn:
            txn.delete(ib.READ, "id = 0")
        real(self, *a, **k)

    monkeypatch.setattr(ib.Ours, "serve", serve_then_delete)
    with pytest.raises(AssertionError, match=r"pyiceberg read \(our REST catalog\): rows"):
        _run(tmp_path, *THREAD)


@needs_ours
def test_a_rest_load_of_a_stale_table_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our catalog answering a load with an older snapshot is caught."""
    real = ib.Ours.serve

    def serve_stale(self: ib.Ours, *a: Any, **k: Any) -> None:
        real(self, *a, **k)
        cat, location = self.catalog, dict[str, Any]()

        class Stale:
            def load_table(self, name: str) -> Any:
                t = cat.load_table(name)
                if name == ib.LOAD:
                    return location.setdefault(name, t)
                return t

        self.catalog = Stale()

    monkeypatch.setattr(ib.Ours, "serve", serve_stale)
    with pytest.raises(AssertionError, match="REST load: metadata location"):
        _run(tmp_path, *THREAD)


def test_without_the_catalog_pyiceberg_side_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "lakehouse.iceberg", None)  # import fails
    code, res = _run(tmp_path)
    assert code == 0
    assert "lakehouse.iceberg is not available" in res["missing"]
    for m in res["measurements"].values():
        assert not {"rest", "http_floor", "write_metadata"} & set(m["variants"])
        assert m["ratios"] == {}
    assert [t["pass"] for t in res["targets"]] == [None] * 6
