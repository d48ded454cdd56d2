"""`gpuwarden dashboard` (gpuwarden/dashboard/cli.py): the command line it runs, its errors, and a
real server started and stopped through it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from known_fleet import require_extra

from gpuwarden.dashboard._api import scheduler_api, serve_api
from gpuwarden.dashboard._browser import _free_port
from gpuwarden.dashboard.cli import APP, check_exposure, dashboard, streamlit_argv, wait_ready
from gpuwarden.errors import ConfigError, GpuwardenError

require_extra("streamlit", "altair")


def test_streamlit_argv_serves_the_app_headless_on_the_address():
    argv = streamlit_argv("sqlite:///x.db", "127.0.0.1", 8599)
    assert argv[:5] == [sys.executable, "-m", "streamlit", "run", str(APP)]
    assert "--server.address=127.0.0.1" in argv and "--server.port=8599" in argv
    assert "--server.headless=true" in argv and "--browser.gatherUsageStats=false" in argv
    assert argv[-3:] == ["--", "--store", "sqlite:///x.db"]


def test_service_urls_go_to_the_app_and_tokens_come_from_the_environment():
    extra = ("--serve-url", "http://127.0.0.1:9401", "--scheduler-url", "http://s:8477")
    argv = streamlit_argv("sqlite:///x.db", "127.0.0.1", 8599, extra=extra)
    assert argv[-7:] == ["--", "--store", "sqlite:///x.db", *extra]
    env = {"GPUWARDEN_SERVE_URL": "http://env:1", "GPUWARDEN_SERVE_TOKEN": "tok",
           "GPUWARDEN_SCHEDULER_URL": "http://env:2"}  # fmt: skip
    serve = serve_api(list(argv[-7:]), env)
    assert serve is not None and (serve.base_url, serve.token) == ("http://127.0.0.1:9401", "tok")
    assert "tok" not in repr(serve)  # a token never shows up in a repr or a log line
    sched = scheduler_api([], env)
    assert sched is not None and (sched.base_url, sched.token) == ("http://env:2", None)
    assert serve_api([], {}) is None and scheduler_api(["--scheduler-url=http://x:1"], {})


def test_a_bad_listen_address_is_one_line():
    result = CliRunner().invoke(dashboard, ["--store", "x.db", "--listen", "nowhere"])
    assert result.exit_code == 1
    assert "HOST:PORT" in result.output and "Traceback" not in result.output


NO_SECRETS = {"GPUWARDEN_DASHBOARD_PASSWORD": None, "GPUWARDEN_SCHEDULER_TOKEN": None,
              "GPUWARDEN_SERVE_TOKEN": None}  # fmt: skip


@pytest.mark.parametrize("listen", ["0.0.0.0:8599", ":8599", "10.1.2.3:8599", "[::]:8599",
                                    "dash.example.org:8599"])  # fmt: skip
def test_a_token_is_not_served_to_the_network_without_a_password(listen):
    env = {**NO_SECRETS, "GPUWARDEN_SCHEDULER_TOKEN": "admin-t0ken"}
    result = CliRunner().invoke(dashboard, ["--store", "x.db", "--listen", listen], env=env)
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert "refusing to serve" in line and "GPUWARDEN_SCHEDULER_TOKEN is set" in line
    assert "set GPUWARDEN_DASHBOARD_PASSWORD, or pass --insecure-no-password" in line
    assert "admin-t0ken" not in line


def test_what_may_listen_beyond_loopback():
    token = {"GPUWARDEN_SERVE_TOKEN": "t"}
    for host in ("127.0.0.1", "127.0.1.1", "localhost", "::1"):  # loopback: always
        check_exposure(host, token)
    check_exposure("0.0.0.0", {})  # no token to leak
    check_exposure("0.0.0.0", {**token, "GPUWARDEN_DASHBOARD_PASSWORD": "pw"})
    check_exposure("0.0.0.0", token, insecure=True)
    both = {**token, "GPUWARDEN_SCHEDULER_TOKEN": "s"}
    with pytest.raises(ConfigError, match="on every address .* GPUWARDEN_SCHEDULER_TOKEN and "
                       "GPUWARDEN_SERVE_TOKEN are set, so anyone .* would use them"):  # fmt: skip
        check_exposure("0.0.0.0", both)
    with pytest.raises(ConfigError, match="on 192.168.0.5 "):
        check_exposure("192.168.0.5", {**token, "GPUWARDEN_DASHBOARD_PASSWORD": ""})


def test_wait_ready_names_a_server_that_exited():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    with pytest.raises(GpuwardenError, match="exited with status 3"):
        wait_ready(proc, "http://127.0.0.1:9", timeout_s=5)


def test_the_command_serves_until_interrupted(tmp_path: Path):
    port = _free_port()
    code = "from gpuwarden.dashboard.cli import dashboard; dashboard()"
    argv = [
        sys.executable,
        "-c",
        code,
        "--store",
        f"sqlite:///{tmp_path}/none.db",
        "--listen",
        f"127.0.0.1:{port}",
    ]
    # its own process group: if the test fails, nothing it started outlives it
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}", timeout_s=60)
        assert httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=5).text == "ok"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert proc.returncode == 0, out.decode()
    assert f"Dashboard on http://127.0.0.1:{port}/" in out.decode()
    deadline = time.monotonic() + 10  # the streamlit child is gone with it
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)
        except httpx.TransportError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the streamlit server still answers after Ctrl-C")
