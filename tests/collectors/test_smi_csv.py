"""smi_csv.read_query_csv on small hand-made logs: nounits, no index column, -l repeats, bad
rows with their line numbers, impossible readings screened, local time."""

from __future__ import annotations

from datetime import timedelta, timezone

import pytest

from gpuwarden.collectors.smi_csv import read_query_csv, read_query_csv_rows, value
from gpuwarden.errors import InputError

U0 = "GPU-11111111-1111-1111-1111-111111111111"
U1 = "GPU-22222222-2222-2222-2222-222222222222"
LOG = f"""timestamp, uuid, pci.bus_id, name, temperature.gpu, power.draw [W], memory.used [MiB]
2026/01/01 00:00:00.000, {U0}, 00000000:17:00.0, NVIDIA H100 80GB HBM3, 40, 100.50 W, 10 MiB
2026/01/01 00:00:00.010, {U1}, 00000000:2A:00.0, NVIDIA H100 80GB HBM3, 41, [N/A], 20 MiB
2026/01/01 00:01:00.000, {U1}, 00000000:2A:00.0, NVIDIA H100 80GB HBM3, 42, 101.00 W, 21 MiB
2026/01/01 00:01:00.000, {U0}, 00000000:17:00.0, NVIDIA H100 80GB HBM3, 43, 102.00 W, 11 MiB
"""


def test_without_an_index_column_gpus_are_numbered_in_the_order_they_first_appear() -> None:
    batch = read_query_csv(LOG, hostname="n1")
    assert [(s.gpu.index, s.gpu.uuid, s.values["gpu_temp_c"]) for s in batch.samples] == [
        (0, U0, 40), (1, U1, 41), (1, U1, 42), (0, U0, 43)
    ]  # fmt: skip
    assert batch.samples[0].ts == 1767225600.0
    assert batch.samples[1].values == {"gpu_temp_c": 41, "fb_used_mib": 20}
    assert batch.ts == 1767225660.0
    assert batch.problems == () and batch.nodes == ()


def test_nounits_and_a_repeated_header_read_the_same() -> None:
    header, *rows = LOG.splitlines()
    plain = "\n".join([header, *rows[:2], header, *rows[2:]]).replace(" W,", ",")
    plain = plain.replace(" MiB", "").replace(" [W]", "").replace(" [MiB]", "")
    a, b = read_query_csv(LOG, hostname="n1"), read_query_csv(plain, hostname="n1")
    assert b.samples == a.samples and b.problems == ()


def test_bad_rows_are_named_by_line_and_the_rest_kept() -> None:
    text = (
        LOG.replace("41, [N/A]", "warm, [N/A]").replace(
            "2026/01/01 00:01:00.000, " + U1, "yesterday, " + U1
        )
        + "2026/01/01 00:02:00.000, only three, cells\n"
    )
    got = read_query_csv_rows(text, hostname="n1")
    assert got.bad_rows == [
        (3, "temperature.gpu 'warm' is not a number"),
        (4, "timestamp 'yesterday' is not nvidia-smi's YYYY/MM/DD HH:MM:SS.mmm"),
        (6, "3 cells, the header has 7"),
    ]
    assert got.rows_read == 5
    assert [s.values["gpu_temp_c"] for s in got.batch.samples] == [40, 43]
    assert got.batch.problems[0] == "line 3: temperature.gpu 'warm' is not a number"


def test_impossible_readings_are_screened_out() -> None:
    batch = read_query_csv(LOG.replace(", 40, ", ", 900, "), hostname="n1")
    assert "gpu_temp_c" not in batch.samples[0].values
    assert [(r.field, r.value) for r in batch.rejected] == [("gpu_temp_c", 900.0)]


def test_local_time_is_read_in_the_zone_given() -> None:
    cet = timezone(timedelta(hours=1))
    batch = read_query_csv(LOG, hostname="n1", tz=cet)
    assert batch.samples[0].ts == 1767225600.0 - 3600


def test_header_less_output_is_refused() -> None:
    with pytest.raises(InputError, match="header naming timestamp"):
        read_query_csv(LOG.split("\n", 1)[1], hostname="n1")
    with pytest.raises(InputError, match="empty"):
        read_query_csv("\n\n", hostname="n1")


