"""``gpuwarden collect`` killed with SIGKILL while it writes a simulated fleet into SQLite every
20 ms: every batch a reader saw committed is still there and unchanged, no batch is there in
part, and a collector restarted on the same file carries on after the last batch."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fault_helpers import Proc, wait_for

from gpuwarden.store.sqlite import SqliteStore

SIM = "sim://?nodes=4&gpus=8&seed=1&step=60"
GPUS = 32


def committed(db: Path) -> dict[float, tuple[int, float]]:
    """Per timestamp, the rows and a checksum of their values, as a reader sees them now."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        rows = conn.execute(
            "SELECT ts, count(*), total(gpu_temp_c) + total(power_w) + total(ecc_sbe_volatile_total)"
            " FROM samples GROUP BY ts"
        ).fetchall()
    finally:
        conn.close()
    return {ts: (n, round(check, 6)) for ts, n, check in rows}


def test_kill_9_while_collecting_loses_no_committed_batch_and_leaves_no_partial_one(
    tmp_path: Path,
):
    db = tmp_path / "fleet.db"
    store = f"sqlite:///{db}"
    proc = Proc(["collect", "--collector", SIM, "--store", store, "--interval", "0.02"],
                tmp_path / "collect.log").start()  # fmt: skip
    try:

        def thirty() -> bool:
            try:
                return len(committed(db)) >= 30
            except sqlite3.OperationalError:  # the file or its tables are not made yet
                return False

        wait_for("30 committed batches", thirty, proc)
        seen = committed(db)  # the last thing seen before the kill: all of it was acknowledged
        proc.kill_9()
    finally:
        proc.stop()
    after = committed(db)
    for ts, rows in seen.items():
        assert after[ts] == rows  # nothing committed lost or changed
    assert {n for n, _ in after.values()} == {GPUS}  # every batch whole, none in part
    with SqliteStore(db) as s:  # opens (recovering the WAL), reads, and the file is sound
        assert len(s.read_samples()) == GPUS * len(after)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert conn.execute("SELECT count(*) FROM (SELECT DISTINCT ts, gpu_id FROM samples)"
                        ).fetchone()[0] == GPUS * len(after)  # fmt: skip
    conn.close()
    # an operator restarts it where the file ends: it carries on, and nothing is written twice
    last = max(after)
    resume = f"{SIM}&resume={int(last) + 60}"
    again = Proc(["collect", "--collector", resume, "--store", store, "--interval", "0.001",
                  "--iterations", "5"], tmp_path / "collect2.log").start()  # fmt: skip
    try:
        assert again.proc is not None and again.proc.wait(timeout=120) == 0, again.tail()
    finally:
        again.stop()
    final = committed(db)
    assert sorted(final) == sorted(after) + [last + 60 * k for k in range(1, 6)]
    assert {ts: final[ts] for ts in after} == after
    assert {n for n, _ in final.values()} == {GPUS}
