"""GPU-hours per namespace and pod from dcgm-exporter's pod labels, read from a real Prometheus
(Debian's, backfilled by promtool) and a real VictoriaMetrics."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.errors import InputError
from gpuwarden.scheduler.billing import tenant_totals
from gpuwarden.scheduler_hooks.k8s_billing import device_weight, gpu_hours
from gpuwarden.store._series import Series
from gpuwarden.store.prometheus import PrometheusStore

pytestmark = pytest.mark.integration

_path = Path(__file__).parents[1] / "store" / "tsdb_servers.py"
_spec = importlib.util.spec_from_file_location("tsdb_servers", _path)
assert _spec is not None and _spec.loader is not None
tsdb = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("tsdb_servers", tsdb)
_spec.loader.exec_module(tsdb)

T0 = 1_764_547_200  # 2025-12-01 00:00 UTC, on an hour
STEP_S = 30  # dcgm-exporter scraped every 30 s: 120 samples a full hour


def gpu(uuid, start_h, end_h, *, ns="", pod="", gpu_i_id="", profile="", host="gpu-1",
        renamed=False):  # fmt: skip
    labels = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "UUID": uuid, "Hostname": host}
    if ns:
        pre = "exported_" if renamed else ""  # Prometheus renamed them (honor_labels: false)
        labels |= {f"{pre}namespace": ns, f"{pre}pod": pod, f"{pre}container": "main"}
    if gpu_i_id:
        labels |= {"GPU_I_ID": gpu_i_id, "GPU_I_PROFILE": profile}
    ts = np.arange(T0 + start_h * 3600, T0 + end_h * 3600, STEP_S, dtype=np.int64) * 1000
    return Series(labels, ts, np.full(ts.size, 87.0))


SERIES = [
    gpu("GPU-a", 0, 2, ns="team-a", pod="train-0"),  # a whole GPU for 2 h
    gpu("GPU-a", 2, 3),  # then idle: nobody's
    gpu("GPU-b", 0, 1.5, ns="team-b", pod="infer-0"),  # 1.5 h, then idle
    gpu("GPU-b", 1.5, 3),
    gpu("GPU-c", 0, 1, ns="team-b", pod="mig-0", gpu_i_id="1", profile="3g.40gb"),  # 3/7 GPU
    gpu("GPU-c", 0, 3, ns="team-a", pod="mig-1", gpu_i_id="2", profile="1g.10gb"),  # 1/7 GPU
    gpu("GPU-d", 1, 2, ns="team-a", pod="share-0"),  # two pods time-slice one GPU for 1 h
    gpu("GPU-d", 1, 2, ns="team-b", pod="share-1"),
    gpu("GPU-e", 0, 1, ns="team-c", pod="renamed-0", renamed=True),
]
EXPECTED = {
    ("team-a", "mig-1"): 3 / 7,
    ("team-a", "share-0"): 0.5,
    ("team-a", "train-0"): 2.0,
    ("team-b", "infer-0"): 1.5,
    ("team-b", "mig-0"): 3 / 7,
    ("team-b", "share-1"): 0.5,
    ("team-c", "renamed-0"): 1.0,
}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    daemon = tsdb.start_prometheus_with(tmp_path_factory.mktemp("prometheus"), SERIES)
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def victoriametrics(tmp_path_factory):
    from gpuwarden.store import _series

    daemon = tsdb.start_victoriametrics(tmp_path_factory.mktemp("vm"))
    import httpx

    body = "".join(_series.openmetrics(SERIES)).replace("# EOF\n", "")
    r = httpx.post(f"{daemon.url}/api/v1/import/prometheus", content=body)
    assert r.status_code == 204, r.text
    httpx.get(f"{daemon.url}/internal/force_flush")
    yield daemon
    daemon.stop()


def check(url):
    store = PrometheusStore(url)
    try:
        rows = gpu_hours(store, T0, T0 + 3 * 3600)
        got = {(r.tenant, r.job_id): r.gpu_hours for r in rows}
        assert got.keys() == EXPECTED.keys()
        for key, hours in EXPECTED.items():
            assert got[key] == pytest.approx(hours, abs=1e-9), key
        assert tenant_totals(rows) == {
            "team-a": round(2.0 + 0.5 + 3 / 7, 6),
            "team-b": round(1.5 + 0.5 + 3 / 7, 6),
            "team-c": 1.0,
        }
        # the first hour alone; a stated scrape interval gives the same
        first = gpu_hours(store, T0, T0 + 3600, scrape_interval_s=STEP_S)
        assert {(r.tenant, r.job_id): r.gpu_hours for r in first} == pytest.approx(
            {
                ("team-a", "mig-1"): 1 / 7,
                ("team-a", "train-0"): 1.0,
                ("team-b", "infer-0"): 1.0,
                ("team-b", "mig-0"): 3 / 7,
                ("team-c", "renamed-0"): 1.0,
            }
        )
    finally:
        store.close()


def test_gpu_hours_per_pod_from_prometheus(prometheus):
    check(prometheus.url)


def test_gpu_hours_per_pod_from_victoriametrics(victoriametrics):
    check(victoriametrics.url)


def test_billing_command_prints_namespaces_and_csv(prometheus, tmp_path):
    out = tmp_path / "bill.csv"
    argv = ["k8s", "billing", "--store", f"prometheus+{prometheus.url}",
            "--since", str(T0), "--until", str(T0 + 3 * 3600), "--csv", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    assert "team-a" in result.output and "2.928571" in result.output  # 2 + 0.5 + 3/7
    assert result.output.startswith("NAMESPACE\tGPU_HOURS\n")
    lines = out.read_text().splitlines()
    assert lines[0] == "tenant,job_id,name,gpu_hours"
    assert "team-a,train-0,train-0,2.000000" in lines
    bad = CliRunner().invoke(main, [*argv[:4], "--since", "10", "--until", "20"])
    assert bad.exit_code == 1 and "at least one hour" in bad.output
    # the window in the forms `gpuwarden billing` takes (it took Unix seconds only)
    iso = ["--since", "2025-12-01", "--until", "2025-12-01T03:00:00Z"]
    dated = CliRunner().invoke(main, [*argv[:4], *iso])
    assert dated.exit_code == 0 and "2.928571" in dated.output, dated.output
    backwards = CliRunner().invoke(
        main, [*argv[:4], "--since", "2025-12-02", "--until", "2025-12-01"]
    )
    assert backwards.exit_code == 2 and "starts after it ends" in backwards.output
    empty = CliRunner().invoke(main, [*argv[:4], "--since", "2020-01-01", "--until", "2020-01-02"])
    assert empty.exit_code == 0 and "no pod used a GPU in the window" in empty.output, empty.output
    word = CliRunner().invoke(main, [*argv[:4], "--since", "yesterday"])
    assert word.exit_code == 2 and "'yesterday' is not a time" in word.output


def test_mig_weights_follow_the_bundled_scheduler():
    assert device_weight("") == 1.0
    assert device_weight("3g.40gb") == 3 / 7 and device_weight("1g.5gb+me") == 1 / 7
    with pytest.raises(InputError, match="unknown MIG profile"):
        device_weight("9g.1tb")
