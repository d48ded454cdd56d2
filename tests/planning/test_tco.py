"""TCO per used GPU-hour: a hand-computed break-even, the price file's checks, the split."""

import numpy as np
import pytest

from gpuwarden.errors import InputError
from gpuwarden.planning.tco import OWN_FIELDS, chart, load_prices, parse_prices, split

SIMPLE = {
    "own": {
        "purchase_usd": 10000, "depreciation_years": 5, "maintenance_share_per_year": 0,
        "power_busy_w": 1000, "power_idle_w": 0, "pue": 1.0, "electricity_usd_per_kwh": 0.1,
        "space_usd_per_gpu_month": 0, "staff_usd_per_gpu_year": 0,
    },
    "bare_metal": {"usd_per_gpu_hour": 0.6},
    "cloud": {"on_demand": 1.0, "reserved": 0.7, "spot": 0.4},
    "spot_overhead": 1.25,
}  # fmt: skip


def simple(**own):
    table = {**SIMPLE, "own": {**SIMPLE["own"], **own}}
    return parse_prices({"X": table})["X"]


def test_break_even_by_hand():
    p = simple()
    # own: 2,000 a year of depreciation + 1 kW x 8,760 h x $0.1 x u; cloud: $1 x 8,760 h x u
    assert p.break_even() == pytest.approx(2000 / (8760 - 876))
    assert p.per_used_hour("own", 0.5) == pytest.approx((2000 + 438) / 4380)
    assert p.break_even("bare_metal") == pytest.approx(0.6)
    assert p.break_even("cloud_reserved") == pytest.approx(0.7)
    assert p.per_used_hour("cloud_spot", 0.1) == pytest.approx(0.5)
    assert p.per_used_hour("bare_metal", 0.5) == pytest.approx(1.2)


def test_every_cost_counts():
    p = simple(maintenance_share_per_year=0.1, space_usd_per_gpu_month=50,
               staff_usd_per_gpu_year=400, pue=1.5, power_idle_w=200)  # fmt: skip
    energy = (0.2 + 0.8 * 0.5) * 8760 * 1.5 * 0.1
    assert p.own_yearly(0.5) == pytest.approx(2000 + 1000 + 600 + 400 + energy)


def test_never_breaks_even_when_owning_costs_more_than_cloud_at_full_use():
    assert simple(purchase_usd=1e6).break_even() is None


def test_owning_against_on_demand_reads_dearer_when_it_costs_more():
    """The CLI's and the Capacity page's line said "-5% cheaper" where owning cost more."""
    assert simple().own_against_on_demand(0.7).endswith("% cheaper")
    assert simple(purchase_usd=1e6).own_against_on_demand(0.7).endswith("% dearer")


def test_default_prices_are_dated_and_sourced():
    prices = load_prices()
    assert {"H100", "A100"} <= set(prices)
    for p in prices.values():
        for price in [*p.own.values(), p.bare_metal, p.on_demand, p.reserved, p.spot]:
            assert price.as_of is not None
            assert price.source.startswith(("https://", "estimate: "))


def test_default_prices_against_the_guideline():
    """>70% yearly use: owning 40-60% cheaper than cloud on-demand; <30%: cloud cheaper."""
    p = load_prices()["H100"]
    saving = 1 - p.per_used_hour("own", 0.7) / p.per_used_hour("cloud_on_demand", 0.7)
    assert 0.4 <= saving <= 0.6
    assert p.per_used_hour("own", 0.3) > p.per_used_hour("cloud_on_demand", 0.3)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t["own"].pop("pue"), "own: missing pue"),
        (lambda t: t["own"].update(pue=0.9), "pue: must be >= 1"),
        (lambda t: t["own"].update(power_idle_w=2000), "power_idle_w is above"),
        (lambda t: t["cloud"].update(spot="cheap"), "cloud.spot: must be a number"),
        (lambda t: t["cloud"].update(spot=0), "cloud.spot: must be > 0"),
        (lambda t: t["cloud"].pop("reserved"), "cloud: missing reserved"),
        (lambda t: t.pop("bare_metal"), "missing table"),
        (lambda t: t.update(gpu=1), "unknown key"),
        (lambda t: t["cloud"].update(on_demand={"source": "x"}), "needs 'value'"),
        (lambda t: t["cloud"].update(on_demand={"value": 1, "as_of": "May"}), "as_of must be"),
        (lambda t: t.update(spot_overhead=0.5), "spot_overhead"),
    ],
)
def test_price_errors_name_the_field(change, message):
    table = {**SIMPLE, "own": dict(SIMPLE["own"]), "cloud": dict(SIMPLE["cloud"])}
    change(table)
    with pytest.raises(InputError, match=message):
        parse_prices({"X": table}, "p.toml")


def test_price_file_errors(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_prices(tmp_path / "none.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[H100\n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_prices(bad)
    empty = tmp_path / "empty.toml"
    empty.write_text('[meta]\ncurrency = "USD"\n')
    with pytest.raises(InputError, match="no GPU model priced"):
        load_prices(empty)
    euro = tmp_path / "eur.toml"
    euro.write_text('[meta]\ncurrency = "EUR"\n')
    with pytest.raises(InputError, match="only USD"):
        load_prices(euro)


def test_split_owns_gpus_busy_above_break_even():
    p = simple()  # break-even about 25%
    demand = np.r_[np.full(50, 10.0), np.full(40, 14.0), np.full(10, 30.0)]
    s = split(demand, p)
    # GPU 14 is busy 50% of hours (above break-even); GPU 15..30 only 10% (below)
    assert s.base_gpus == 14
    assert s.peak_gpus == 30 and s.elastic_gpus == 16
    assert s.base_share_of_hours == pytest.approx((50 * 10 + 50 * 14) / demand.sum())


def test_chart_is_written(tmp_path):
    path = chart(simple(), tmp_path / "tco.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_own_fields_are_all_required():
    assert len(OWN_FIELDS) == len(SIMPLE["own"])
