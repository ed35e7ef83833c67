"""lakehouse.spark on a Spark standalone cluster (``spark://127.0.0.1:<port>``).

The test starts a master and one worker (2 cores, 1 GiB) from the pyspark
package's own ``bin/spark-class`` on loopback, with their directories under
the test's temporary directory, and runs a driver script in a subprocess
(its own JVM, not the shared test session) against them:

* ``lhs.write`` then ``lhs.read`` on a local-directory lakehouse (the worker's
  executor sees the same path: one machine) and on S3 (the moto server of
  tests/conftest.py; table data moves through Python tasks with s3fs);
* a write during which the executor JVM (``CoarseGrainedExecutorBackend``) is
  killed with SIGKILL once the write's tasks are running: the worker launches
  a new executor, Spark runs the lost tasks again (``spark.task.maxFailures``
  is 4 on a cluster: no setting needed), and the table gets exactly the rows,
  in exactly one new version, with exactly the files it references in storage.

The master and worker (and the executors they started) are stopped whatever
happens.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
psutil = pytest.importorskip("psutil")

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.s3]

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
SMALL = 300  # rows of the plain writes
KILLED = 2000  # rows of the writes whose executor is killed

DRIVER = r'''
import json, os, signal, sys, threading, time
import psutil
import pyarrow as pa
from pyspark.sql import SparkSession, functions as F
import lakehouse
import lakehouse.spark as lhs

master, root, endpoint, s3_url, out_path, small, killed = sys.argv[1:8]
small, killed = int(small), int(killed)
spark = (
    SparkSession.builder.master(master)
    .appName("lakehouse-standalone-test")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.executor.memory", "768m")
    .config("spark.sql.shuffle.partitions", "4")
    .getOrCreate()
)
sc = spark.sparkContext
out = {"app": sc.applicationId}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])


def frame(lo, hi, slow_ms=0):
    df = spark.range(lo, hi, numPartitions=2)
    name = F.concat(F.lit("n"), F.col("id").cast("string"))
    if slow_ms:  # each row sleeps in the JVM: the tasks run long enough to be killed
        # (inside the value written, so the optimizer cannot drop the call)
        sleep = f"reflect('java.lang.Thread', 'sleep', cast({slow_ms} as bigint))"
        name = F.concat(name, F.expr(f"substr(coalesce({sleep}, ''), 1, 0)"))
    return df.select("id", name.alias("name"))


def rows(lh, table):
    got = lhs.read(lh, spark, table).toArrow().to_pylist()
    return sorted([r["id"], r["name"]] for r in got)


def executors():
    """Pids of this application's executor JVMs."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "CoarseGrainedExecutorBackend" in cmd and out["app"] in cmd:
            found.append(p.info["pid"])
    return found


def kill_when_running(record):
    """SIGKILL the executors once a job has been running for a second (its tasks
    sleep in every row, so they are mid-write then). The tracker's stage list, not
    its task counts: those lag behind the tasks."""
    tracker = sc.statusTracker()
    since = None
    while not record.get("done"):
        if not tracker.getActiveStageIds():
            since = None
        elif since is None:
            since = time.monotonic()
        elif time.monotonic() - since > 1.0:
            pids = executors()
            if pids:  # else not listed yet (a loaded machine): look again
                record["killed"] = pids
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                return
        time.sleep(0.05)


def killed_write(lh, table):
    before = lh.version
    record = {}
    t = threading.Thread(target=kill_when_running, args=(record,), daemon=True)
    t.start()
    try:
        v = lhs.write(lh, frame(0, killed, slow_ms=5), table)
    finally:
        record["done"] = True
    t.join(timeout=30)
    return {
        "killed": record.get("killed"),
        "before": before,
        "version": v,
        "latest": lh.version,
        "new_versions": sorted(h.version for h in lh.history() if h.version > before),
        "rows": rows(lh, table),
        "executors_after": executors(),
    }


def registered(lh):
    return sorted(f.path for t in ("ns.t", "ns.k") for f in lh.list_data_files(t))


