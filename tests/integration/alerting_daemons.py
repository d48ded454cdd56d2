"""Real Prometheus (with the shipped rules) and Alertmanager for the risk-loop tests.

Both start through conftest's ``start_daemon`` with the fast settings of INTEGRATION.md: 1 s
scrapes and rule evaluations, ``group_wait: 0s`` and ``group_interval: 1s`` in Alertmanager.
Alertmanager sends its webhook with ``authorization: {type: Bearer}``, as a real deployment of
``gpuwarden serve`` needs.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import httpx

from gpuwarden.alerts import RULES_FILE


def _integration_conftest():
    # several test folders have a conftest.py, and `import conftest` gets whichever pytest
    # loaded last: load this folder's by path, under a name of its own
    name = "gpuwarden_tests_integration_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("conftest.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_conftest = _integration_conftest()
Daemon = _conftest.Daemon
free_port = _conftest.free_port
require_binary = _conftest.require_binary
start_daemon = _conftest.start_daemon
launch_victoria_metrics = _conftest.launch_victoria_metrics


def start_alertmanager(
    daemons: list[Daemon], workdir: Path, webhook_url: str, token: str, repeat: str = "1h"
) -> Daemon:
    binary = require_binary("prometheus-alertmanager")
    workdir.mkdir(parents=True, exist_ok=True)
    config = {  # JSON is YAML
        "route": {
            "receiver": "gpuwarden",
            "group_by": ["alertname", "UUID"],
            "group_wait": "0s",
            "group_interval": "1s",
            "repeat_interval": repeat,
        },
        "receivers": [
            {
                "name": "gpuwarden",
                "webhook_configs": [
                    {
                        "url": webhook_url,
                        "send_resolved": True,
                        "http_config": {"authorization": {"type": "Bearer", "credentials": token}},
                    }
                ],
            }
        ],
    }
    (workdir / "alertmanager.yml").write_text(json.dumps(config, indent=2))
    port = free_port()
    argv = [
        binary,
        f"--config.file={workdir / 'alertmanager.yml'}",
        f"--storage.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    daemon = start_daemon("alertmanager", argv, port=port, workdir=workdir)
    daemons.append(daemon)
    return daemon


def start_prometheus_with_rules(
    daemons: list[Daemon], workdir: Path, targets: list[str], alertmanager: Daemon
) -> Daemon:
    workdir.mkdir(parents=True, exist_ok=True)
    extra = {
        "rule_files": [str(RULES_FILE)],
        "alerting": {
            "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager.port}"]}]}]
        },
    }
    daemon = _conftest.launch_prometheus(workdir, targets, extra=extra)
    daemons.append(daemon)
    return daemon


def post_alerts(alertmanager: Daemon, alerts: list[dict]) -> None:
    """Push alerts into Alertmanager as Prometheus would (API v2)."""
    r = httpx.post(f"{alertmanager.url}/api/v2/alerts", json=alerts, timeout=10)
    assert r.status_code == 200, r.text
