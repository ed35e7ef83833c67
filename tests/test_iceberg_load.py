"""The Iceberg REST catalog under load while the writer commits (issue 24, "Must show").

8 client threads send 200 requests each (config, namespace list, table list, load table,
load table of a version namespace ``load@v<N>``, and some bad ones: an unknown table, a
misspelt version namespace, no token) to ``lakehouse.iceberg.Server``, serving
through a reader, while a writer thread in the same process commits appends, deletes and
updates to the table ``load.t`` and appends to ``load.other`` (versions that do not change
``load.t``). The writer records each version it made and the row count of ``load.t`` there.

Every response must be 200 (the bad requests: 404, 400, 401 with the protocol's error type)
and right for the version it names:

* a load of ``load.t`` answers the newest version that changed the table at or below the
  head when the server answered: its ``current-snapshot-id`` is a version that changed the
  table, at least the one the writer had committed before the request was sent (the server
  follows the writer), never lower than the client's previous answer, its snapshot's
  ``total-records`` less ``total-position-deletes`` is the table's row count at that version
  (as the writer counted it), and the metadata lists
  exactly the table's versions up to it;
* a load of ``load@v<N>`` answers the newest version that changed the table at or below N;
* some answered metadata documents are read back with pyiceberg and give the rows of
  ``lh.at_version(s).read("load.t")``.
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
from iceberg_fixtures import rows
from pyiceberg.table import StaticTable

import lakehouse
from lakehouse.iceberg import Server

T, OTHER = "load.t", "load.other"
CLIENTS, REQUESTS = 8, 200
PACE = 5  # the writer commits once per 5 answered requests
TOKEN = "load-token"
#: what a client asks for; the bad requests (a few in ten) must not disturb the others
KINDS = ["config", "namespaces", "tables", "load", "load", "load", "versioned", "versioned"]
KINDS += ["missing", "misspelt", "no_token"]
ERRORS = {
    "missing": (404, "NoSuchTableException"),
    "misspelt": (400, "BadRequestException"),
    "no_token": (401, "NotAuthorizedException"),
}
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("x", pa.float64())])
# no background versions the writer did not record; appends of <= 50 rows are inlined
PROPS = {"compaction.auto": "false", "inline.max_rows": "50"}


@dataclass
class Ledger:
    """What the writer committed, shared with the clients (under ``lock``)."""

    lock: threading.Condition = field(default_factory=threading.Condition)
    changed: list[int] = field(default_factory=list)  # versions that changed load.t
    counts: dict[int, int] = field(default_factory=dict)  # load.t's rows at those versions
    head: int = 0
    requests: int = 0  # requests the clients have had answered
    done: bool = False

    def answered(self) -> None:
        with self.lock:
            self.requests += 1
            self.lock.notify_all()

    def wait_for_requests(self, n: int) -> bool:
        """Paces the writer by the clients' progress, not by time; False once they are done."""
        with self.lock:
            self.lock.wait_for(lambda: self.requests >= n or self.done)
            return not self.done

    def finish(self) -> None:
        with self.lock:
            self.done = True
            self.lock.notify_all()

    def committed(self, version: int, rows_now: int | None) -> None:
        with self.lock:
            if rows_now is not None:
                self.changed.append(version)
                self.counts[version] = rows_now
            self.head = version

    def effective(self, version: int) -> int:
        with self.lock:
            return max(v for v in self.changed if v <= version)


def batch(rng: random.Random, start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": list(range(start, start + n)),
            "v": [rng.choice(["a", "b", "c", None]) for _ in range(n)],
            "x": [rng.random() for _ in range(n)],
        },
        schema=SCHEMA,
    )


def write(lh: Any, ledger: Ledger, errors: list[str], seed: int) -> None:
    """Commit one version every PACE answered requests until the clients are done."""
    rng = random.Random(seed)
    count, next_id = ledger.counts[ledger.changed[0]], 0
    try:
        for step in range(400):
            if not ledger.wait_for_requests(step * PACE):
                break
            kind = rng.choice(["append", "append", "append_file", "delete", "update", "other"])
            txn = lh.begin()
            if kind == "append":  # small: inlined
                n = rng.randint(1, 20)
                count += txn.append(T, batch(rng, next_id, n))
                next_id += n
            elif kind == "append_file":
                n = rng.randint(200, 400)
                count += txn.append(T, batch(rng, next_id, n))
                next_id += n
            elif kind == "delete":
                count -= txn.delete(T, f"id % 11 = {step % 11} AND id < {next_id // 2}")
            elif kind == "update":
                txn.update(T, f"id % 13 = {step % 13}", {"x": "x + 1"})
            else:
                txn.append(OTHER, batch(rng, step, 1))
            version = txn.commit()
            ledger.committed(version, None if kind == "other" else count)
    except Exception as exc:  # reported by the test
        errors.append(f"writer: {type(exc).__name__}: {exc}")


def live_rows(summary: dict[str, str]) -> int:
    """Rows a scan returns: Iceberg's total-records counts the data files' rows, deleted ones
    too; every deleted row is one position delete."""
    return int(summary["total-records"]) - int(summary.get("total-position-deletes", 0))


