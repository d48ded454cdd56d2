"""History as dcgm-exporter and gpuwarden's exporter leave it in a Prometheus-compatible
server (not written by gpuwarden): both host label spellings, and Xids from the last-Xid gauge,
4.x's windowed counts and gpuwarden's Xid counter, on a real VictoriaMetrics and a real
Prometheus."""

from __future__ import annotations

import numpy as np
import pytest
from tsdb_servers import start_prometheus_with, start_victoriametrics

from gpuwarden.store._series import Series
from gpuwarden.store.prometheus import PrometheusStore
from gpuwarden.store.victoriametrics import VictoriaMetricsStore
from gpuwarden.telemetry import TIME_UNKNOWN

pytestmark = pytest.mark.integration

T0 = 1_714_564_800.0  # on the hour
STEP = 60.0
N = 6 * 60  # six hours of scrapes
_3X = {"Hostname": "node-a", "modelName": "NVIDIA H100 80GB HBM3"}  # dcgm-exporter 3.x
_4X = {"hostname": "node-b", "modelName": "NVIDIA A100-SXM4-80GB"}  # 4.x spells it lower case


def _gpu(uuid: str, index: int, host: dict[str, str]) -> dict[str, str]:
    return {"gpu": str(index), "UUID": uuid, "device": f"nvidia{index}",
            "pci_bus_id": f"00000000:{index + 10:02X}:00.0", **host,
            "instance": "10.0.0.1:9400", "job": "dcgm-exporter"}  # fmt: skip


A, B, C, D = (
    _gpu("GPU-a", 0, _3X),
    _gpu("GPU-b", 0, _4X),
    _gpu("GPU-c", 1, _4X),
    _gpu("GPU-d", 1, _3X),
)


K8S_A = {"namespace": "ml", "pod": "train-0", "container": "trainer"}
K8S_B = {"exported_namespace": "web", "exported_pod": "infer-1", "exported_container": "srv"}
DRV = {"DCGM_FI_DRIVER_VERSION": "550.54.15"}
SENTINELS = {10: 9223372036854775794.0, 20: 200.0, 300: 9223372036854775794.0}


def _series(name: str, labels: dict[str, str], values: list[float], start: int = 0) -> Series:
    ts = ((T0 + (start + np.arange(len(values))) * STEP) * 1000).astype(np.int64)
    return Series({"__name__": name, **labels}, ts, np.array(values, dtype=np.float64))


def _steps(*changes: tuple[int, float], n: int = N) -> list[float]:
    """A value held from each change's scrape on."""
    out = [0.0] * n
    for at, value in changes:
        out[at:] = [value] * (n - at)
    return out


SERIES = [
    *(_series("DCGM_FI_DEV_GPU_TEMP", g, [40.0 + k % 5 for k in range(N)]) for g in (A, B, D)),
    # HBM temperature as an exporter that re-exports DCGM's blanks leaves it: the int64
    # sentinel DCGM_INT64_NOT_SUPPORTED at scrapes 10 and 300, an impossible 200 C at 20
    _series("DCGM_FI_DEV_MEMORY_TEMP", A, [SENTINELS.get(k, 60.0) for k in range(N)]),
    # dcgm-exporter on Kubernetes: GPU-c held by train-0 (scrapes 0-119), idle, then by
    # infer-1 (240 on; Prometheus' exported_ spelling): its series changes with the pod
    # labels; every series names the driver
    *(
        _series(
            "DCGM_FI_DEV_GPU_TEMP",
            {**C, **pod, **DRV},
            [40.0 + k % 5 for k in range(a, b)],
            start=a,
        )
        for pod, a, b in ((K8S_A, 0, 120), ({}, 120, 240), (K8S_B, 240, N))
    ),  # fmt: skip
    # the last-Xid gauge: 79 at scrape 70 (held), then 48 at scrape 200
    _series("DCGM_FI_DEV_XID_ERRORS", A, _steps((70, 79.0), (200, 48.0))),
    # an exporter started after an Xid 31: the gauge is born non-zero, its time unknown
    _series("DCGM_FI_DEV_XID_ERRORS", D, _steps((0, 31.0), n=N - 120), start=120),
    # 4.x: Xid 13 appears at scrape 90 (1), rises to 3 at 150, leaves the window at 260
    _series(
        "DCGM_EXP_XID_ERRORS_COUNT",
        {**B, "xid": "13", "window_size_in_ms": "300000"},
        _steps((0, 1.0), (60, 3.0), (170, 0.0), n=N - 90),
        start=90,
    ),  # fmt: skip
    # gpuwarden's exporter: Xid 63 counted 1 at scrape 100, 3 at 130; restarted before 240
    _series(
        "gpuwarden_xid_errors_total",
        {**C, "xid": "63"},
        _steps((0, 1.0), (30, 3.0), (140, 1.0), n=N - 100),
        start=100,
    ),  # fmt: skip
]


def _clock() -> float:
    return T0 + N * STEP + 60


