"""The Grafana folder is drop-in: dashboards and provisioning agree with each other.

(Whether every query returns data is tests/integration/test_grafana_queries.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

GRAFANA = Path(__file__).resolve().parents[2] / "grafana"
BOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
DS = {"type": "prometheus", "uid": "${datasource}"}


def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_two_dashboards_with_unique_uids():
    uids = {load(p)["uid"] for p in BOARDS}
    assert uids == {"gpuwarden-fleet", "gpuwarden-gpu"}


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.name)
def test_every_panel_uses_the_datasource_variable(path: Path):
    board = load(path)
    seen_ids = set()
    for p in panels(board["panels"]):
        assert p["id"] not in seen_ids, f"duplicate panel id {p['id']}"
        seen_ids.add(p["id"])
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == DS, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DS and t["expr"].strip(), p["title"]
    names = [v["name"] for v in board["templating"]["list"]]
    assert names[0] == "datasource"
    for p in panels(board["panels"]):
        for t in p.get("targets", []):
            for var in re.findall(r"\$(\w+)", t["expr"]):
                assert var in names or var.startswith("__"), f"{p['title']}: unknown ${var}"


def test_gpu_dashboard_has_host_and_gpu_variables():
    board = load(GRAFANA / "dashboards" / "gpuwarden-gpu.json")
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert {"Hostname", "gpu"} <= set(variables)
    assert "$Hostname" in variables["gpu"]["query"]["query"]


def test_links_point_at_existing_dashboards():
    uids = {load(p)["uid"] for p in BOARDS}
    text = "".join(p.read_text() for p in BOARDS)
    for uid in re.findall(r"/d/([\w-]+)/", text):
        assert uid in uids


def test_provisioning_matches_the_dashboards():
    ds = yaml.safe_load((GRAFANA / "provisioning/datasources/gpuwarden.yaml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["uid"] == "gpuwarden-prometheus"
    for path in BOARDS:
        var = load(path)["templating"]["list"][0]
        assert var["type"] == "datasource" and var["current"]["value"] == source["uid"]
    prov = yaml.safe_load((GRAFANA / "provisioning/dashboards/gpuwarden.yaml").read_text())
    (provider,) = prov["providers"]
    assert provider["type"] == "file"
    path = provider["options"]["path"]
    assert path in (GRAFANA / "README.md").read_text()


def _exprs(path: Path) -> str:
    return "\n".join(t["expr"] for p in panels(load(path)["panels"]) for t in p.get("targets", []))


def test_the_risk_panels_show_gpuwardens_verdicts():
    fleet = _exprs(GRAFANA / "dashboards" / "gpuwarden-fleet.json")
    for name in (
        "gpuwarden_risk_score",
        "gpuwarden_gpu_state",
        "gpuwarden_decisions_total",  # transitions on serve's /metrics
        "gpuwarden_gpu_transition",  # ... and written into a time-series store
    ):
        assert name in fleet, name
    one = _exprs(GRAFANA / "dashboards" / "gpuwarden-gpu.json")
    assert "gpuwarden_risk_score" in one and "gpuwarden_gpu_state" in one


def test_every_gpuwarden_series_a_dashboard_reads_is_one_gpuwarden_makes():
    source = "\n".join(p.read_text() for p in (GRAFANA.parent / "gpuwarden").rglob("*.py"))
    for path in BOARDS:
        for name in set(re.findall(r"\bgpuwarden_\w+", _exprs(path))):
            base = name.removesuffix("_total")  # prometheus_client adds it to counters
            made = re.search(rf"\b({name}|{base})\b", source)
            assert made, f"{path.name}: nothing in gpuwarden/ exports or writes {name}"