@dataclass
class Answer:
    client: int
    kind: str
    asked: int | None  # N of load@vN
    head_before: int  # the writer's last committed version when the request was sent
    snapshot: int
    live: int
    snapshots: list[int] = field(repr=False)
    location: str = field(repr=False)


def client(url: str, ledger: Ledger, seed: int, answers: list[Answer], errors: list[str]) -> None:
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    last = -1
    with httpx.Client(base_url=url, headers=headers, timeout=120) as http:
        for i in range(REQUESTS):
            kind = rng.choice(KINDS)
            with ledger.lock:
                head_before = ledger.head
                first = ledger.changed[0]
            asked = rng.randint(first, head_before) if kind == "versioned" else None
            path = {
                "config": "/v1/config",
                "namespaces": "/v1/namespaces",
                "tables": "/v1/namespaces/load/tables",
                "load": "/v1/namespaces/load/tables/t",
                "versioned": f"/v1/namespaces/load%40v{asked}/tables/t",
                "missing": "/v1/namespaces/load/tables/nope",
                "misspelt": "/v1/namespaces/load%40version3/tables/t",
                "no_token": "/v1/namespaces",
            }[kind]
            r = http.get(path, headers={"Authorization": ""} if kind == "no_token" else None)
            ledger.answered()
            want = ERRORS.get(kind, (200, ""))
            got = (r.status_code, r.json()["error"]["type"] if r.status_code >= 400 else "")
            if got != want:
                errors.append(f"client {seed} request {i} {path}: {r.status_code} {r.text[:300]}")
                continue
            if r.status_code != 200:
                continue
            doc = r.json()
            if kind == "namespaces":
                if doc["namespaces"] != [["load"]]:
                    errors.append(f"{path}: {doc}")
            elif kind == "tables":
                names = sorted(x["name"] for x in doc["identifiers"])
                if names != ["other", "t"]:
                    errors.append(f"{path}: {doc}")
            elif kind in ("load", "versioned"):
                meta = doc["metadata"]
                current = meta["current-snapshot-id"]
                snap = next(s for s in meta["snapshots"] if s["snapshot-id"] == current)
                answers.append(
                    Answer(
                        seed,
                        kind,
                        asked,
                        head_before,
                        current,
                        live_rows(snap["summary"]),
                        sorted(s["snapshot-id"] for s in meta["snapshots"]),
                        doc["metadata-location"],
                    )
                )
                if kind == "load":
                    if current < last:
                        errors.append(f"client {seed}: snapshot {current} after {last}")
                    last = current


def test_server_under_load_while_the_writer_commits(tmp_path: Path) -> None:
    url = str(tmp_path / "lh")
    lh = lakehouse.open(url)
    with lh.begin() as txn:
        txn.create_namespace("load")
        txn.create_table(T, SCHEMA, PROPS)
        txn.create_table(OTHER, SCHEMA, PROPS)
    ledger = Ledger()
    ledger.committed(lh.version, 0)
    errors: list[str] = []
    answers: list[Answer] = []
    try:
        with Server(url, token=TOKEN) as server:
            writer = threading.Thread(target=write, args=(lh, ledger, errors, 7))
            clients = [
                threading.Thread(target=client, args=(server.url, ledger, c, answers, errors))
                for c in range(CLIENTS)
            ]
            writer.start()
            for c in clients:
                c.start()
            for c in clients:
                c.join()
            ledger.finish()
            writer.join()
        assert not errors, "\n".join(errors[:20])
        loads = [a for a in answers if a.kind == "load"]
        versioned = [a for a in answers if a.kind == "versioned"]
        assert len(answers) > CLIENTS * REQUESTS // 3 and loads and versioned
        changed = sorted(ledger.changed)
        assert len(changed) > 10, "the writer committed too little to test anything"
        problems = []
        for a in answers:
            want = ledger.effective(a.asked) if a.asked is not None else a.snapshot
            if a.snapshot != want or a.snapshot not in ledger.counts:
                problems.append(f"{a}: not the table's version (want {want})")
                continue
            if a.asked is None and a.snapshot < ledger.effective(a.head_before):
                problems.append(f"{a}: older than {ledger.effective(a.head_before)}")
            if a.live != ledger.counts[a.snapshot]:
                problems.append(f"{a}: live rows, want {ledger.counts[a.snapshot]}")
            if a.snapshots != [v for v in changed if v <= a.snapshot]:
                problems.append(f"{a}: snapshots listed")
        assert not problems, f"{len(problems)} wrong answers:\n" + "\n".join(problems[:20])
        # the rows behind some of the answers, through pyiceberg
        seen = Counter(a.snapshot for a in answers)
        assert len({a.snapshot for a in loads}) > 1, "the clients never saw the writer move"
        locations = {a.snapshot: a.location for a in answers}
        for s in sorted(seen)[:: max(1, len(seen) // 6)]:
            assert lh.at_version(s).table_stats(T).rows == ledger.counts[s]
            got = StaticTable.from_metadata(locations[s]).scan().to_arrow()
            assert rows(got) == rows(lh.at_version(s).read(T)), s
            assert json.loads(Path(locations[s]).read_text())["current-snapshot-id"] == s
    finally:
        lh.close()
