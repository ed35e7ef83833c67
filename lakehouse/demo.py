"""``make demo``: a small lakehouse doing real work, narrated.

Builds a lakehouse in ./demo-data/lakehouse (local disk, durable commits),
then: concurrent writers on threads, TrinityLake's rebase example, a
serializable conflict (write skew) next to the same thing under snapshot
isolation, time travel by version and by time, a rollback of an accidental
drop, an export, and version expiration. Run with ``python -m lakehouse.demo``.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable

import pyarrow as pa

import lakehouse
from lakehouse import Isolation
from lakehouse.intent import TxnIntent

ORDERS = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("customer_id", pa.int64()),
        ("total", pa.decimal128(12, 2)),
        ("placed_at", pa.timestamp("us", tz="UTC")),
    ]
)
CUSTOMERS = pa.schema([pa.field("customer_id", pa.int64(), nullable=False), ("name", pa.string())])


def say(text: str = "") -> None:
    print(text, flush=True)


def main(root: str = "demo-data") -> None:
    path = os.path.join(root, "lakehouse")
    shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(os.path.join(root, "lakehouse-export"), ignore_errors=True)
    say(f"lakehouse demo: a lakehouse in {path}/ (tree and versions in a kvstore under meta/)\n")
    # the commit hook (a testing injection point) makes section 3's race happen every run
    race_hook: list[Callable[[TxnIntent, int], None]] = []

    def commit_hook(intent: TxnIntent, attempt: int) -> None:
        for fn in race_hook:
            fn(intent, attempt)

    lh = lakehouse.open(path, commit_hook=commit_hook)

    # 1. the tree --------------------------------------------------------------
    with lh.begin() as txn:
        txn.create_namespace("sales", {"owner": "finance"})
        txn.create_table("sales.orders", ORDERS, {"format-version": "1"}, primary_key=["order_id"])
        txn.create_table("sales.customers", CUSTOMERS, primary_key=["customer_id"])
        txn.create_view(
            "sales.big_orders",
            "SELECT * FROM sales.orders WHERE total > 1000",
            referenced=["sales.orders"],
        )
        txn.create_namespace("marketing")
    t = lh.at_version(lh.version).describe_table("sales.orders")
    say(f"1. Version {lh.version} created namespaces sales and marketing, two tables and a view")
    say("   in one transaction. sales.orders has columns (id: name type):")
    say("   " + ", ".join(f"{c.id}: {c.name} {c.type}" for c in t.columns))
    say()

    # 2. concurrent writers --------------------------------------------------------
    n_threads, per_thread = 6, 15
    with lh.begin() as txn:
        for i in range(n_threads):
            txn.create_table(f"marketing.campaign_{i}", CUSTOMERS)
    first = lh.version
    stats = {"rebases": 0, "attempts": 0}
    lock = threading.Lock()

    def writer(i: int) -> None:
        for j in range(per_thread):
            with lh.begin() as txn:
                time.sleep(0.002)  # the job's own work between begin and commit
                txn.alter_table(f"marketing.campaign_{i}", set_properties={"clicks": str(j * 10)})
            with lock:
                stats["rebases"] += len(txn.rebased_over)
                stats["attempts"] += txn.attempts

    started = time.perf_counter()
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    took = time.perf_counter() - started
    n = n_threads * per_thread
    say(f"2. {n_threads} threads each committed {per_thread} durable changes to their own table")
    say("   (each transaction works 2 ms between begin and commit, so they overlap):")
    say(
        f"   versions {first + 1}..{lh.version} ({lh.version - first} versions, none lost) in "
        f"{took:.2f}s. {stats['rebases']} times a"
    )
    say("   commit found versions committed since it began and rebased over them (other tables:")
    say(
        f"   no conflict); {stats['attempts'] - n} commit attempts lost the race for the "
        "next version and retried."
    )
    say()

    # 3. TrinityLake's example ---------------------------------------------------------
    t1 = lh.begin()
    t2 = lh.begin()
    v = t1.version
    t1.alter_table("sales.orders", set_properties={"retention": "90d"})
    t2.alter_table("sales.customers", set_properties={"pii": "true"})

    # The commit hook runs T1's commit inside T2's first commit attempt (after T2
    # read the head, before its kvstore commit), so the race happens every run.
    def race(intent: TxnIntent, attempt: int) -> None:
        if intent.txn_id == t2.id and attempt == 1:
            t1.commit()  # T1 wins the race for the next version

    race_hook.append(race)
    t2.commit()
    race_hook.clear()
    say(f"3. TrinityLake's example: T1 and T2 both began at version {v}. T1 changed")
    say(f"   sales.orders and committed version {t1.committed_version} while T2 was committing.")
    say(
        f"   T2 (changing sales.customers) lost that race on attempt 1, checked version(s) "
        f"{t2.rebased_over},"
    )
    say(
        f"   saw that only sales.orders changed, rebased and committed version "
        f"{t2.committed_version} on attempt {t2.attempts}."
    )
    say()

    # 4. write skew: serializable vs snapshot --------------------------------------------
    with lh.begin() as txn:
        txn.create_namespace("ops")
        txn.create_table("ops.primary_db", CUSTOMERS, {"on_call": "yes"})
        txn.create_table("ops.replica_db", CUSTOMERS, {"on_call": "yes"})
    before_skew = lh.version
    say("4. Rule: at least one of ops.primary_db and ops.replica_db stays on call.")
    for iso in (Isolation.SERIALIZABLE, Isolation.SNAPSHOT):
        a, b = lh.begin(iso), lh.begin(iso)
        if a.describe_table("ops.replica_db").properties["on_call"] == "yes":
            a.alter_table("ops.primary_db", set_properties={"on_call": "no"})
        if b.describe_table("ops.primary_db").properties["on_call"] == "yes":
            b.alter_table("ops.replica_db", set_properties={"on_call": "no"})
        a.commit()
        try:
            b.commit()
            view = lh.at_version(lh.version)
            states = [
                view.describe_table(f"ops.{t}").properties["on_call"]
                for t in ("primary_db", "replica_db")
            ]
            say(f"   {iso.name}: both transactions committed; on call now: {states}")
            say("     (write skew: the rule is broken).")
        except lakehouse.RetryableConflict as exc:
            say(f"   {iso.name}: the second transaction was refused (RetryableConflict):")
            say(f"     {exc}.")
        lh.rollback(before_skew)  # reset for the next round
    say()

    # 5. time travel ----------------------------------------------------------------------
    with lh.begin() as txn:
        txn.drop_table("sales.customers")  # oops
    dropped_at = lh.version
    with lh.at_version(1) as old:
        say(f"5. Time travel: version 1 had tables {old.list_tables('sales')} in sales and")
        say(
            f"   {len(old.list_tables('marketing'))} in marketing; the latest version "
            f"({dropped_at}) has {lh.at_version(dropped_at).list_tables('sales')} in sales."
        )
    ts = lh.version_info(first).created_at
    with lh.at_time(ts) as then:
        props = then.describe_table("marketing.campaign_0").properties
        say(f"   As of {ts.isoformat()} the lakehouse was at version {then.version};")
        say(f"   marketing.campaign_0 then had properties {dict(props) or '{}'}.")
    say()

    # 6. rollback -----------------------------------------------------------------------------
    restored = lh.rollback(dropped_at - 1)
    info = lh.version_info(restored)
    say(
        f"6. Version {dropped_at} dropped sales.customers by mistake. rollback({dropped_at - 1}) "
        f"committed version {restored},"
    )
    say(f'   whose record says "{info.summary()}".')
    tables = lh.at_version(restored).list_tables("sales")
    say(f"   sales again has {tables}. History was not rewritten:")
    for h in lh.history(limit=4):
        say(f"     version {h.version:3d}  {h.created_at:%H:%M:%S.%f}  {h.summary()}")
    say()

    # 7. export and expiration -------------------------------------------------------------
    dest = os.path.join(root, "lakehouse-export")
    summary = lh.export(dest, kind="full")
    with lakehouse.open(dest) as copy:
        same = copy.at_version(copy.version).list_tables("sales")
    say(
        f"7. Exported version {summary['source_version']} to {dest}/ "
        f"({summary['objects']} objects);"
    )
    say(f"   opened on its own it lists {same} in sales.")
    oldest = lh.expire_versions(keep_last=5)
    try:
        lh.at_version(1)
    except lakehouse.VersionExpired as exc:
        say(f"   expire_versions(keep_last=5) kept versions {oldest}..{lh.version}; reading")
        say(f"   version 1 now raises VersionExpired: {exc}.")
    lh.close()
    say("\nDone. Try: python -m lakehouse history demo-data/lakehouse")


if __name__ == "__main__":
    main()
