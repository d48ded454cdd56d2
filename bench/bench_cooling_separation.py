"""Which thermal signals keep a failing cold plate apart from benign drift (issue 17, wave 16).

    .venv/bin/python bench/bench_cooling_separation.py
    .venv/bin/python bench/bench_cooling_separation.py --drifts 0,1,2 --magnitude 0.3
    .venv/bin/python bench/bench_cooling_separation.py --drifts 0,0.5,1.5,1.5/0,0.5/1.5

Cooling-only fleets (the default simulator with only ``cooling_degradation`` failing), one per
benign drift (sd in C on core, HBM and node, daily knots; ``GPU/NODE`` sets the per-GPU sd on
core and HBM apart from the per-node one). Rows every 6 h after the first
week: positives lie 1-7 days before a cooling failure, healthy rows belong to boards that do
not fail within 30 days. Per signal, one threshold for all the fleets (the pooled healthy
99.9th percentile) and, per fleet, the share of positives above it and healthy rows above it
per 1,000: a signal that only works on one kind of fleet shows it.

- ``spread_rise_c``, ``spread_rise_vs_fleet``, ``hbm_load_rise_vs_fleet`` and
  ``core_load_rise_vs_fleet``: features (``compute_features``);
- ``hbm_c_per_kw_rise``: the slope of hourly HBM temperature on power over the last day minus
  the slope over the 6 days before (C per kW; a failing plate's rise grows with load), computed
  here: it is not a feature;
- ``hbm_load_rise_vs_node``, ``spread_rise_vs_node``: HBM temperature at the same power and the
  spread rise, minus the median of the GPU's node, scaled as the fleet features are (wave 19's
  check: a node's drift cancels, a GPU's own does not); computed here, not features.
"""

from __future__ import annotations

import argparse

import numpy as np
from tqdm import tqdm

from gpuwarden import tuning
from gpuwarden.config import load_settings

#: shipped features first (read from ``compute_features``), then the one computed here
FEATURES = (
    "spread_rise_c",
    "spread_rise_vs_fleet",
    "hbm_load_rise_vs_fleet",
    "core_load_rise_vs_fleet",
)
SIGNALS = (*FEATURES, "hbm_c_per_kw_rise", "hbm_load_rise_vs_node", "spread_rise_vs_node")


def _slope(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Least-squares slope of y on x per column (NaN under 8 pairs or without spread in x)."""
    ok = np.isfinite(y) & np.isfinite(x)
    k = ok.sum(axis=0)
    xm = np.where(ok, x, 0).sum(axis=0) / np.maximum(k, 1)
    ym = np.where(ok, y, 0).sum(axis=0) / np.maximum(k, 1)
    dx, dy = np.where(ok, x - xm, 0), np.where(ok, y - ym, 0)
    sxx = (dx * dx).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((k >= 8) & (sxx > 0), (dx * dy).sum(axis=0) / sxx, np.nan)


def per_watt_rise(panel, t: int) -> np.ndarray:
    mem = panel.gauge["mem_temp_c"].astype(float)
    power = panel.gauge["power_w"].astype(float)
    last = _slope(mem[t - 23 : t + 1], power[t - 23 : t + 1])
    before = _slope(mem[t - 167 : t - 23], power[t - 167 : t - 23])
    return (last - before) * 1000.0


def vs_node(panel, rows: np.ndarray, meta, X) -> dict[str, np.ndarray]:
    """Rises against the GPU's node at one scoring hour: minus the node's median, then against
    the fleet's as the fleet features are (``features.against_fleet``)."""
    import pandas as pd

    from gpuwarden.models.features import Windows, _load_rise, against_fleet

    w = Windows(
        rows[:, 0], rows[:, 1], panel.first, n_buckets=panel.shape[0],
        last_fraction=panel.last_fraction,
    )  # fmt: skip
    rises = {
        "hbm_load_rise_vs_node": _load_rise(w, panel.gauge["mem_temp_c"], panel.gauge["power_w"]),
        "spread_rise_vs_node": X["spread_rise_c"].to_numpy(np.float64),
    }
    out = {}
    for name, v in rises.items():
        s = pd.Series(v, dtype=float)
        rel = s - s.groupby(meta["hostname"].to_numpy()).transform("median")
        out[name] = against_fleet(rel, [np.zeros(len(rel))])
    return out


def fleet_rows(
    drift: str, *, nodes: int, days: float, seed: int, magnitude: float
) -> dict[str, dict[str, np.ndarray]]:
    from gpuwarden.models.features import compute_features, rows_at
    from gpuwarden.models.simdata import fleet_spec, simulate_panel

    spec = fleet_spec(
        nodes=nodes,
        days=days,
        seed=seed,
        kinds=("cooling_degradation",),
        thermal_drift_core_c=float(drift.split("/")[0]),
        thermal_drift_hbm_c=float(drift.split("/")[0]),
        thermal_drift_node_c=float(drift.split("/")[-1]),
        thermal_drift_period_h=24.0,
        precursor_magnitude=magnitude,
    )
    panel = simulate_panel(spec).panel
    fail = panel.keys["fail_ts"].to_numpy(np.float64)
    cooling = panel.keys["fail_kind"].astype(str).to_numpy() == "cooling_degradation"
    out: dict[str, dict[str, list[np.ndarray]]] = {"pos": {}, "healthy": {}}
    for t in range(24 * 8, panel.shape[0], 6):
        rows = rows_at(panel, [t])
        meta, X = compute_features(panel, rows)
        g = rows[:, 1]
        values = {s: X[s].to_numpy(np.float64) for s in FEATURES}
        values["hbm_c_per_kw_rise"] = per_watt_rise(panel, t)[g]
        values.update(vs_node(panel, rows, meta, X))
        ahead = fail[g] - meta["at"].to_numpy()
        groups = {
            "pos": cooling[g] & (ahead >= 86400) & (ahead <= 7 * 86400),
            "healthy": ~(ahead <= 30 * 86400),
        }
        for name, mask in groups.items():
            for s, v in values.items():
                out[name].setdefault(s, []).append(v[mask])
    return {
        name: {s: (lambda a: a[np.isfinite(a)])(np.concatenate(v)) for s, v in d.items()}
        for name, d in out.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--drifts", default="0,0.5,1.5", help="benign drift sd per fleet (C), or GPU/NODE sds"
    )
    ap.add_argument("--nodes", type=int, default=24)
    ap.add_argument("--days", type=float, default=40.0)
    ap.add_argument("--seed", type=int, default=78)
    ap.add_argument("--magnitude", type=float, default=1.0, help="precursor magnitude factor")
    args = ap.parse_args()
    tuning.apply(load_settings())
    drifts = args.drifts.split(",")
    fleets = {
        d: fleet_rows(d, nodes=args.nodes, days=args.days, seed=args.seed, magnitude=args.magnitude)
        for d in tqdm(drifts, desc="cooling-only fleets", unit="fleet")
    }
    head = " | ".join(f"drift {d} C: positives, healthy /1,000" for d in drifts)
    print(f"\n| signal | pooled healthy p99.9 | {head} |")
    print("|---|---:|" + "---:|" * len(drifts))
    for s in SIGNALS:
        cut = float(np.percentile(np.concatenate([f["healthy"][s] for f in fleets.values()]), 99.9))
        cells = []
        for d in drifts:
            pos, healthy = fleets[d]["pos"][s], fleets[d]["healthy"][s]
            cells.append(
                f"{np.mean(pos > cut):.0%} of {pos.size}, {np.mean(healthy > cut) * 1000:.1f}"
            )
        print(f"| `{s}` | {cut:.2f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
