"""The CLI through click's runner: clear one-line errors, never a traceback for a user mistake."""

from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.telemetry import FIELDS


def run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env or {}, catch_exceptions=False)


def test_fields_lists_every_catalogue_entry():
    result = run("fields")
    assert result.exit_code == 0
    for f in FIELDS:
        assert f.name in result.output and f.dcgm in result.output
    lines = {line.split()[0]: line for line in result.output.splitlines()}
    assert result.output.startswith("FIELD ") and "DCGM-EXPORTER METRIC" in lines["FIELD"]
    assert " fp64 " in lines["power_w"] and " 0..2xTDP " in lines["power_w"]
    assert " int64 " in lines["mem_temp_c"] and " -10..130, HBM only " in lines["mem_temp_c"]
    assert " 1|2|4|8|16|32 " in lines["pcie_link_width"] and " >= 0 " in lines["energy_mj"]


def test_config_shows_environment_override():
    result = run("config", env={"GPUWARDEN_INTERVAL_S": "7"})
    assert result.exit_code == 0
    assert "interval_s = 7.0" in result.output


def test_config_masks_passwords_in_urls_as_logs_and_metrics_do(tmp_path):
    from gpuwarden.collectors.dcgm import DcgmCollector

    collector = "dcgm+http://scraper:s3cr3t-pw@n1:9400/metrics,ops:0th3r-pw@n2/metrics"
    store = "influxdb://db:8086?bucket=gpu&token=t0k3n-value"
    result = run("config", env={"GPUWARDEN_COLLECTOR": collector, "GPUWARDEN_STORE": store})
    assert result.exit_code == 0
    for secret in ("s3cr3t-pw", "0th3r-pw", "t0k3n-value"):
        assert secret not in result.output
    assert "collector = 'dcgm+http://scraper:***@n1:9400/metrics,ops:***@n2/metrics'" in (
        result.output
    )
    assert "store = 'influxdb://db:8086?bucket=gpu&token=***'" in result.output
    # the same masking as the collector's own URL (logs, /metrics' collector label)
    opened = DcgmCollector.from_url(collector)
    assert "s3cr3t-pw" not in opened.url and "scraper:***@n1:9400" in opened.url
    opened.close()


def test_broken_config_file_is_one_line(tmp_path):
    bad = tmp_path / "gw.toml"
    bad.write_text("no_such_setting = 1\n")
    result = run("--config", str(bad), "fields")
    assert result.exit_code == 1
    assert "unknown setting 'no_such_setting'" in result.output
    assert "Traceback" not in result.output


def test_unknown_collector_scheme(tmp_path):
    result = run(
        "collect",
        "--collector",
        "gopher://x",
        "--store",
        str(tmp_path / "s.db"),
        "--iterations",
        "1",
    )
    assert result.exit_code == 1
    assert "no collector for 'gopher://x'" in result.output


