"""The weekly schedule: deploy/systemd/gpuwarden-report.{service,timer}, checked by systemd's own
parser (systemd-analyze, Debian's systemd package) where it is installed."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((UNITS / name).read_text())
    return parser


def test_the_timer_starts_the_report_weekly_and_catches_up():
    timer = unit("gpuwarden-report.timer")
    assert timer["Timer"]["OnCalendar"].startswith("Mon ")
    assert timer["Timer"]["Persistent"] == "true"
    assert timer["Timer"]["Unit"] == "gpuwarden-report.service"
    service = unit("gpuwarden-report.service")
    assert service["Service"]["Type"] == "oneshot"
    assert service["Service"]["ExecStart"].endswith("gpuwarden report")
    # secrets from a root-only environment file, never on the command line
    assert "KEY" not in service["Service"]["ExecStart"]


def _analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("systemd-analyze missing (Debian package systemd); CI=true may not skip")
        pytest.skip("systemd-analyze not installed")
    return found


def test_systemd_parses_the_calendar():
    out = subprocess.run([_analyze(), "calendar", unit("gpuwarden-report.timer")["Timer"]["OnCalendar"]],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "Next elapse: Mon" in out


def test_systemd_verifies_the_units(tmp_path):
    # verify wants ExecStart's binary to exist: point it at a stand-in
    exe = tmp_path / "gpuwarden"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    for name in ("gpuwarden-report.service", "gpuwarden-report.timer"):
        (tmp_path / name).write_text(
            (UNITS / name).read_text().replace("/usr/local/bin/gpuwarden", str(exe))
        )
    done = subprocess.run([_analyze(), "verify", "--man=no", str(tmp_path / "gpuwarden-report.timer"),
                           str(tmp_path / "gpuwarden-report.service")], capture_output=True, text=True)  # fmt: skip
    problems = [ln for ln in done.stderr.splitlines() if "gpuwarden-report" in ln]
    assert done.returncode == 0 and not problems, done.stderr
