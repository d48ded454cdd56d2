"""The systemd units (``systemd-analyze verify``) and the Dockerfile's promises (static checks:
no container is built here, there is no Docker daemon)."""

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("gpuwarden-*.*"))
REQUIRED = {"collect", "serve", "agent", "scheduler"}


def _analyze() -> str:
    """systemd-analyze's path: a skip on a developer's machine without it, a failure under CI."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("systemd-analyze is not installed (apt-get install -y systemd)")
        pytest.skip("systemd-analyze is not installed")
    return analyze


def test_a_unit_for_each_long_running_command():
    names = {p.name.removeprefix("gpuwarden-").removesuffix(".service") for p in UNITS}
    assert REQUIRED <= names


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_units_verify_cleanly(unit, tmp_path):
    analyze = _analyze()
    # verify checks that ExecStart's program exists: point it at this interpreter's gpuwarden
    gpuwarden = Path(sys.executable).with_name("gpuwarden")
    assert gpuwarden.exists(), gpuwarden
    text = unit.read_text().replace("/usr/local/bin/gpuwarden", str(gpuwarden))
    copy = tmp_path / unit.name
    copy.write_text(text)
    if unit.suffix == ".timer":  # a timer is verified with the service it starts
        service = unit.with_suffix(".service")
        (tmp_path / service.name).write_text(
            service.read_text().replace("/usr/local/bin/gpuwarden", str(gpuwarden))
        )
    done = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True)
    # verify exits 0 on unknown keys and bad values, and says so: any line is a finding
    assert done.returncode == 0 and not done.stderr.strip() and not done.stdout.strip(), (
        done.stdout + done.stderr
    )
    if unit.suffix == ".service":
        commands = re.findall(r"^ExecStart=/usr/local/bin/gpuwarden (\S+)", unit.read_text(), re.M)
        assert commands, "ExecStart runs gpuwarden"


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((ROOT / "deploy" / "systemd" / name).read_text())
    return parser


def test_the_report_timer_runs_weekly_and_catches_up():
    timer = _unit("gpuwarden-report.timer")
    assert timer["Timer"]["OnCalendar"].startswith("Mon ")
    assert timer["Timer"]["Persistent"] == "true"
    assert timer["Timer"]["Unit"] == "gpuwarden-report.service"
    service = _unit("gpuwarden-report.service")
    assert service["Service"]["Type"] == "oneshot"
    assert service["Service"]["ExecStart"].endswith("gpuwarden report")
    # secrets from a root-only environment file, never on the command line
    assert "KEY" not in service["Service"]["ExecStart"]


def test_systemd_parses_the_report_calendar():
    calendar = _unit("gpuwarden-report.timer")["Timer"]["OnCalendar"]
    out = subprocess.run(
        [_analyze(), "calendar", calendar], capture_output=True, text=True, check=True
    )
    assert "Next elapse: Mon" in out.stdout


def test_a_broken_unit_is_caught(tmp_path):
    analyze = _analyze()
    bad = tmp_path / "bad.service"
    bad.write_text("[Service]\nType=exec\nExecStart=/bin/true\nProtectSystm=yes\n")
    done = subprocess.run([analyze, "verify", str(bad)], capture_output=True, text=True)
    assert "Unknown key 'ProtectSystm'" in done.stderr


def test_the_dockerfile_is_multi_stage_pinned_and_non_root():
    text = (ROOT / "Dockerfile").read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    stages = [ln for ln in lines if ln.startswith("FROM ")]
    assert len(stages) >= 2, "multi-stage"
    [base] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base
    assert all(not s.split()[1].endswith(":latest") for s in stages)
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    # the runtime stage gets wheels, not the build tools or the sources
    runtime = text.split(" AS runtime", 1)[1]
    assert "COPY --from=build /wheels" in runtime and "COPY gpuwarden" not in runtime
    # the UID the Kubernetes manifests run as
    assert "USER 10001:10001" in text
    manifests = (ROOT / "deploy" / "kubernetes" / "base" / "serve-deployment.yaml").read_text()
    assert "runAsUser: 10001" in manifests


def test_the_xids_unit_follows_the_journal_as_its_reader_group():
    """gpuwarden-xids reads the journal (files root:systemd-journal, 0640) as a member of the
    group, not as root, and keeps its cursor in its state directory."""
    unit = _unit("gpuwarden-xids.service")["Service"]
    assert unit["User"] == "gpuwarden" and unit["SupplementaryGroups"] == "systemd-journal"
    start = unit["ExecStart"].split()
    url = start[start.index("--collector") + 1]
    assert url.startswith("journal://?") and "cursor_file=/var/lib/gpuwarden/" in url
    assert unit["StateDirectory"] == "gpuwarden"
