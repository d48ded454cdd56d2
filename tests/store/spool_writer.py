"""A process that writes through a spool, for the kill -9 test (test_spool.py).

    python spool_writer.py DB SPOOL DOWNFLAG write FIRST COUNT
    python spool_writer.py DB SPOOL DOWNFLAG drain

``write``: batch number FIRST, FIRST+1, ... each one sample (its number as the GPU temperature,
at T0 + its number) and one event; "ack N" is printed once ``write_batch`` returned for batch N,
which is what acknowledged means. The store is SQLite behind ``FlakyStore``: down while the
file DOWNFLAG exists, and slow (5 ms a write), so a replay takes long enough to be killed in.
``drain``: replay everything queued, print "drained N".
"""

from __future__ import annotations

import sys
from pathlib import Path

from flaky_store import FlakyStore

from gpuwarden.store.spool import Spool
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Batch, Event, GpuId, Sample

T0 = 1_714_564_800.0
GPU = GpuId("node1", 0, "GPU-spool")


def batch(n: int) -> Batch:
    ts = T0 + n
    return Batch(
        ts, (Sample(ts, GPU, {"gpu_temp_c": float(n)}),), (Event(ts, GPU, "xid", 13, f"batch {n}"),)
    )


def main(db: str, spool_dir: str, flag: str, mode: str, *rest: str) -> None:
    store = FlakyStore(SqliteStore(db), down=Path(flag).exists, delay_s=0.005)
    spool = Spool(store, spool_dir, retry_s=0.05, max_retry_s=0.05, replay_budget_s=0.5)
    if mode == "write":
        first, count = int(rest[0]), int(rest[1])
        for n in range(first, first + count):
            spool.write_batch(batch(n))
            print(f"ack {n}", flush=True)
    else:
        done = 0
        while spool.stats.pending:
            done += spool.flush(budget_s=60)
        print(f"drained {done}", flush=True)
    spool.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
