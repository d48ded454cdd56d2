"""Kept rollups put straight into the frame's cells (``_Long.on_grid``) give the frame the
points gathered and placed at the end give: rows in time then host order, hours outside the
window left out, a GPU's field met in two series (a relabelled host) combined by the larger
value, a reading no GPU gives made missing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuwarden.store._prom_reads import Target, _Long
from gpuwarden.store._prom_rollups import FIELDS_LABEL, ROLLUP
from gpuwarden.store._promapi import Flat

H = 3600.0
T0 = 1_790_000_000 // 3600 * 3600.0
FIELDS = ["power_w", "gpu_temp_c", "gpu_util_pct"]


def gpus() -> pd.DataFrame:
    frame = pd.DataFrame({
        "hostname": ["node-b", "node-a", "node-a"], "gpu": [0, 1, 0],
        "uuid": ["GPU-b0", "GPU-a1", "GPU-a0"], "model": "H100", "pci_bus_id": "",
        "rack": "", "host_label": "Hostname",
    })  # fmt: skip
    return frame.set_index("uuid", drop=False)


def packed(series: list[tuple[str, str, int, list[float], list[list[float]]]]) -> Flat:
    """(host, uuid, gpu, hours, values per hour in FIELDS order) -> one answer of rollup
    series, field k of an hour at the hour + k ms."""
    labels, counts, ts, values = [], [], [], []
    for host, uuid, gpu, hours, rows in series:
        labels.append({"__name__": ROLLUP, "Hostname": host, "UUID": uuid, "gpu": str(gpu),
                       "resolution": "3600", FIELDS_LABEL: ",".join(FIELDS)})  # fmt: skip
        points = [(h + k / 1000, v) for h, row in zip(hours, rows, strict=True)
                  for k, v in enumerate(row) if not np.isnan(v)]  # fmt: skip
        counts.append(len(points))
        ts += [t for t, _ in points]
        values += [v for _, v in points]
    return Flat(labels, np.array(counts), np.array(ts), np.array(values))


ANSWERS = [
    packed([
        ("node-a", "GPU-a0", 0, [T0 - H, T0, T0 + H], [[100, 50, 10], [110, 51, 11], [120, 52, 12]]),
        ("node-b", "GPU-b0", 0, [T0 + H, T0 + 2 * H], [[200, 60, np.nan], [210, 61, 21]]),
    ]),
    packed([
        # GPU-a0 again under another host label spelling's value: its field met twice
        ("node-a ", "GPU-a0", 0, [T0 + H, T0 + 3 * H], [[130, 40, np.nan], [140, 53, 14]]),
        ("node-a", "GPU-a1", 1, [T0 + 2 * H], [[300, 70, 101.0]]),  # 101 %: no GPU gives it
    ]),
]  # fmt: skip


@pytest.mark.parametrize("start", [T0, T0 + 1800])
def test_the_grid_gives_the_frame_the_gathered_points_give(start: float) -> None:
    end = T0 + 3 * H
    frames = []
    for grid in (False, True):
        out = _Long(FIELDS, Target(gpus()))
        if grid:
            assert out.on_grid(start, end, H)
        for flat in ANSWERS:
            out.add_packed(flat, start, end)
        frames.append(out.wide(set(), step=H))
    points, cells = frames
    pd.testing.assert_frame_equal(cells, points, check_exact=True)
    assert not out.once  # the combining path ran
    # a0 at T0 + H: power the larger of 120 and 130, temperature of 52 and 40
    row = cells[(cells["uuid"] == "GPU-a0") & (cells["ts"] == T0 + H)]
    assert row[["power_w", "gpu_temp_c"]].values.tolist() == [[130.0, 52.0]]
    assert cells["ts"].min() >= np.floor(start / H) * H and cells["ts"].max() < end
    assert np.isnan(cells.loc[cells["uuid"] == "GPU-a1", "gpu_util_pct"]).all()
    assert cells[["ts", "hostname", "gpu"]].apply(tuple, axis=1).is_monotonic_increasing
