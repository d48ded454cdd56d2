"""``gpuwarden plan`` through click's runner, on the vendored openb trace and a real scheduler
database."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.scheduler.state import JobRow, NodeRow, SchedulerDB

OPENB = str(Path(__file__).resolve().parents[1] / "data" / "openb" / "openb_pod_list_default.csv")


def run(*args):
    return CliRunner().invoke(main, ["plan", *args], catch_exceptions=False)


def test_forecast_prints_writes_csv_and_plot(tmp_path):
    r = run("forecast", "--openb", OPENB, "--hours", "24", "--csv", str(tmp_path / "f.csv"),
            "--plot", str(tmp_path / "f.png"), "--no-progress")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "history: 814 hours" in r.output
    assert "queue wait: mean" in r.output
    header = (tmp_path / "f.csv").read_text().splitlines()[0]
    assert header == "hour,any:mean,any:lower,any:upper,queued:mean,queued:lower,queued:upper"
    assert "queued (waiting)" in r.output
    assert len((tmp_path / "f.csv").read_text().splitlines()) == 25
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


def test_forecast_needs_exactly_one_source():
    r = CliRunner().invoke(main, ["plan", "forecast"])
    assert r.exit_code == 1 and "give exactly one demand source" in r.output


def test_should_scale_with_launches(tmp_path):
    launches = tmp_path / "l.toml"
    launches.write_text(
        '[[launch]]\nname = "chat"\ngpu_model = "H100"\ngpus = 8\nstart = 2023-06-20\n'
    )
    r = run("should-scale", "--openb", OPENB, "--current", "any=40", "--current", "H100=0",
            "--launches", str(launches), "--weeks", "6", "--lead-weeks", "1")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "any: add" in r.output and "GPUs now" in r.output  # ~37 x 1.3 > 40
    assert "H100: add 11 GPUs in 2 weeks" in r.output  # 8 x 1.3 from week 3
    r = run("should-scale", "--openb", OPENB, "--current", "any=200", "--growth", "0")
    assert "any: release" in r.output
    # 12 weeks planned on a 4-week forecast: the table says where the forecast ends
    assert "(the forecast covers weeks 0-3; later weeks carry week 3's on" in r.output


@pytest.mark.parametrize("command", ["forecast", "should-scale", "tco"])
def test_a_pod_list_that_is_not_one_is_named(tmp_path, command):
    """A missing file or one without the pod list's columns is one line and exit 1 on every
    command that reads demand (both were tracebacks: the start times were read first)."""
    bad = tmp_path / "pods.csv"
    bad.write_text("a,b\n1,2\n")
    r = CliRunner().invoke(main, ["plan", command, "--openb", str(bad)])
    assert r.exit_code == 1 and f"{bad}: missing columns name, cpu_milli" in r.output, r.output
    r = CliRunner().invoke(main, ["plan", command, "--openb", str(tmp_path / "nothere.csv")])
    assert r.exit_code == 1 and "nothere.csv: No such file" in r.output, r.output


def test_should_scale_asks_for_the_fleet():
    r = CliRunner().invoke(main, ["plan", "should-scale", "--openb", OPENB])
    assert r.exit_code == 1 and "--current MODEL=GPUS" in r.output
    assert "any (demand that names no one GPU model)" in r.output
    r = CliRunner().invoke(main, ["plan", "should-scale", "--openb", OPENB, "--current", "any"])
    assert r.exit_code == 1 and "write MODEL=GPUS" in r.output


def test_bad_launches_file_is_one_line(tmp_path):
    bad = tmp_path / "l.toml"
    bad.write_text('[[launch]]\nname = "x"\n')
    r = CliRunner().invoke(main, ["plan", "should-scale", "--openb", OPENB, "--current",
                                  "any=1", "--launches", str(bad)])  # fmt: skip
    assert r.exit_code == 1
    assert "launch 1: missing 'gpu_model'" in r.output and "Traceback" not in r.output


def test_should_scale_from_a_scheduler_database(tmp_path):
    db = SchedulerDB(tmp_path / "s.db")
    db.upsert_node(NodeRow("n1", 64000, 1 << 18, [{"index": 0, "model": "A100"}], None, 0))
    spec = {"tasks": 1, "gpus_per_task": 4, "gpu_milli": 1000}
    for i in range(40):  # a job of 4 GPUs every 12 h for 20 days, each running 10 h
        t = 1.7e9 + i * 43200
        db.insert_job(JobRow(f"j{i}", i, "ml", "train", spec, "succeeded", 0, None, t, t,
                             t + 600, t + 36000, placement=[{"node": "n1"}]))  # fmt: skip
    db.close()
    r = run("should-scale", "--db", str(tmp_path / "s.db"), "--current", "A100=64")
    assert r.exit_code == 0, r.output
    assert "A100: release" in r.output


def test_tco_prints_break_even_split_and_charts(tmp_path):
    r = run("tco", "--gpu", "H100", "--chart-dir", str(tmp_path), "--openb", OPENB)
    assert r.exit_code == 0, r.output
    assert "break-even own vs cloud on-demand: 38%" in r.output
    assert (
        "guideline (owning is 40-60% cheaper above 70% use): own at 70% is 44% cheaper" in r.output
    )
    assert "split: own or rent long-term" in r.output
    assert (tmp_path / "tco-H100.png").is_file()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpu", "B200"], "no prices for B200"),
        (["--prices", "/nonexistent.toml"], "cannot read"),
        (["--openb", OPENB, "--demand-model", "H100"], "no demand for 'H100'"),
    ],
)
def test_tco_errors(tmp_path, args, message):
    r = CliRunner().invoke(main, ["plan", "tco", "--chart-dir", str(tmp_path), *args])
    assert r.exit_code == 1 and message in r.output


def test_tco_with_a_users_price_file(tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text(
        "[X.own]\npurchase_usd = 10000\ndepreciation_years = 5\nmaintenance_share_per_year = 0\n"
        "power_busy_w = 1000\npower_idle_w = 0\npue = 1.0\nelectricity_usd_per_kwh = 0.1\n"
        "space_usd_per_gpu_month = 0\nstaff_usd_per_gpu_year = 0\n"
        "[X.bare_metal]\nusd_per_gpu_hour = 0.6\n"
        "[X.cloud]\non_demand = 1.0\nreserved = 0.7\nspot = 0.4\n"
    )
    r = run("tco", "--prices", str(prices), "--chart-dir", str(tmp_path))
    assert r.exit_code == 0, r.output
    # 2,000 a year of depreciation + 876 u of energy = 8,760 u of on-demand: u = 25.4%
    assert "break-even own vs cloud on-demand: 25%" in r.output
    assert "break-even bare metal vs cloud on-demand: 60%" in r.output
    assert (tmp_path / "tco-X.png").is_file()
