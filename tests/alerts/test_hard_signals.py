"""The hard-signal assessor reads DBEs, remap failures, lost GPUs and fatal Xids from a store."""

import math

import pytest

from gpuwarden.alerts.hard_signals import HardSignalAssessor
from gpuwarden.errors import ConfigError
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import TIME_UNKNOWN, Batch, Event, GpuId, Sample

T0 = 1_700_000_000.0
G = [GpuId("n1", i, f"GPU-{i}", model="H100-80GB") for i in range(6)]


def sample(ts, gpu, **values):
    return Sample(ts, gpu, values)


@pytest.fixture
def store():
    s = SqliteStore(":memory:")
    yield s
    s.close()


def test_each_hard_signal_and_the_quiet_gpus(store):
    for k in range(5):
        ts = T0 + 60 * k
        store.write_batch(
            Batch(
                ts,
                (
                    sample(ts, G[0], ecc_dbe_volatile_total=0.0, remapped_rows_failure=0.0),
                    # a DBE at the 4th reading
                    sample(ts, G[1], ecc_dbe_volatile_total=2.0 if k >= 3 else 0.0),
                    sample(ts, G[2], remapped_rows_failure=1.0 if k == 4 else 0.0),
                    # a driver reload: the volatile counter drops, no DBE
                    sample(ts, G[5], ecc_dbe_volatile_total=[7, 7, 0, 0, 0][k]),
                ),
            )
        )
    store.write_events(
        [
            Event(T0 + 100, G[3], "xid", 79, "fell off the bus"),
            Event(T0 + 110, G[3], "gpu_lost"),
            Event(T0 + 120, G[4], "xid", 13, "application fault: not a hard signal"),
            Event(T0 + 130, G[0], "xid", 31, "page fault: application"),
        ]
    )
    at = T0 + 240
    got = {a.gpu.uuid: a for a in HardSignalAssessor(lookback_s=600)(store, at)}
    assert set(got) == {g.uuid for g in G}
    assert all(math.isnan(a.risk) and a.ts == at for a in got.values())
    quiet = [u for u, a in got.items() if a.hard_signal is None]
    assert sorted(quiet) == ["GPU-0", "GPU-4", "GPU-5"]
    assert got["GPU-1"].hard_signal == "2 double-bit ECC errors (ecc_dbe_volatile_total)"
    assert got["GPU-1"].hard_signal_ts == T0 + 180
    assert got["GPU-2"].hard_signal == "row remapping failed" and "RMA" in got["GPU-2"].action
    lost = got["GPU-3"]
    assert lost.hard_signal == "GPU lost (fell off the bus)"  # the newest signal names it
    assert lost.reasons == ("GPU lost (fell off the bus)", "Xid 79 (GPU has fallen off the bus)")
    assert got["GPU-0"].gpu.model == "H100-80GB"


def test_signals_older_than_the_lookback_do_not_count(store):
    store.write_events([Event(T0, G[0], "xid", 48, "DBE")])
    [a] = HardSignalAssessor(lookback_s=300)(store, T0 + 100)
    assert a.hard_signal == "Xid 48 (Double-bit ECC error)"
    assert HardSignalAssessor(lookback_s=300)(store, T0 + 1000) == []


def test_lookback_must_be_positive():
    with pytest.raises(ConfigError):
        HardSignalAssessor(lookback_s=0)


def test_an_xid_of_unknown_time_is_kept_but_is_no_hard_signal(store):
    # dcgm-exporter's last-Xid gauge read non-zero at the collector's first scrape: it may be
    # days old and already dealt with, so it does not make the GPU unhealthy by itself.
    old = f"{TIME_UNKNOWN} (DCGM_FI_DEV_XID_ERRORS = 79)"
    store.write_events([Event(T0, G[0], "xid", 79, old)])
    (a,) = HardSignalAssessor()(store, T0 + 10)
    assert a.hard_signal is None and a.gpu.uuid == G[0].uuid
    assert store.read_events()["detail"].tolist() == [old]
    store.write_events(
        [Event(T0 + 5, G[0], "xid", 79, "DCGM_FI_DEV_XID_ERRORS changed from 0 to 79")]
    )
    (a,) = HardSignalAssessor()(store, T0 + 10)
    assert a.hard_signal == "Xid 79 (GPU has fallen off the bus)"


def test_a_gpu_renumbered_into_a_lost_gpus_slot_takes_it(store):
    """GPU 3 fell off the bus; after the boot GPU 4 reports as 3. Within the lookback the lost
    GPU is left out once the renumbered one reports from its slot, and named before that."""
    lost, moved = GpuId("n1", 3, "GPU-x"), GpuId("n1", 4, "GPU-y")
    boot = T0 + 3600
    for k in range(12):
        ts = T0 + 600 * k
        gpus = (lost, moved) if ts < boot - 1800 else (GpuId("n1", 3, "GPU-y"),)
        if boot - 1800 <= ts < boot:
            continue  # the node is down
        store.write_batch(Batch(ts, tuple(sample(ts, g, gpu_temp_c=50.0) for g in gpus)))
    store.write_events([Event(boot - 1800, lost, "gpu_lost")])
    hard = HardSignalAssessor(lookback_s=2 * 3600)
    before = {a.gpu.uuid: a for a in hard(store, boot - 600)}
    assert before["GPU-x"].hard_signal  # (a store may file y's samples under its new index)
    after = {a.gpu.uuid: a for a in hard(store, boot + 1200)}
    assert "GPU-x" not in after and after["GPU-y"].gpu.index == 3