@pytest.fixture(scope="module", params=["victoriametrics", "prometheus"])
def store(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    if request.param == "victoriametrics":
        daemon = start_victoriametrics(tmp)
        writer = VictoriaMetricsStore(daemon.url)
        writer._send(SERIES)  # as if it had scraped the exporters itself
        writer.close()
        store = VictoriaMetricsStore(daemon.url, clock=_clock)
    else:
        daemon = start_prometheus_with(tmp, SERIES)
        store = PrometheusStore(daemon.url, clock=_clock)
    yield store
    store.close()
    daemon.stop()


def test_both_host_label_spellings_name_the_gpus(store) -> None:
    gpus = store.gpus().set_index("uuid")
    assert gpus.loc[["GPU-a", "GPU-b", "GPU-c", "GPU-d"], "hostname"].tolist() == [
        "node-a",
        "node-b",
        "node-b",
        "node-a",
    ]
    assert gpus.loc["GPU-b", "model"] == "NVIDIA A100-SXM4-80GB"
    assert gpus["last_ts"].max() == T0 + (N - 1) * STEP
    got = store.read_samples(hostnames=["node-b"], fields=["gpu_temp_c"])
    assert sorted(set(got["uuid"])) == ["GPU-b", "GPU-c"] and len(got) == 2 * N
    hourly = store.read_window(
        start=T0, end=T0 + N * STEP, fields=["gpu_temp_c"], resolution_s=3600
    )
    assert len(hourly) == 4 * 6 and np.allclose(hourly["gpu_temp_c"], 42.0)


def test_readings_no_gpu_gives_are_read_as_missing(store) -> None:
    """A sentinel or an impossible value kept by the server is screened as ingest screens it
    (``readings``): missing, never 9.2e18 in a mean or a peak."""
    raw = store.read_samples(uuids=["GPU-a"], fields=["mem_temp_c"]).reset_index(drop=True)
    assert len(raw) == N
    bad = raw["mem_temp_c"].isna()
    assert sorted(((raw.loc[bad, "ts"] - T0) / STEP).astype(int)) == sorted(SENTINELS)
    assert (raw.loc[~bad, "mem_temp_c"] == 60.0).all()
    hourly = store.read_window(
        start=T0, end=T0 + N * STEP, uuids=["GPU-a"], fields=["mem_temp_c", "mem_temp_c_max"],
        resolution_s=3600,
    ).reset_index(drop=True)  # fmt: skip
    # the server rolls an hour up with its sentinel in it: that hour's value is missing
    assert hourly["mem_temp_c"].isna().tolist() == [True, False, False, False, False, True]
    assert hourly["mem_temp_c_max"].isna().tolist() == [True, False, False, False, False, True]
    assert (hourly["mem_temp_c"].dropna() == 60.0).all()


def test_pods_and_drivers_come_from_the_exporters_labels(store) -> None:
    pods = store.read_pod_labels(start=T0, end=T0 + N * STEP, step_s=STEP)
    got = [(r.uuid, r.hostname, r.namespace, r.pod, r.container,
            round((r.ts_from - T0) / STEP), round((r.ts_to - T0) / STEP))
           for r in pods.itertuples()]  # fmt: skip
    assert got == [
        ("GPU-c", "node-b", "ml", "train-0", "trainer", 0, 120),
        ("GPU-c", "node-b", "web", "infer-1", "srv", 240, N),
    ]
    drivers = store.read_driver_labels()
    assert drivers[["hostname", "uuid", "driver_version"]].values.tolist() == [
        ["node-b", "GPU-c", "550.54.15"]
    ]


def test_xids_come_from_the_exporters_series(store) -> None:
    ev = store.read_events(start=T0, end=T0 + N * STEP)
    got = sorted((r.uuid, int((r.ts - T0) / STEP), int(r.code), r.detail) for r in ev.itertuples())
    assert got == sorted(
        [
            ("GPU-a", 70, 79, "DCGM_FI_DEV_XID_ERRORS changed from 0 to 79"),
            ("GPU-a", 200, 48, "DCGM_FI_DEV_XID_ERRORS changed from 79 to 48"),
            ("GPU-b", 90, 13, "1 new (DCGM_EXP_XID_ERRORS_COUNT 0 -> 1)"),
            ("GPU-b", 150, 13, "2 new (DCGM_EXP_XID_ERRORS_COUNT 1 -> 3)"),
            ("GPU-c", 100, 63, "1 new (gpuwarden_xid_errors_total 0 -> 1)"),
            ("GPU-c", 130, 63, "2 new (gpuwarden_xid_errors_total 1 -> 3)"),
            ("GPU-c", 130, 63, "2 new (gpuwarden_xid_errors_total 1 -> 3)"),  # two Xids
            ("GPU-c", 240, 63, "1 new (gpuwarden_xid_errors_total 0 -> 1)"),  # after a restart
            ("GPU-d", 120, 31, f"{TIME_UNKNOWN} (DCGM_FI_DEV_XID_ERRORS = 31)"),
        ]
    )
    assert set(ev["kind"]) == {"xid"} and set(ev[ev["uuid"] == "GPU-a"]["hostname"]) == {"node-a"}


def test_an_xid_window_is_half_open(store) -> None:
    at = T0 + 70 * STEP  # the Xid 79 scrape
    assert store.read_events(start=T0, end=at).empty
    assert store.read_events(start=at, end=at + STEP)["code"].tolist() == [79]


def test_the_gpu_list_reaches_back_as_far_as_a_caller_asks(store) -> None:
    """A store lists the GPUs of its lookback; the weekly report asks for weeks more
    (``reach_back``), and each GPU's first sample is then its real one."""
    short = type(store)(store.url, clock=_clock, lookback_s=3600.0)
    try:
        before = short.gpus()["first_ts"].min()
        if isinstance(short, VictoriaMetricsStore):  # Prometheus' look is whole days long
            assert before >= _clock() - 3600.0 - STEP
        short.reach_back(T0 - 3600.0)
        first = short.gpus().set_index("uuid")["first_ts"]
        assert first.loc[["GPU-a", "GPU-b", "GPU-d"]].tolist() == [T0, T0, T0]
    finally:
        short.close()
