"""The spool: writes pass through while the store is up, queue on disk while it is down, replay
in order when it is back, stay within their size and age limits (drops counted and logged), and a
``kill -9`` in the middle of a replay loses no acknowledged batch (a real process, killed)."""

from __future__ import annotations

import logging
import math
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from flaky_store import FlakyStore

from gpuwarden.errors import ConfigError, InputError
from gpuwarden.health import GpuState, Reason, Verdict
from gpuwarden.store.base import Store
from gpuwarden.store.spool import Spool
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import (
    Assignment,
    Batch,
    Event,
    Failure,
    GpuId,
    NodeInfo,
    Rejection,
    Sample,
)

T0 = 1_714_564_800.0
A = GpuId("node1", 0, "GPU-aaaa", "00000000:1B:00.0", "H100", "rack1")
HERE = Path(__file__).resolve().parent


def batch(n: int, gpu: GpuId = A) -> Batch:
    ts = T0 + 60 * n
    return Batch(ts, (Sample(ts, gpu, {"gpu_temp_c": float(n)}),))


class Clocks:
    def __init__(self) -> None:
        self.wall = T0
        self.mono = 0.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


def spooled(
    tmp_path: Path, clocks: Clocks, *, down: list[bool], **kw: object
) -> tuple[Spool, FlakyStore]:
    store = FlakyStore(SqliteStore(tmp_path / "store.db"), down=lambda: down[0])
    spool = Spool(
        store,
        tmp_path / "spool",
        clock=lambda: clocks.wall,
        monotonic=lambda: clocks.mono,
        **kw,  # type: ignore[arg-type]
    )
    return spool, store


def temps(store: Store) -> list[float]:
    return store.read_samples(fields=["gpu_temp_c"])["gpu_temp_c"].tolist()


def test_writes_pass_straight_through_while_the_store_is_up(tmp_path, clocks):
    spool, store = spooled(tmp_path, clocks, down=[False])
    spool.write_batch(batch(1))
    assert temps(store) == [1.0] and spool.stats.spooled == 0 and spool.stats.pending == 0
    assert isinstance(spool, Store)  # reads go to the store
    assert temps(spool) == [1.0]
    spool.close()


def test_while_down_writes_queue_and_replay_in_order_when_back(tmp_path, clocks, caplog):
    down = [False]
    spool, store = spooled(tmp_path, clocks, down=down, retry_s=1.0, max_retry_s=8.0)
    spool.write_batch(batch(0))
    down[0] = True
    caplog.set_level(logging.INFO)
    for n in range(1, 6):
        spool.write_batch(batch(n))  # acknowledged: no error, the batch is on disk
        clocks.advance(0.5)
    assert spool.stats.pending == 5 and temps(store) == [0.0]
    assert "spooling writes in" in caplog.text and "connection refused" in caplog.text
    attempts = store.attempts
    spool.write_batch(batch(6))  # still backing off: the store is not asked
    assert store.attempts == attempts
    down[0] = False
    clocks.advance(60)
    spool.write_batch(batch(7))
    assert temps(store) == [float(n) for n in range(8)]  # the queue first, oldest first, then 7
    assert [p.ts for _, p in store.writes] == [T0 + 60 * n for n in range(8)]
    assert spool.stats.pending == 0 and spool.stats.replayed == 7  # 7 queued behind 1..6
    spool.close()


def test_the_backoff_doubles_up_to_its_limit(tmp_path, clocks):
    spool, store = spooled(tmp_path, clocks, down=[True], retry_s=1.0, max_retry_s=4.0)
    tries = []
    for _ in range(80):
        before = store.attempts
        spool.write_batch(batch(1))
        if store.attempts > before:
            tries.append(clocks.mono)
        clocks.advance(0.25)
    gaps = [b - a for a, b in zip(tries, tries[1:], strict=False)]
    assert gaps[:3] == [1.0, 2.0, 4.0] and set(gaps[3:]) == {4.0}
    spool.close()


def test_a_malformed_write_is_raised_not_queued(tmp_path, clocks):
    spool, store = spooled(tmp_path, clocks, down=[False])
    bad = Batch(T0, (Sample(math.nan, A, {"gpu_temp_c": 1.0}),))
    with pytest.raises(InputError, match="ts"):
        spool.write_batch(bad)
    assert spool.stats.pending == 0 and spool.stats.spooled == 0
    spool.close()


def test_a_queued_write_the_store_refuses_is_dropped_and_counted(tmp_path, clocks, caplog):
    down = [True]
    refuse_two = lambda method, p: InputError("field type conflict") if p.ts == T0 + 120 else None  # noqa: E731
    store = FlakyStore(SqliteStore(tmp_path / "s.db"), down=lambda: down[0], refuse=refuse_two)
    spool = Spool(
        store, tmp_path / "spool", clock=lambda: clocks.wall, monotonic=lambda: clocks.mono
    )
    for n in range(1, 4):
        spool.write_batch(batch(n))
    down[0] = False
    clocks.advance(60)
    assert spool.flush() == 2
    assert temps(store) == [1.0, 3.0] and spool.stats.rejected == 1 and spool.stats.pending == 0
    assert "refused a queued batch, dropped: field type conflict" in caplog.text
    spool.close()


