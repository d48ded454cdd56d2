"""`gpuwarden serve` through click's runner: --once over a simulated fleet, dry-run hooks, errors."""

import stat
import time

from click.testing import CliRunner

from gpuwarden.alerts.audit import AuditLog
from gpuwarden.alerts.base import RiskAssessment
from gpuwarden.serve.cli import serve
from gpuwarden.telemetry import GpuId

# the fleet starts a minute ago, so its first sample is within the hard-signal lookback
SIM = f"sim://?nodes=2&gpus=2&seed=3&step=60&start={int(time.time()) - 60}"


def all_at_risk(store, at):
    """An assessor for --assess: every GPU in the store at 0.9."""
    return [
        RiskAssessment(GpuId(r.hostname, int(r.gpu), r.uuid), at, 0.9, reasons=("test model",))
        for r in store.gpus().itertuples()
    ]


def quiet(store, at):
    """An assessor for --assess that knows nothing: only the hard signals can decide."""
    return []


SEEN_AT: list[float] = []


def recording(store, at):
    """An assessor for --assess that notes the time it is asked to score at."""
    SEEN_AT.append(at)
    return []


def fake_scontrol(tmp_path):
    """An scontrol that shows every node idle and healthy (and fails on anything else)."""
    script = tmp_path / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1 $2 $3" = "-o show node" ]; then\n'
        '  echo "NodeName=$4 AvailableFeatures=gpuwarden_healthy ActiveFeatures=gpuwarden_healthy State=IDLE"\n'
        "  exit 0\nfi\nexit 1\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def run(tmp_path, *args):
    base = ["--once", "--collector", SIM, "--store", f"sqlite:///{tmp_path / 'g.db'}"]
    return CliRunner().invoke(serve, [*base, "--audit", str(tmp_path / "audit.db"), *args])


def test_once_scores_the_fleet(tmp_path):
    r = run(tmp_path)
    assert r.exit_code == 0, r.output
    assert r.output.strip().endswith("4 GPUs scored, 0 changed")


def test_once_with_a_model_and_a_dry_run_slurm_hook(tmp_path):
    scontrol = fake_scontrol(tmp_path)
    r = run(
        tmp_path,
        "--assess",
        "test_serve_cli:all_at_risk",
        "--tagger",
        f"slurm://?scontrol={scontrol}",
        "--dry-run",
        "--breaker-share",
        "1",
    )
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert lines[-1] == "4 GPUs scored, 4 changed"
    dry = [ln for ln in lines if ln.startswith("[dry-run] slurm:")]
    assert len(dry) == 2 and all("AvailableFeatures= ActiveFeatures=" in ln for ln in dry)
    changed = [ln for ln in lines if " ok -> at-risk (risk 0.90; test model)" in ln]
    assert len(changed) == 4
    rows = AuditLog(tmp_path / "audit.db").rows(hook="slurm")
    assert len(rows) == 2 and all(r.result.startswith("dry-run: would run") for r in rows)


def test_user_mistakes_are_one_line(tmp_path):
    r = run(tmp_path, "--tagger", "nope://")
    assert r.exit_code == 1 and "Error: no scheduler hook for 'nope://'" in r.output
    r = run(tmp_path, "--assess", "no_such_module:f")
    assert r.exit_code == 1 and "cannot load assessor 'no_such_module:f'" in r.output
    r = run(tmp_path, "--enter-at", "0.3", "--exit-below", "0.5")
    assert r.exit_code == 1 and "exit_below <= enter_at" in r.output
    assert "Traceback" not in r.output
    r = run(tmp_path, "--at", "yesterday")
    assert r.exit_code == 2 and "Invalid value for --at: 'yesterday' is not a time" in r.output
    r = CliRunner().invoke(serve, ["--no-collect", "--at", "0", "--store", "sqlite:///x.db"])
    assert r.exit_code == 2 and "--at scores one round: give it with --once" in r.output


def test_once_at_scores_at_the_time_given(tmp_path):
    SEEN_AT.clear()
    r = run(tmp_path, "--assess", "test_serve_cli:recording", "--at", "2026-01-02T03:00:00Z")
    assert r.exit_code == 0, r.output
    assert SEEN_AT == [1767322800.0]  # calendar.timegm((2026, 1, 2, 3, 0, 0))


def test_hourly_rounds_still_see_a_hard_signal_from_between_them(tmp_path):
    """With --interval 3600 a fatal Xid 40 minutes old happened after the previous round: it
    must still make the GPU unhealthy (the hard-signal lookback covers the interval)."""
    from gpuwarden.store.sqlite import SqliteStore
    from gpuwarden.telemetry import Batch, Event, Sample

    now = time.time()
    gpu = GpuId("n1", 0, "GPU-0", model="H100-80GB")
    store = SqliteStore(tmp_path / "g.db")
    for k in range(7):  # a reading every 10 minutes for the last hour
        ts = now - 3600 + 600 * k
        store.write_batch(Batch(ts, (Sample(ts, gpu, {"gpu_temp_c": 50.0}),)))
    store.write_events([Event(now - 2400, gpu, "xid", 79, "fell off the bus")])
    store.close()
    args = ["--once", "--no-collect", "--interval", "3600", "--assess", "test_serve_cli:quiet"]
    r = CliRunner().invoke(
        serve,
        [*args, "--store", f"sqlite:///{tmp_path / 'g.db'}", "--audit", str(tmp_path / "a.db")],
    )
    assert r.exit_code == 0, r.output
    assert "ok -> unhealthy" in r.output and "Xid 79" in r.output