def test_collect_without_nvml_says_so_in_one_line(tmp_path):
    # this machine has no NVIDIA driver: the real pynvml raises NVMLError_LibraryNotFound
    result = run(
        "collect", "--collector", "nvml://", "--store", str(tmp_path / "s.db"), "--iterations", "1"
    )
    assert result.exit_code == 1
    assert "NVML" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_a_bounded_collect_that_read_nothing_exits_non_zero(tmp_path):
    """An unreachable dcgm-exporter is a problem of the batch, not an error of the collector:
    the closing line said "0 collector errors" and the exit status 0 for a run that read
    nothing."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run("collect", "--collector", f"dcgm+http://127.0.0.1:{port}/metrics",
                 "--store", str(tmp_path / "s.db"), "--iterations", "1")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "1 collection: 0 samples, 0 events, 0 collector errors, 1 collector problem" in (
        result.output
    )
    assert "no sample or event collected" in result.output


def test_a_bounded_collect_of_events_only_is_not_a_failure(tmp_path):
    """kmsg:// gives events, never samples: a bounded run that stored its Xids (with a
    problem: their GPU unknown) once exited 1, "no sample collected"."""
    log = tmp_path / "kern.log"
    log.write_text(
        "2026-01-01T00:00:00+0000 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, "
        "GPU has fallen off the bus.\n"
    )
    result = run("collect", "--collector", f"kmsg://{log}?hostname=node7",
                 "--store", str(tmp_path / "s.db"), "--iterations", "1")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "1 collection: 0 samples, 1 event, 0 collector errors" in result.output


def test_collect_sim_into_store(tmp_path):
    db = tmp_path / "s.db"
    result = run(
        "collect",
        "--collector",
        "sim://?nodes=1&gpus=2&seed=3",
        "--store",
        f"sqlite:///{db}",
        "--iterations",
        "3",
        "--interval",
        "0",
    )
    assert result.exit_code == 0, result.output
    assert "3 collections: 6 samples" in result.output

    from gpuwarden.store import open_store

    store = open_store(f"sqlite:///{db}")
    frame = store.read_samples()
    store.close()
    assert len(frame) == 6 and frame["uuid"].nunique() == 2


def test_collect_interval_zero_is_zero_not_the_default(tmp_path, monkeypatch):
    from gpuwarden.collect import CollectLoop

    intervals: list[float] = []
    real_run = CollectLoop.run

    def run_and_note(self, iterations=None):
        intervals.append(self.interval_s)
        return real_run(self, iterations)

    monkeypatch.setattr(CollectLoop, "run", run_and_note)
    result = run(
        "collect",
        "--collector",
        "sim://?nodes=1&gpus=1&seed=3",
        "--store",
        f"sqlite:///{tmp_path / 's.db'}",
        "--iterations",
        "2",
        "--interval",
        "0",
    )
    assert result.exit_code == 0, result.output
    assert intervals == [0.0]  # 0 asked for: no wait, not the 15 s setting


def test_ingest_needs_a_file(tmp_path):
    result = run("ingest", "--store", str(tmp_path / "s.db"))
    assert result.exit_code == 2
    assert "at least one of --telemetry" in result.output


def test_ingest_bad_rows_exit_nonzero_but_store_good_rows(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text(
        "timestamp,hostname,gpu,UUID,modelName,DCGM_FI_DEV_GPU_TEMP\n"
        "2026-01-01T00:00:00Z,n1,0,GPU-aaaa,NVIDIA H100 80GB HBM3,40\n"
        "not-a-time,n1,0,GPU-aaaa,NVIDIA H100 80GB HBM3,41\n"
        "2026-01-01T00:01:00Z,n1,0,GPU-aaaa,NVIDIA H100 80GB HBM3,42\n"
    )
    db = tmp_path / "s.db"
    result = run("ingest", "--store", str(db), "--telemetry", str(csv), "--no-progress")
    assert result.exit_code == 1
    assert f"{csv}:3:" in result.output
    assert "stored 2 samples" in result.output

    from gpuwarden.store import open_store

    store = open_store(str(db))
    assert list(store.read_samples()["gpu_temp_c"]) == [40.0, 42.0]
    store.close()


def test_settings_fill_collector_url_parameters():
    from gpuwarden.cli import _collector_url
    from gpuwarden.config import load_settings

    cfg = load_settings(None, environ={"GPUWARDEN_SMI_TIMEOUT_S": "3", "GPUWARDEN_HOSTNAME": "n7"})
    assert _collector_url("smi://", cfg) == "smi://?timeout=3.0&hostname=n7"
    assert _collector_url("smi://?timeout=9", cfg) == "smi://?timeout=9&hostname=n7"
    assert (
        _collector_url("dcgm+http://a:9400/metrics", cfg)
        == "dcgm+http://a:9400/metrics?timeout=5.0"
    )


REAL_SMI = __import__("pathlib").Path(__file__).parent / "data" / "smi" / "real"


def test_ingest_smi_csv_stores_a_real_capture_with_its_time_host_and_driver(tmp_path):
    db = tmp_path / "s.db"
    path = REAL_SMI / "h100_sxm_r590_query_gpu_all_load.csv"
    result = run("ingest", "--store", str(db), "--smi-csv", str(path), "--host", "node7")
    assert result.exit_code == 0, result.output
    assert result.output == (f"{path}: stored 1 sample (nvidia-smi CSV, 1 row, host node7)\n")

    from gpuwarden.store import open_store

    store = open_store(str(db))
    try:
        frame = store.read_samples()
        nodes = store.read_nodes()
    finally:
        store.close()
    (row,) = frame.to_dict("records")
    assert (row["hostname"], row["gpu"], row["model"]) == ("node7", 0, "NVIDIA H100 80GB HBM3")
    assert row["ts"] == 1784016773.353  # 2026/07/14 08:12:53.353 read as UTC
    assert (row["power_w"], row["fb_used_mib"], row["sm_clock_mhz"]) == (631.95, 19818, 1980)
    assert row["gpu_util_pct"] == 100 and row["remapped_rows_pending"] == 0
    assert row["retired_pages_sbe"] != row["retired_pages_sbe"]  # [N/A]: NaN, never 0
    assert list(nodes["driver_version"]) == ["590.48.01"]


def test_ingest_smi_csv_bad_rows_are_listed_and_the_good_ones_stored(tmp_path):
    header, row = (REAL_SMI / "rtx4080s_r595_query_gpu_all_idle.csv").read_text().splitlines()
    later = row.replace("2026/06/26 11:59:44.226", "2026/06/26 12:00:44.226")
    broken = row.replace("2026/06/26 11:59:44.226", "26.6.2026")
    log = tmp_path / "log.csv"
    log.write_text("\n".join([header, row, broken, later, "truncated, row"]) + "\n")
    db = tmp_path / "s.db"
    result = run("ingest", "--store", str(db), "--smi-csv", str(log), "--host", "pc1")
    assert result.exit_code == 1
    assert f"{log}: stored 2 samples (nvidia-smi CSV, 4 rows, host pc1)" in result.output
    assert f"{log}:3: timestamp '26.6.2026' is not" in result.output
    assert f"{log}:5: 2 cells, the header has 202" in result.output
    assert "2 bad rows skipped (the good rows were stored)" in result.output

    from gpuwarden.store import open_store

    store = open_store(str(db))
    try:
        assert list(store.read_samples()["gpu_temp_c"]) == [43.0, 43.0]
    finally:
        store.close()


def test_ingest_smi_csv_without_a_header_stores_nothing(tmp_path):
    log = tmp_path / "noheader.csv"
    log.write_text("2026/06/26 11:59:44.226, 0, 43\n")
    result = run("ingest", "--store", str(tmp_path / "s.db"), "--smi-csv", str(log))
    assert result.exit_code == 1
    assert "header naming timestamp" in result.output and "Traceback" not in result.output


def test_a_reading_command_on_a_store_that_is_not_there_says_so(tmp_path):
    """`summary --store typo.db` created an empty file there and said the fleet had no GPU."""
    typo = tmp_path / "typo.db"
    for argv in (["summary"], ["score"], ["report", "--out", str(tmp_path / "r")], ["evaluate"]):
        got = CliRunner().invoke(main, [*argv, "--store", f"sqlite:///{typo}"])
        assert got.exit_code == 1, (argv, got.output)
        assert f"no store at {typo}" in got.output, got.output
        assert not typo.exists()