def test_past_its_size_the_oldest_batches_are_dropped_and_counted(tmp_path, clocks, caplog):
    spool, store = spooled(tmp_path, clocks, down=[True], max_bytes=1000)
    for n in range(40):
        spool.write_batch(batch(n))
    assert spool.stats.bytes <= 1000 and spool.stats.dropped_size > 0
    assert spool.stats.pending + spool.stats.dropped_size == 40
    assert "is full" in caplog.text and "oldest batch" in caplog.text
    kept = spool.stats.pending
    spool.store.down = lambda: False
    clocks.advance(3600)
    spool.flush()
    assert temps(store) == [float(n) for n in range(40 - kept, 40)]  # the newest were kept
    spool.close()


def test_past_their_age_batches_are_dropped_and_counted(tmp_path, clocks, caplog):
    spool, store = spooled(tmp_path, clocks, down=[True], max_age_s=3600)
    spool.write_batch(batch(1))
    clocks.advance(1800)
    spool.write_batch(batch(2))
    clocks.advance(1801)  # batch 1 is now older than an hour
    spool.store.down = lambda: False
    spool.flush()
    assert temps(store) == [2.0] and spool.stats.dropped_age == 1
    assert "older than 1 h" in caplog.text
    spool.close()


def test_what_waits_survives_a_restart(tmp_path, clocks):
    spool, _ = spooled(tmp_path, clocks, down=[True])
    for n in range(3):
        spool.write_batch(batch(n))
    spool.close()
    again, store = spooled(tmp_path, clocks, down=[False])
    assert again.stats.pending == 3
    assert again.flush() == 3 and temps(store) == [0.0, 1.0, 2.0]
    again.close()


def test_a_queue_for_another_store_is_not_replayed_into_this_one(tmp_path, clocks):
    spool, _ = spooled(tmp_path, clocks, down=[True])
    spool.write_batch(batch(1))
    spool.close()
    other = SqliteStore(tmp_path / "other.db")
    with pytest.raises(ConfigError, match=r"holds 1 batch\(es\) for sqlite:///.*store.db"):
        Spool(other, tmp_path / "spool")
    other.close()


def test_one_process_at_a_time(tmp_path, clocks):
    spool, _ = spooled(tmp_path, clocks, down=[False])
    other = SqliteStore(":memory:")
    with pytest.raises(ConfigError, match="in use by another gpuwarden process"):
        Spool(other, tmp_path / "spool")
    spool.close()
    other.close()


def test_every_kind_of_write_comes_out_as_it_went_in(tmp_path, clocks):
    """Each write of a collector or serve, queued and replayed, stores what writing it directly
    stores: samples, events, assignments, node versions, rejected readings, failures, verdicts."""
    mig = A._replace(uuid="MIG-GPU-aaaa/3", model="H100 MIG 1g.10gb")
    full = Batch(
        T0,
        (
            Sample(T0, A, {"gpu_temp_c": 41.5, "ecc_sbe_volatile_total": 3.0}),
            Sample(T0, mig, {"fb_used_mib": 10.0}),
        ),
        (Event(T0, A, "xid", 48, "DBE"), Event(T0, A, "gpu_lost")),
        ("node2: timed out",),
        (Assignment(T0, A, "ml", "train-0", "pytorch"),),
        (NodeInfo(T0, "node1", "550.54.15", "12.4"),),
        (Rejection(T0, A, "mem_temp_c", "sentinel", 65535.0),),
        screened=True,
    )
    verdict = Verdict(
        T0, A, GpuState("at-risk"), risk=0.81, since=T0, changed_from=GpuState.OK,
        reasons=(Reason("SBE climbing", {"sbe_per_h": 12.0}), "plain"), action="drain", threshold=0.7,
    )  # fmt: skip
    writes = [
        ("write_batch", full),
        ("write_events", [Event(T0 + 5, A, "xid", 79, "off the bus")]),
        ("write_failures", [Failure(T0 + 9, A, "fell_off_bus", T0 - 60, 3600.0, 79)]),
        ("write_rejections", [Rejection(T0 + 1, A, "power_w", "out_of_range", 1e9)]),
        (
            "write_verdicts",
            [verdict, Verdict(T0 + 1, A, GpuState("unhealthy"), cause="hard-signal")],
        ),
    ]
    direct = SqliteStore(tmp_path / "direct.db")
    down = [True]
    spool, store = spooled(tmp_path, clocks, down=down)
    for method, payload in writes:
        getattr(direct, method)(payload)
        getattr(spool, method)(payload)
    assert spool.stats.pending == len(writes)
    down[0] = False
    clocks.advance(60)
    assert spool.flush() == len(writes)
    for read in ("read_samples", "read_events", "read_failures", "read_rejections", "read_assignments",
                 "read_nodes", "gpus", "mig_instances"):  # fmt: skip
        pd.testing.assert_frame_equal(getattr(store, read)(), getattr(direct, read)(), obj=read)
    got, want = store.read_verdicts(), direct.read_verdicts()
    pd.testing.assert_frame_equal(got.drop(columns="reasons"), want.drop(columns="reasons"))
    assert [[(str(r), dict(getattr(r, "features", {}))) for r in rs] for rs in got["reasons"]] == [
        [(str(r), dict(getattr(r, "features", {}))) for r in rs] for rs in want["reasons"]
    ]
    direct.close()
    spool.close()