local = lakehouse.open(os.path.join(root, "lh"), kv_options={"fsync": False})
s3 = lakehouse.open(
    s3_url, storage_options={"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
)
for h in (local, s3):
    with h.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table("ns.t", SCHEMA, {"inline.max_rows": "0"})  # files: the point
        txn.create_table("ns.k", SCHEMA, {"inline.max_rows": "0"})
out["local_data"] = local.data_location()[0]
out["local_write"] = lhs.write(local, frame(0, small), "ns.t")
out["local_rows"] = rows(local, "ns.t")
out["s3_write"] = lhs.write(s3, frame(0, small), "ns.t")
out["s3_rows"] = rows(s3, "ns.t")
out["executors_before"] = executors()
out["local_killed"] = killed_write(local, "ns.k")
out["s3_killed"] = killed_write(s3, "ns.k")
out["local_registered"] = registered(local)
out["s3_registered"] = registered(s3)
with open(out_path, "w") as f:
    json.dump(out, f)
spark.stop()
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOCAL_DIRS=str(tmp / "local"),
        SPARK_LOG_DIR=str(tmp / "logs"),
    )
    return env


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop the daemons this module started and every process below them."""
    for proc in reversed(procs):
        try:
            below = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            below = []
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        for child in below:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass


def _state(ui_port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
            state: dict[str, Any] = json.load(r)
            return state
    except OSError:
        return None


def _wait(what: str, ready: Any, procs: list[subprocess.Popen[bytes]], log: Path) -> None:
    """Poll ``ready()`` until it holds; fail early when a daemon exited."""
    deadline = time.monotonic() + 180
    while not ready():
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"{what}: a daemon exited ({p.returncode}): {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not ready: {log.read_text()[-3000:]}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:<port>`` of a master with one alive worker."""
    tmp = tmp_path_factory.mktemp("standalone")
    for d in ("local", "logs", "work"):
        (tmp / d).mkdir()
    env = _env(tmp)
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    master_log, worker_log = tmp / "logs" / "master.log", tmp / "logs" / "worker.log"
    try:
        with master_log.open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        str(SPARK_CLASS),
                        "org.apache.spark.deploy.master.Master",
                        *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
                    ],
                    env=env,
                    cwd=tmp,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        _wait("master", lambda: _state(ui) is not None, procs, master_log)
        with worker_log.open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        str(SPARK_CLASS),
                        "org.apache.spark.deploy.worker.Worker",
                        url,
                        *("--host", "127.0.0.1", "--cores", "2", "--memory", "1g"),
                        *("--webui-port", str(worker_ui), "--work-dir", str(tmp / "work")),
                    ],
                    env=env,
                    cwd=tmp,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        _wait(
            "worker",
            lambda: (_state(ui) or {}).get("aliveworkers") == 1,
            procs,
            worker_log,
        )
        yield url
    finally:
        _stop(procs)


def _files_under(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.suffix == ".parquet"
    )


def test_writes_on_a_standalone_cluster_survive_a_killed_executor(
    cluster: str,
    tmp_path: Path,
    moto_endpoint: str,
    s3_bucket: str,
    s3_client: Any,
) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [
            *(sys.executable, str(script), cluster, str(tmp_path), moto_endpoint),
            *(f"s3://{s3_bucket}/lh", str(out), str(SMALL), str(KILLED)),
        ],
        env=_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(out.read_text())

    def want(n: int) -> list[list[Any]]:
        return [[i, f"n{i}"] for i in range(n)]

    assert got["local_rows"] == want(SMALL)
    assert got["s3_rows"] == want(SMALL)
    for where in ("local_killed", "s3_killed"):
        k = got[where]
        assert k["killed"], f"{where}: no executor was found to kill"
        assert k["executors_after"] and not set(k["executors_after"]) & set(k["killed"])
        assert k["version"] == k["latest"] == k["before"] + 1
        assert k["new_versions"] == [k["before"] + 1]  # committed once
        assert k["rows"] == want(KILLED)  # exact: nothing lost, nothing twice
    # the kills hit running tasks, which Spark ran again
    assert proc.stderr.count("ExecutorLostFailure") >= 2

    # storage holds exactly the files the tables reference (no staging directory,
    # no file of a killed attempt left behind)
    local_data = Path(got["local_data"][len("file://") :])
    assert _files_under(local_data) == got["local_registered"]
    assert not [p for p in local_data.rglob("*") if p.is_dir() and "spark" in p.name]
    keys: list[str] = []
    for page in s3_client.get_paginator("list_objects_v2").paginate(
        Bucket=s3_bucket, Prefix="lh/data/"
    ):
        keys += [o["Key"][len("lh/data/") :] for o in page.get("Contents", [])]
    assert sorted(keys) == got["s3_registered"]
