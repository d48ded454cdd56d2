"""gpuwarden.readings: DCGM blank sentinels by field type, boards without a memory sensor, and
plausible ranges make a reading missing, counted with its reason."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from gpuwarden import readings
from gpuwarden.readings import SENTINELS, check, check_columns, reason, screen
from gpuwarden.telemetry import (
    FIELDS,
    FIELDS_BY_NAME,
    NON_NEGATIVE,
    REJECT_REASONS,
    Batch,
    GpuId,
    Rejection,
    Sample,
)

F = FIELDS_BY_NAME
T4 = GpuId("n1", 0, "GPU-t4", model="Tesla T4")
H100 = GpuId("n1", 1, "GPU-h100", model="NVIDIA H100 80GB HBM3")
#: an int32 DCGM field (DCGM defines none of ours as int32: its field types are int64 and double)
INT32_FIELD = dataclasses.replace(F["energy_mj"], name="int32_counter", dcgm_type="int32")
TYPED = {"int32": INT32_FIELD, "int64": F["energy_mj"], "fp64": F["power_w"]}


def test_the_sentinel_values_are_dcgms() -> None:
    # dcgm_structs.h: *_BLANK, then NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED as + 1, 2, 3
    assert dict(SENTINELS["int32"]) == {
        "BLANK": 2147483632,
        "NOT_FOUND": 2147483633,
        "NOT_SUPPORTED": 2147483634,
        "NOT_PERMISSIONED": 2147483635,
    }
    assert list(SENTINELS["int64"].values()) == [
        9223372036854775792,
        9223372036854775793,
        9223372036854775794,
        9223372036854775795,
    ]
    assert list(SENTINELS["fp64"].values()) == [
        140737488355328.0,
        140737488355329.0,
        140737488355330.0,
        140737488355331.0,
    ]


@pytest.mark.parametrize(
    "family, name", [(t, n) for t, values in SENTINELS.items() for n in values]
)
def test_every_sentinel_of_every_family_is_missing_on_a_field_of_that_type(
    family: str, name: str
) -> None:
    value = float(SENTINELS[family][name])  # as the Prometheus text is parsed: float64
    assert reason(TYPED[family], value) == "sentinel"
    assert readings.is_blank(value, family)  # type: ignore[arg-type]
    assert reason(TYPED[family], value + 1e6) == "sentinel"  # IS_BLANK is v >= BLANK


@pytest.mark.parametrize("name", list(SENTINELS["int32"]))
def test_an_int32_sentinel_is_an_ordinary_reading_of_an_int64_energy_counter(name: str) -> None:
    value = float(SENTINELS["int32"][name])  # 2147483632 mJ: 600 kWh, a month of an H100
    assert reason(INT32_FIELD, value) == "sentinel"
    assert reason(F["energy_mj"], value) is None
    values, rejected = check(1.0, H100, {"energy_mj": value})
    assert values == {"energy_mj": value} and rejected == []
    assert reason(INT32_FIELD, readings.DCGM_INT32_BLANK - 1.0) is None


@pytest.mark.parametrize(
    "text",
    [
        "9223372036854775794",  # DCGM_INT64_NOT_SUPPORTED, as NVIDIA's README shows it
        "9223372036854775808",  # 2**63
        "9.223372036854776e+18",  # Go's and Prometheus' float rendering
        "9223372036854776000",  # the same, as the gpu-monitoring-tools README prints it
        "9.22337203685477e+18",  # an export that cut the digits: just under 2**63
    ],
)
def test_an_int64_sentinel_parsed_as_float_is_missing(text: str) -> None:
    value = float(text)
    assert value == 2.0**63 or abs(value - 2.0**63) < 2.0**63 * 1e-9
    assert reason(F["mem_temp_c"], value, "NVIDIA H100 80GB HBM3") == "sentinel"
    assert reason(F["energy_mj"], value) == "sentinel"
    assert reason(F["energy_mj"], 2.0**62) is None  # a big counter is still a counter


def test_fp64_sentinels_apply_only_to_double_fields() -> None:
    assert reason(F["power_w"], 140737488355330.0) == "sentinel"
    assert reason(F["gr_engine_active"], 140737488355328.0) == "sentinel"
    assert reason(F["energy_mj"], 140737488355328.0) is None  # int64: 39 GWh, but possible


def test_dcgm_types_follow_dcgm_fields_cpp() -> None:
    doubles = {f.name for f in FIELDS if f.dcgm_type == "fp64"}
    assert doubles == {"power_w", "power_limit_w", "gr_engine_active", "tensor_active"}
    assert {f.dcgm_type for f in FIELDS} == {"int64", "fp64"}


@pytest.mark.parametrize(
    "model, key, sensor, tdp",
    [
        ("Tesla T4", "T4", False, 70),
        ("NVIDIA L4", "L4", False, 72),
        ("NVIDIA A10G", "A10G", False, 300),
        ("NVIDIA A10", "A10", False, 150),
        ("NVIDIA L40S", "L40S", False, 350),
        ("NVIDIA A16", "A16", False, 250),
        ("NVIDIA A2", "A2", False, 60),
        ("NVIDIA A40", "A40", False, 300),
        ("NVIDIA RTX 2000 Ada Generation", "RTX", False, 1500),
        ("Quadro RTX 8000", "RTX", False, 1500),
        ("Quadro P6000", "P6000", False, 1500),
        ("Quadro GV100", "GV100", True, 1500),
        ("GRID A100-10C", "GRID", False, 1500),  # a vGPU guest sees no memory temperature
        ("Tesla V100-SXM2-16GB", "V100", True, 350),
        ("NVIDIA A100-SXM4-80GB", "A100", True, 500),
        ("NVIDIA A30", "A30", True, 165),
        ("NVIDIA H100 80GB HBM3", "H100", True, 700),
        ("", "", True, 1500),
        ("Some Future GPU", "SOME", True, 1500),
    ],
)
def test_boards_by_model_name(model: str, key: str, sensor: bool, tdp: float) -> None:
    assert readings.model_key(model) == key
    assert readings.has_memory_sensor(model) is sensor
    assert readings.tdp_w(model) == tdp


def test_a_t4_memory_temperature_of_0_is_missing_and_its_gpu_temperature_kept() -> None:
    values, rejected = check(5.0, T4, {"gpu_temp_c": 74.0, "mem_temp_c": 0.0, "power_w": 68.2})
    assert values == {"gpu_temp_c": 74.0, "power_w": 68.2}
    assert rejected == [Rejection(5.0, T4, "mem_temp_c", "no_sensor", 0.0)]
    same = {"gpu_temp_c": 60.0, "mem_temp_c": 0.0}
    assert check(5.0, H100, same) == (same, [])  # an HBM board at 0 C is cold, not absent


def test_an_out_of_range_power_reading_is_missing_and_counted() -> None:
    values, rejected = check(5.0, T4, {"power_w": 141.0, "gpu_temp_c": 50.0})
    assert values == {"gpu_temp_c": 50.0}
    assert rejected == [Rejection(5.0, T4, "power_w", "out_of_range", 141.0)]
    assert check(5.0, T4, {"power_w": 140.0})[1] == []  # 2 x 70 W
    assert check(5.0, H100, {"power_w": 1400.0})[1] == []
    unknown = T4._replace(model="")
    assert check(5.0, unknown, {"power_w": 3000.0})[1] == []  # 2 x the generous default
    assert check(5.0, unknown, {"power_w": -1.0})[1][0].reason == "out_of_range"


@pytest.mark.parametrize(
    "name, good, bad",
    [
        ("gpu_temp_c", [-10, 0, 74, 130], [-11, 131, 255]),
        ("gpu_util_pct", [0, 100], [-1, 101]),
        ("gr_engine_active", [0, 0.5, 1], [1.5, -0.1]),
        ("sm_clock_mhz", [0, 1980, 5000], [5001]),
        ("mem_clock_mhz", [405, 5000, 9001], [-5, 30000]),
        ("pcie_link_width", [1, 2, 4, 8, 16, 32], [0, 3, 12, 64]),
        ("pcie_link_gen", [1, 4, 5, 6], [0, 7, 4.5]),
        ("remapped_rows_pending", [0, 1], [2, 0.5]),
        ("ecc_dbe_volatile_total", [0, 3, 1e12], [-1]),
    ],
)
def test_plausible_ranges_from_the_catalogue(name: str, good: list, bad: list) -> None:
    for v in good:
        assert reason(F[name], float(v), "NVIDIA H100 80GB HBM3") is None, v
    for v in bad:
        assert reason(F[name], float(v), "NVIDIA H100 80GB HBM3") == "out_of_range", v


def test_nan_is_missing_without_being_counted() -> None:
    assert check(1.0, H100, {"gpu_temp_c": math.nan, "power_w": 300.0}) == (
        {"power_w": 300.0},
        [],
    )


def test_screen_keeps_the_other_fields_and_is_done_once() -> None:
    clean = Sample(1.0, H100, {"gpu_temp_c": 60.0})
    sick = Sample(1.0, T4, {"gpu_temp_c": 74.0, "mem_temp_c": 0.0, "gpu_util_pct": 2147483634.0})
    earlier = Rejection(1.0, H100, "power_w", "sentinel", 2.0**63)
    batch = screen(Batch(1.0, samples=(clean, sick), rejected=(earlier,)))
    assert batch.screened and batch.samples[0] is clean
    assert batch.samples[1].values == {"gpu_temp_c": 74.0}
    assert [(r.field, r.reason) for r in batch.rejected] == [
        ("power_w", "sentinel"),
        ("mem_temp_c", "no_sensor"),
        ("gpu_util_pct", "out_of_range"),  # an int32 sentinel on an int64 field: impossible
    ]
    assert screen(batch) is batch


def test_columns_are_judged_as_single_readings_are() -> None:
    models = np.array(["Tesla T4", "NVIDIA H100 80GB HBM3", "", "NVIDIA L4"] * 5)
    grid = [0.0, 74.0, -20.0, 600.0, 2.0**63, 140737488355328.0, 2147483632.0, math.nan]
    grid += [16.0, 3.0, 0.5, 1.0, 1e6, -1.0, 5000.0, 99.0]
    grid += [math.inf, -math.inf, 1e308, math.inf]
    values = {f.name: np.array(grid) for f in FIELDS}
    codes = check_columns(values, models)
    for f in FIELDS:
        want = [reason(f, v, m) for v, m in zip(grid, models, strict=True)]
        code = codes.get(f.name, np.zeros(len(grid), dtype=np.int8))
        got = [None if c == 0 else REJECT_REASONS[c - 1] for c in code]
        assert got == want, f.name
    assert values["gpu_temp_c"][4] == 2.0**63  # nothing changed in place


def test_a_column_with_one_impossible_reading_among_possible_ones_is_found() -> None:
    """``check_columns`` skips a column whose smallest and largest readings are possible on
    every board: one impossible reading anywhere, for any board, must still be seen."""
    models = np.array(["Tesla T4", "NVIDIA H100 80GB HBM3", "", "NVIDIA L4"] * 5)
    odd = [0.0, 74.0, -20.0, 600.0, 2.0**63, 2147483632.0, 1e6, -1.0, 5000.0, 99.0, math.inf]
    for f in FIELDS:
        b = f.bounds
        plain = next((v for v in (b.lo, 1.0, 0.0) if all(reason(f, v, m) is None for m in models
                                                          if f.sensor != "hbm")), b.lo)  # fmt: skip
        for at in (0, 1, 7, 19):
            for v in odd:
                col = np.full(len(models), plain)
                col[::3] = np.nan
                col[at] = v
                code = check_columns({f.name: col}, models).get(f.name)
                got = [None if code is None or c == 0 else REJECT_REASONS[c - 1]
                       for c in (code if code is not None else [0] * len(col))]  # fmt: skip
                want = [reason(f, x, m) for x, m in zip(col, models, strict=True)]
                assert got == want, (f.name, at, v)


def test_non_negative_is_the_default_bounds() -> None:
    assert F["energy_mj"].bounds == NON_NEGATIVE and F["energy_mj"].sensor == ""


def test_infinity_is_out_of_range_even_without_an_upper_bound() -> None:
    # issue 15: +inf passed the >= 0 test of a counter, and check() dropped it uncounted
    inf = math.inf
    values, rejected = check(5.0, H100, {"pcie_replay_total": inf, "gpu_temp_c": -inf})
    assert values == {}
    assert [(r.field, r.reason) for r in rejected] == [
        ("pcie_replay_total", "out_of_range"),
        ("gpu_temp_c", "out_of_range"),
    ]
    codes = check_columns({"pcie_replay_total": np.array([inf, -inf, 3.0])}, np.array([""] * 3))
    assert codes["pcie_replay_total"].tolist() == [3, 3, 0]
    assert reason(F["mem_temp_c"], inf, "Tesla T4") == "no_sensor"  # as check_columns says


def test_gpu_indices_and_times_have_one_rule() -> None:
    assert readings.gpu_index("7") == 7 and readings.gpu_index(" 4294967295 ") == 2**32 - 1
    for text in ("4294967296", "99999999999999999999", "-1", "1e3", "1.0", "", "٣", "+1"):
        assert readings.gpu_index(text) is None, text
    got = readings.bad_gpu_indices(np.array([0, 2**32 - 1, 2**32, -1, 1.5, math.inf, math.nan]))
    assert got.tolist() == [False, False, True, True, True, True, False]
    ts = np.array([-5, 0, 946684800, 1.7e9, 4102444800, 1.7e12, math.inf, math.nan])
    assert readings.bad_times(ts).tolist() == [True, True, False, False, True, True, True, False]
    assert [readings.is_time(t) for t in ts[:4]] == [False, False, True, True]
    assert readings.time_problem(1.7e12) == "looks like milliseconds; expected Unix seconds"
    assert readings.time_problem(-5) == "is outside 2000-01-01..2100-01-01"