# -- kill -9 ------------------------------------------------------------------------------


def _writer(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    argv = [sys.executable, str(HERE / "spool_writer.py"), str(tmp_path / "store.db"),
            str(tmp_path / "spool"), str(tmp_path / "down"), *args]  # fmt: skip
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _acks(proc: subprocess.Popen[str], into: list[int]) -> threading.Thread:
    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("ack "):
                into.append(int(line.split()[1]))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _wait_for(predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_kill_9_in_the_middle_of_a_replay_loses_no_acknowledged_batch(tmp_path):
    """Rounds of: a writer process acknowledges batches while the store is down (they queue),
    the store comes back, the writer replays the queue while it keeps writing, and it is killed
    with SIGKILL after a while. Then a fresh process drains the queue. Every acknowledged batch
    is in the store, once; some rounds were killed with batches still queued."""
    flag = tmp_path / "down"
    acked: list[int] = []
    queued_at_kill = []
    stored_at_kill = []
    first = 0
    for kill_after in (0.05, 0.2, 0.4, 0.7):
        flag.touch()
        proc = _writer(tmp_path, "write", str(first), "100000")
        reader = _acks(proc, acked)
        _wait_for(lambda f=first: sum(n >= f for n in acked) >= 80)  # queued while down
        flag.unlink()  # the store is back: the writer replays as it writes
        time.sleep(kill_after)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(timeout=30)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
        with sqlite3.connect(tmp_path / "spool" / "spool.db") as db:
            queued_at_kill.append(db.execute("SELECT count(*) FROM spool").fetchone()[0])
        with sqlite3.connect(tmp_path / "store.db") as db:
            stored_at_kill.append(db.execute("SELECT count(*) FROM samples").fetchone()[0])
        first = max(acked) + 1
    drain = _writer(tmp_path, "drain")
    out, err = drain.communicate(timeout=120)
    assert drain.returncode == 0, err
    replayed = [b - a for a, b in zip([0, *stored_at_kill], stored_at_kill, strict=False)]
    mid = [q > 0 and r > 0 for q, r in zip(queued_at_kill, replayed, strict=True)]
    assert any(mid), (queued_at_kill, stored_at_kill)  # killed with part of a queue replayed
    with sqlite3.connect(tmp_path / "store.db") as db:
        temps_ = [r[0] for r in db.execute("SELECT gpu_temp_c FROM samples")]
        details = [r[0] for r in db.execute("SELECT detail FROM events")]
    assert set(acked) <= {int(t) for t in temps_}, "an acknowledged batch was lost"
    assert len(temps_) == len(set(temps_)) and len(details) == len(set(details))  # once each
    assert set(details) == {f"batch {int(t)}" for t in temps_}
    assert len(acked) >= 4 * 80


# -- gpuwarden collect --spool ------------------------------------------------------------


def test_collect_spools_while_the_store_is_down_and_catches_up(tmp_path, monkeypatch):
    from click.testing import CliRunner
    from influx2_fake import FakeInflux
    from test_conformance_influxdb import open_influx

    from gpuwarden.cli import main

    fake = FakeInflux().start()
    monkeypatch.setenv("GPUWARDEN_INFLUX_TOKEN", fake.token)
    url = f"influxdb://{fake.url.removeprefix('http://')}?org=gpuwarden&bucket=gpu&retries=0"
    spool = tmp_path / "spool"

    def collect(resume: float, n: int) -> str:
        sim = f"sim://?nodes=1&gpus=2&seed=3&step=60&start={T0}&resume={resume}"
        args = ["collect", "--collector", sim, "--store", url, "--spool", str(spool),
                "--spool-max-mb", "5", "--spool-max-age", "36500d", "--iterations", str(n), "--interval", "0.01"]  # fmt: skip
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        return result.output

    fake.fail(10**6, 503)
    out = collect(T0, 3)
    assert (
        f"3 collections: 6 samples, 0 events, 0 collector errors, 0 store errors; spool {spool}: 3 waiting"
        in out
    )
    fake.recover()
    out = collect(T0 + 180, 2)
    assert f"spool {spool}: 0 waiting, 1 spooled, 4 replayed, 0 dropped" in out  # then direct
    with open_influx(fake) as store:
        got = store.read_samples(fields=["gpu_temp_c"])
    assert sorted(set(got["ts"])) == [T0 + 60 * k for k in range(5)] and len(got) == 10
    fake.stop()
