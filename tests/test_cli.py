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
    assert " fp64 " in lines["power_w"] and " 0..2xTDP " in lines["power_w"]
    assert " int64 " in lines["mem_temp_c"] and " -10..130, HBM only " in lines["mem_temp_c"]
    assert " 1|2|4|8|16|32 " in lines["pcie_link_width"] and " >= 0 " in lines["energy_mj"]


def test_config_shows_environment_override():
    result = run("config", env={"GPUWARDEN_INTERVAL_S": "7"})
    assert result.exit_code == 0
    assert "interval_s = 7.0" in result.output


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
