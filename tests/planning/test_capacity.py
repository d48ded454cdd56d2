"""The capacity plan, planned-launch files and should_scale decisions on constructed cases."""

import datetime as dt

import pandas as pd
import pytest

from gpuwarden.errors import InputError
from gpuwarden.planning.capacity import Launch, load_launches, plan, should_scale


def flat(gpus: float, weeks: int = 4) -> pd.Series:
    index = pd.date_range("2027-01-04", periods=weeks * 168, freq="h", tz="UTC")
    return pd.Series(gpus, index=index)


def test_plan_is_forecast_times_buffer_with_growth_launches_and_gains():
    launch = Launch("chat v2", "H100", 20, dt.date(2027, 1, 18))
    other = Launch("vision", "A100", 50, dt.date(2027, 1, 4))
    needs = plan(flat(100), "H100", weeks=6, growth=0.1, launches=[launch, other],
                 efficiency_gain=0.2, buffer=1.3)  # fmt: skip
    assert needs[0].need_gpus == pytest.approx(100 * 0.8 * 1.3)
    assert needs[1].launch_gpus == 0 and needs[2].launch_gpus == 20
    week5 = 100 * 1.1 ** (5 * 7 / 30.44)
    assert needs[5].base_gpus == pytest.approx(week5)
    assert needs[5].need_gpus == pytest.approx((week5 + 20) * 0.8 * 1.3)


def test_peak_basis_plans_on_the_busiest_hour():
    series = flat(10, weeks=1)
    series.iloc[5] = 30
    assert plan(series, "H100", weeks=1, basis="peak")[0].need_gpus == pytest.approx(39)
    assert plan(series, "H100", weeks=1)[0].need_gpus == pytest.approx((10 + 20 / 168) * 1.3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"buffer": 0.9}, "buffer"),
        ({"efficiency_gain": 1.0}, "efficiency gain"),
        ({"growth": -1.0}, "growth"),
        ({"weeks": 0}, "weeks"),
        ({"basis": "median"}, "basis"),
    ],
)
def test_plan_refuses_bad_inputs(kwargs, message):
    with pytest.raises(InputError, match=message):
        plan(flat(10), "H100", **kwargs)


def test_add_now_when_the_fleet_is_already_short():
    needs = plan(flat(100), "H100", weeks=4)  # 130 needed every week
    d = should_scale(needs, 100, "H100", lead_weeks=4)
    assert (d.action, d.gpus, d.in_weeks) == ("add", 30, 0)
    assert "add 30 GPUs now" in str(d)


def test_add_in_k_weeks_when_a_launch_comes_later():
    launch = Launch("chat v2", "H100", 50, dt.date(2027, 3, 1))  # week 8
    needs = plan(flat(100), "H100", weeks=12, launches=[launch])
    d = should_scale(needs, 140, "H100", lead_weeks=3)
    assert (d.action, d.in_weeks) == ("add", 5)
    assert d.gpus == 195 - 140  # (100 + 50) x 1.3
    assert "in 5 weeks" in str(d)


def test_release_when_even_the_peak_leaves_gpus_idle():
    needs = plan(flat(50), "H100", weeks=8)  # 65 needed
    d = should_scale(needs, 100, "H100")
    assert (d.action, d.gpus) == ("release", 35)


def test_hold_within_the_margin():
    needs = plan(flat(70), "H100", weeks=8)  # 91 needed
    assert should_scale(needs, 95, "H100", release_margin=0.1).action == "hold"
    assert should_scale(needs, 95, "H100", release_margin=0.0).action == "release"


def test_should_scale_refuses_bad_inputs():
    needs = plan(flat(10), "H100")
    with pytest.raises(InputError, match="lead time"):
        should_scale(needs, 10, "H100", lead_weeks=-1)
    with pytest.raises(InputError, match="no plan"):
        should_scale([], 10, "H100")


def test_launches_file(tmp_path):
    path = tmp_path / "launches.toml"
    path.write_text(
        '[[launch]]\nname = "chat v2"\ngpu_model = "H100"\ngpus = 16\nstart = 2027-02-01\n'
        'end = "2027-06-01"\ntenant = "search"\n'
    )
    [launch] = load_launches(path)
    assert launch == Launch(
        "chat v2", "H100", 16.0, dt.date(2027, 2, 1), dt.date(2027, 6, 1), "search"
    )
    assert launch.live(dt.date(2027, 5, 31)) and not launch.live(dt.date(2027, 6, 1))


@pytest.mark.parametrize(
    "text, message",
    [
        ('[[launch]]\nname = "x"\ngpu_model = "H100"\ngpus = 4\n', "launch 1: missing 'start'"),
        ('[[launch]]\nname = "x"\ngpu_model = "H100"\ngpus = -4\nstart = 2027-01-01\n',
         "launch 'x': gpus must be a number > 0"),
        ('[[launch]]\nname = "x"\ngpu_model = "H100"\ngpus = 4\nstart = "soon"\n',
         "launch 'x': start: must be a date"),
        ('[[launch]]\nname = "x"\ngpu_model = "H100"\ngpus = 4\nstart = 2027-02-01\n'
         "end = 2027-01-01\n", "end 2027-01-01 is not after start"),
        ('[[launch]]\nname = "x"\ngpu_model = "H100"\ngpus = 4\nstart = 2027-01-01\ngpu = 1\n',
         "unknown key"),
        ('name = "x"\n', "unknown top-level key"),
        ("[[launch]\n", "not valid TOML"),
    ],
)  # fmt: skip
def test_launches_file_errors_name_the_problem(tmp_path, text, message):
    path = tmp_path / "launches.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_launches(path)


def test_missing_launches_file(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_launches(tmp_path / "nope.toml")