@pytest.mark.parametrize(
    ("cell", "unit", "want"),
    [("72.35 W", "W", 72.35), ("81559 MiB", "MiB", 81559), ("45 %", "%", 45),
     ("1980 MHz", "MHz", 1980), ("1980", "MHz", 1980), ("[N/A]", "W", None),
     ("N/A", "", None), ("Enabled", "", 1), ("No", "", 0), ("0x0000000000000004", "", 4)],
)  # fmt: skip
def test_value_strips_the_unit(cell: str, unit: str, want: float | None) -> None:
    assert value(cell, unit) == want


def test_a_value_in_another_unit_is_refused() -> None:
    with pytest.raises(ValueError):
        value("72.35 kW", "W")


Q_OLD = """
==============NVSMI LOG==============

Timestamp                                 : Mon Jan  1 00:00:00 2024
Driver Version                            : 470.57.02
CUDA Version                              : 11.4

Attached GPUs                             : 2
GPU 00000000:17:00.0
    Product Name                          : A100-SXM4-40GB
    GPU UUID                              : GPU-aaaa
    ECC Errors
        Volatile
            Single Bit
                Device Memory             : 3
                Total                     : 5
            Double Bit
                Total                     : 0
        Aggregate
            Single Bit
                Total                     : 7
            Double Bit
                Total                     : 1
    Retired Pages
        Single Bit ECC                    : 2
        Double Bit ECC                    : 1
        Pending Page Blacklist            : Yes
    Remapped Rows
        Correctable Error                 : 1
        Uncorrectable Error               : 2
        Pending                           : Yes
        Remapping Failure Occurred        : No
    Temperature
        GPU Current Temp                  : 31 C
    Power Readings
        Power Draw                        : 60.10 W
        Enforced Power Limit              : 400.00 W
GPU 00000000:2A:00.0
    Product Name                          : A100-SXM4-40GB
    GPU UUID                              : GPU-bbbb
    Temperature
        GPU Current Temp                  : warm
        Memory Current Temp               : 35 C
"""


def test_q_of_an_older_driver_with_two_gpus() -> None:
    from gpuwarden.collectors.smi_text import read_query_text

    batch = read_query_text(Q_OLD, hostname="n1")
    a, b = batch.samples
    assert (a.gpu.index, a.gpu.uuid, a.gpu.pci_bus_id) == (0, "GPU-aaaa", "00000000:17:00.0")
    assert dict(a.values) == {
        "ecc_sbe_volatile_total": 5, "ecc_dbe_volatile_total": 0,
        "ecc_sbe_aggregate_total": 7, "ecc_dbe_aggregate_total": 1,
        "retired_pages_sbe": 2, "retired_pages_dbe": 1, "retired_pages_pending": 1,
        "remapped_rows_correctable": 1, "remapped_rows_uncorrectable": 2,
        "remapped_rows_pending": 1, "remapped_rows_failure": 0,
        "gpu_temp_c": 31, "power_w": 60.1, "power_limit_w": 400,
    }  # fmt: skip
    assert (b.gpu.index, dict(b.values)) == (1, {"mem_temp_c": 35})
    assert batch.problems == (
        "gpu 1 (00000000:2A:00.0): cannot read Temperature / GPU Current Temp = 'warm'",
    )
    assert batch.ts == 1704067200.0
    assert batch.nodes[0].driver_version == "470.57.02"


def test_an_index_beyond_32_bits_or_a_time_before_2000_is_a_bad_row() -> None:
    # issue 15: "99999999999999999999".isdigit() made a GPU index no store can hold
    header = "timestamp, index, uuid, temperature.gpu"
    text = "\n".join(
        [
            header,
            f"2026/01/01 00:00:00.000, 99999999999999999999, {U0}, 40",
            f"2026/01/01 00:00:00.000, 4294967296, {U0}, 40",
            f"1969/12/31 23:59:55.000, 0, {U0}, 40",
            f"2026/01/01 00:00:00.000, 4294967295, {U0}, 41",
        ]
    )
    got = read_query_csv_rows(text, hostname="n1")
    assert got.bad_rows == [
        (2, "index '99999999999999999999' is not a GPU index (0..4294967295)"),
        (3, "index '4294967296' is not a GPU index (0..4294967295)"),
        (4, "timestamp '1969/12/31 23:59:55.000' is outside 2000-01-01..2100-01-01"),
    ]
    assert [(s.gpu.index, s.values["gpu_temp_c"]) for s in got.batch.samples] == [(2**32 - 1, 41)]
