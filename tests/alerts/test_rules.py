"""The shipped alert rules pass `promtool check rules` and their unit tests (`promtool test rules`)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuwarden.alerts import RULES_FILE

HERE = Path(__file__).parent


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing: .ci/run must apt-get install prometheus")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return path


def test_rules_are_valid():
    out = subprocess.run(
        [promtool(), "check", "rules", str(RULES_FILE)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "15 rules found" in out.stdout


def test_rule_unit_tests_pass():
    out = subprocess.run(
        [promtool(), "test", "rules", "gpuwarden.rules.test.yml"],
        capture_output=True,
        text=True,
        cwd=HERE,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_rule_has_a_unit_test():
    import yaml

    rules = yaml.safe_load(RULES_FILE.read_text())
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    tests = yaml.safe_load((HERE / "gpuwarden.rules.test.yml").read_text())
    tested = {
        t["alertname"]
        for case in tests["tests"]
        for t in case["alert_rule_test"]
        if t["exp_alerts"]
    }
    assert names == tested


def test_the_drift_alert_fires_where_score_warns():
    """GpuFleetTemperatureDrift's line is ``score.SPREAD_DRIFT_LIMIT_C``, the shipped model's
    training range: the rule, its description, the card and the warning say the same number."""
    import yaml

    from gpuwarden.models.score import SPREAD_DRIFT_LIMIT_C

    rules = yaml.safe_load(RULES_FILE.read_text())
    rule = next(
        r for g in rules["groups"] for r in g["rules"] if r["alert"] == "GpuFleetTemperatureDrift"
    )
    assert (
        rule["expr"].strip() == f"gpuwarden_fleet_spread_drift_celsius > {SPREAD_DRIFT_LIMIT_C:g}"
    )
    assert f"trained on up to {SPREAD_DRIFT_LIMIT_C:g} C" in rule["annotations"]["description"]
    # ... and the shipped model's card, which records its training fleets' drift
    from gpuwarden.models.artifact import load_model
    from gpuwarden.models.score import CARD_DRIFT_KEY, drift_limit

    card = load_model().card
    assert card[CARD_DRIFT_KEY]["fleets"] == 22  # 25 training fleets, 3 without HBM temperature
    assert drift_limit(card) == SPREAD_DRIFT_LIMIT_C
