"""The link rules beside the model (issue 17): a PCIe link below its full width for hours, and
one GPU's NVLink CRC errors growing against its own past while its node's others see none.
Each holds only with every one of its conditions, never on an unread signal, and is set by
``GPUWARDEN_LINK_RULES``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.errors import ConfigError
from gpuwarden.models.features import FEATURE_NAMES
from gpuwarden.models.rules import (
    AT_RISK,
    NVLINK_ERRORS_GROWING,
    OK,
    PCIE_LINK_DEGRADED,
    UNHEALTHY,
    LinkRules,
    held_names,
    link_reasons,
    states,
    use_link_rules,
)

# one GPU on an eight-GPU node: 12 of the last 24 h with CRC errors, ~3%/h growth over 3 days,
# 20x its own rate of the 6 days before, the node's median GPU at none
GROWING = {
    "nvlink_active_hours_24h": 12.0,
    "nvlink_crc_growth_72h": 0.03,
    "nvlink_crc_log_vs_own": np.log(20.0),
    "nvlink_crc_new_24h": 0.0,
    "nvlink_crc_per_min_24h": 0.5,
    "nvlink_crc_per_min_24h_vs_node": 0.5,
    "nvlink_crc_node_rank_24h": 1.0,
}


def _rows(*rows: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame([{**{n: 0.0 for n in FEATURE_NAMES}, **r} for r in rows])


def test_a_link_below_full_width_flags_after_the_hours_set_not_before():
    X = _rows({"pcie_width_low_run_h": 1.0}, {"pcie_width_low_run_h": 2.0})
    assert LinkRules().table(X)[PCIE_LINK_DEGRADED].tolist() == [False, True]
    assert LinkRules(pcie_hours=4).flag(X).tolist() == [False, False]
    assert LinkRules(pcie=False).flag(X).tolist() == [False, False]


def test_nvlink_growth_flags_only_with_every_condition():
    assert LinkRules().table(_rows(GROWING))[NVLINK_ERRORS_GROWING].item()
    for broken in (
        {"nvlink_active_hours_24h": 5.0},  # a few scattered hours
        {"nvlink_crc_growth_72h": -0.01},  # steady or falling
        {"nvlink_crc_log_vs_own": np.log(2.0)},  # only twice its own usual rate
        {"nvlink_crc_per_min_24h_vs_node": 0.0},  # the node's median GPU sees as many: a node issue
        {"nvlink_crc_node_rank_24h": 0.5},  # not the worst on its node
    ):
        assert not LinkRules().flag(_rows({**GROWING, **broken})).any(), broken
    # errors that started from nothing count as growth against its own past
    new = {**GROWING, "nvlink_crc_log_vs_own": 0.1, "nvlink_crc_new_24h": 1.0}
    assert LinkRules().flag(_rows(new)).all()
    assert not LinkRules(nvlink=False).flag(_rows(GROWING)).any()


def test_an_unread_signal_never_trips_a_link_rule():
    X = _rows({n: np.nan for n in FEATURE_NAMES})
    assert not LinkRules().flag(X).any()


def test_a_link_rule_marks_at_risk_and_a_hard_signal_still_wins():
    link = np.array([True, True, False])
    out = states(np.array([0.01, 0.01, 0.01]), np.array([False, True, False]), 0.65, link)
    assert out.tolist() == [AT_RISK, UNHEALTHY, OK]


def test_the_reason_says_the_widths_and_the_growth():
    X = _rows({**GROWING, "pcie_width_low_run_h": 5.0, "pcie_width_deficit_1h": 0.5})
    present = LinkRules().table(X).iloc[0]
    meta = pd.Series({"pcie_width": 8.0, "pcie_width_max": 16.0})
    said = link_reasons(X.iloc[0], meta, present)
    assert said[0] == "PCIe link running at x8 of x16 for 5 h (link rule)"
    assert said[0].features["pcie_width_low_run_h"] == 5.0
    assert said[1].startswith("NVLink CRC errors in 12 of the last 24 h, growing about 3.0% an")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", LinkRules()),
        ("on", LinkRules()),
        ("off", LinkRules(pcie=False, nvlink=False)),
        ("nvlink=off, pcie_hours=4", LinkRules(nvlink=False, pcie_hours=4.0)),
    ],
)
def test_settings_parse(text, expected):
    assert LinkRules.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "named"),
    [("pcie_hour=4", "pcie_hour=4"), ("pcie=maybe", "pcie"), ("pcie_hours=-1", "pcie_hours")],
)
def test_a_bad_setting_is_a_config_error_naming_it(text, named):
    with pytest.raises(ConfigError, match=named):
        LinkRules.parse(text)


def test_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("GPUWARDEN_LINK_RULES", "pcie=off")
    assert LinkRules.in_force() == LinkRules(pcie=False)


@pytest.fixture
def rules_reset():
    """Back to the environment's rules after the test (ask for it before ``monkeypatch``)."""
    yield
    use_link_rules(None)


def test_the_setting_in_a_config_file_is_put_in_force_by_the_command_line(
    tmp_path, rules_reset, monkeypatch
):
    """``link_rules`` is a setting like any other: the TOML file sets it, the command line puts
    it in force for score, evaluate and the closed loop, and the environment wins."""
    monkeypatch.delenv("GPUWARDEN_LINK_RULES", raising=False)
    conf = tmp_path / "gpuwarden.toml"
    conf.write_text('[gpuwarden]\nlink_rules = "nvlink=off,pcie_hours=4"\n')
    assert CliRunner().invoke(main, ["--config", str(conf), "fields"]).exit_code == 0
    assert LinkRules.in_force() == LinkRules(nvlink=False, pcie_hours=4.0)
    monkeypatch.setenv("GPUWARDEN_LINK_RULES", "off")
    assert CliRunner().invoke(main, ["--config", str(conf), "fields"]).exit_code == 0
    assert LinkRules.in_force() == LinkRules(pcie=False, nvlink=False)
    use_link_rules(None)
    assert LinkRules.in_force() == LinkRules(pcie=False, nvlink=False)  # the environment's


def test_a_bad_setting_stops_every_command_with_a_line_naming_it(rules_reset, monkeypatch):
    monkeypatch.setenv("GPUWARDEN_LINK_RULES", "pcie=maybe")
    result = CliRunner().invoke(main, ["fields"])
    assert result.exit_code != 0
    assert "link_rules (GPUWARDEN_LINK_RULES): pcie must be on or off" in result.output
    assert "Traceback" not in result.output


def test_held_names_joins_the_rules_that_hold_in_column_order():
    pcie, nvlink = PCIE_LINK_DEGRADED, NVLINK_ERRORS_GROWING
    table = pd.DataFrame({pcie: [False, True, True, False], nvlink: [False, False, True, True]})
    names = held_names(table)
    assert names.dtype == object
    assert list(names) == ["", pcie, f"{pcie}, {nvlink}", nvlink]
    assert list(held_names(table.iloc[:0])) == []
